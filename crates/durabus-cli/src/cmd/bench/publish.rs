//! Publish throughput: one caller, many callers, batches.

use std::sync::Arc;
use std::time::Instant;

use super::harness::{Bench, enqueue_batches, enqueue_concurrently, enqueue_sequentially, event};

/// One caller awaiting each durable enqueue.
pub async fn sequential(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let eps = enqueue_sequentially(&bus, n).await?;
    bus.shutdown().await?;
    Ok(eps)
}

/// `callers` tasks enqueueing at once; group commit shares each commit among them.
pub async fn concurrent(b: &Bench, n: u64, callers: usize) -> anyhow::Result<f64> {
    let bus = Arc::new(b.builder().build().await?);
    let (_, eps) = enqueue_concurrently(&bus, n, callers).await?;
    bus.shutdown().await?;
    Ok(eps)
}

/// [`concurrent`] with automatic payload snapshots at `published` (the default
/// configuration: every stage): events/s and the compressed bytes stored per event.
pub async fn concurrent_with_snapshots(
    b: &Bench,
    n: u64,
    callers: usize,
) -> anyhow::Result<(f64, f64)> {
    let bus = Arc::new(b.builder().payload_snapshots(true).build().await?);
    let (total, eps) = enqueue_concurrently(&bus, n, callers).await?;
    // The compressed size of a sample of the snapshots written.
    let sample = bus
        .history()
        .list(durabus::EventQuery {
            limit: 100,
            ..durabus::EventQuery::default()
        })
        .await?;
    let mut bytes = 0u64;
    for e in &sample {
        for s in bus.store().payload_list(e.id).await? {
            bytes += s.meta.size_compressed;
        }
    }
    bus.shutdown().await?;
    anyhow::ensure!(total > 0 && !sample.is_empty(), "nothing was published");
    Ok((eps, bytes as f64 / sample.len() as f64))
}

/// Batches of 1,000 events, one transaction each.
pub async fn batch(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let eps = enqueue_batches(&bus, n).await?;
    bus.shutdown().await?;
    Ok(eps)
}

/// The disk's own limit for the sequential figure: plain rusqlite, one row per committed
/// transaction, WAL, the same durability, on a naive table. No bus, no threads, no channels.
pub fn raw_commits(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let conn = rusqlite::Connection::open(b.path())?;
    let sync = match b.durability {
        durabus::Durability::Full => "FULL",
        _ => "NORMAL",
    };
    conn.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = {sync};
         CREATE TABLE t (id TEXT PRIMARY KEY, status TEXT NOT NULL, payload TEXT NOT NULL);
         CREATE INDEX t_status ON t(status);"
    ))?;
    let payload = event(0)?.payload;
    let start = Instant::now();
    for i in 0..n {
        conn.execute_batch("BEGIN IMMEDIATE")?;
        conn.prepare_cached("INSERT INTO t (id, status, payload) VALUES (?1, 'pending', ?2)")?
            .execute(rusqlite::params![
                durabus::EventId::new().to_string(),
                payload
            ])?;
        conn.execute_batch("COMMIT")?;
        let _ = i;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

//! Publish throughput: one caller, many callers, batches.

use std::sync::Arc;
use std::time::Instant;

use super::harness::{Bench, event};

/// One caller awaiting each durable enqueue.
pub async fn sequential(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let start = Instant::now();
    for i in 0..n {
        bus.enqueue_event(event(i)?).await?;
    }
    let eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(eps)
}

/// `callers` tasks enqueueing at once; group commit shares each commit among them.
pub async fn concurrent(b: &Bench, n: u64, callers: usize) -> anyhow::Result<f64> {
    let bus = Arc::new(b.builder().build().await?);
    let per = n / callers as u64;
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(callers);
    for c in 0..callers as u64 {
        let bus = bus.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                bus.enqueue_event(event(c * per + i)?).await?;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let eps = (per * callers as u64) as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(eps)
}

/// Batches of 1,000 events, one transaction each.
pub async fn batch(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let batches = n.div_ceil(1000);
    let start = Instant::now();
    for k in 0..batches {
        let events = (0..1000)
            .map(|i| event(k * 1000 + i))
            .collect::<anyhow::Result<Vec<_>>>()?;
        bus.enqueue_batch(events).await?;
    }
    let eps = (batches * 1000) as f64 / start.elapsed().as_secs_f64();
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

//! The `schedule` group on PostgreSQL: how long after its due time a delayed event, published in
//! this process, starts in a worker process; and publishing and draining with a million events
//! scheduled for next month in the table.

use std::time::Duration;

use durabus::Timestamp;

use super::harness::{batches, median, percentile};
use super::pg_workers::{
    EndToEnd, drop_schema, fresh, publisher_and_workers, tally, wait_completed,
};
use crate::cmd::Db;

/// The figures of the group.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    /// Handler calls beyond the first for one event, and events never handled (both 0).
    pub doubles: u64,
    pub lost: u64,
    /// A scheduled event's start in a worker process after its due time (ms).
    pub late_samples: u64,
    pub late_p50_ms: f64,
    pub late_p99_ms: f64,
    /// Scheduled events in the table of the comparison.
    pub rows: u64,
    /// Publish and drain on an empty schema and with the scheduled events (medians).
    pub empty: FullTable,
    pub full: FullTable,
}

/// Runs the group on fresh schemas of `db` (dropped afterwards), with `workers` worker
/// processes for the lateness; `say` tells what is being measured.
pub async fn run(
    db: &Db,
    workers: usize,
    quick: bool,
    runs: usize,
    say: impl Fn(&str),
) -> anyhow::Result<Figures> {
    let mut f = Figures::default();
    say("a scheduled event's start in a worker process after its due time");
    let target = fresh(db);
    let outcome = lateness(&target, workers, if quick { 100 } else { 400 }).await;
    let cleanup = drop_schema(&target).await;
    let e = outcome?;
    cleanup?;
    f.doubles = e.doubles;
    f.lost = e.lost;
    let mut late: Vec<f64> = e.latencies_us.iter().map(|us| us / 1000.0).collect();
    late.sort_by(f64::total_cmp);
    f.late_samples = late.len() as u64;
    f.late_p50_ms = percentile(&late, 0.50);
    f.late_p99_ms = percentile(&late, 0.99);

    say("publish and drain with a million events scheduled for next month");
    f.rows = if quick { 20_000 } else { 1_000_000 };
    let n = if quick { 5_000 } else { 50_000 };
    let big = fresh(db);
    let outcome = comparison(db, &big, f.rows, n, runs).await;
    let cleanup = drop_schema(&big).await;
    (f.empty, f.full) = outcome?;
    cleanup?;
    Ok(f)
}

/// Delay of each measured event: long enough that every worker has gone back to sleep on its
/// timer before the event is due.
const DELAY: Duration = Duration::from_millis(50);

/// On a fresh schema with `workers` idle worker processes: `samples` events, one every 5 ms,
/// each due 50 ms after it is published; the workers record each handler's start minus its
/// due time. Warm-up events (without a due time) go first and are not counted.
async fn lateness(db: &Db, workers: usize, samples: u64) -> anyhow::Result<EndToEnd> {
    let (bus, pool, mut procs) = publisher_and_workers(db, workers).await?;
    let warm = 100;
    for events in batches(0, warm) {
        bus.enqueue_batch(events?).await?;
    }
    wait_completed(&pool, db, i64::try_from(warm)?, Duration::from_secs(60)).await?;
    for i in 0..samples {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let due = Timestamp::now().plus(DELAY);
        bus.enqueue_event(super::schedule::due_event(i, due)?)
            .await?;
    }
    let total = warm + samples;
    wait_completed(&pool, db, i64::try_from(total)?, Duration::from_secs(60)).await?;
    procs.stop()?;
    bus.shutdown().await?;
    pool.close().await;
    tally(&procs, total)
}

/// Publish and drain on an empty schema and on one holding many scheduled events.
#[derive(Debug, Default, Clone, Copy)]
pub struct FullTable {
    /// Batches of 1,000 from this process, no worker running (events/s).
    pub publish_eps: f64,
    /// A bus in this process started on that backlog until all are handled (events/s).
    pub drain_eps: f64,
}

/// Fills `big` with `rows` events scheduled for 30 days later.
pub async fn fill_scheduled(big: &Db, rows: u64) -> anyhow::Result<()> {
    let bus = big.builder().deliver(false).build().await?;
    let later = Duration::from_secs(30 * 86_400);
    for events in batches(0, rows) {
        let events = events?.into_iter().map(|e| e.delay(later)).collect();
        bus.enqueue_batch(events).await?;
    }
    bus.shutdown().await?;
    Ok(())
}

/// One run on `target`: `n` events published in batches with no worker running, then a bus
/// started on them until all are handled.
pub async fn publish_and_drain(target: &Db, n: u64) -> anyhow::Result<FullTable> {
    let bus = std::sync::Arc::new(target.builder().build().await?);
    let counter = std::sync::Arc::new(super::harness::Counter::default());
    counter.subscribe(&bus).await?;
    let publish_eps = super::harness::enqueue_batches(&bus, n).await?;
    // Fresh statistics on both schemas alike (autovacuum would get there on its own time): a
    // table created seconds ago has none, and its plans would be judged, not the backlog.
    analyze(target).await?;
    let started = std::time::Instant::now();
    bus.start().await?;
    counter.wait_for(n, Duration::from_secs(600)).await?;
    let drain_eps = n as f64 / started.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(FullTable {
        publish_eps,
        drain_eps,
    })
}

/// Publish and drain on fresh empty schemas and on `big` filled with `rows` scheduled events,
/// `runs` times each, interleaved: the medians (empty, full).
async fn comparison(
    db: &Db,
    big: &Db,
    rows: u64,
    n: u64,
    runs: usize,
) -> anyhow::Result<(FullTable, FullTable)> {
    fill_scheduled(big, rows).await?;
    let (mut empty, mut full) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let target = fresh(db);
        let outcome = publish_and_drain(&target, n).await;
        drop_schema(&target).await?;
        empty.push(outcome?);
        full.push(publish_and_drain(big, n).await?);
    }
    let med = |v: &[FullTable]| FullTable {
        publish_eps: median(v.iter().map(|f| f.publish_eps).collect()),
        drain_eps: median(v.iter().map(|f| f.drain_eps).collect()),
    };
    Ok((med(&empty), med(&full)))
}

/// `ANALYZE` of the events table of `target`'s schema.
async fn analyze(target: &Db) -> anyhow::Result<()> {
    use durabus::sqlx::{self, AssertSqlSafe};
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&target.target)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ANALYZE \"{}\".events",
        target.schema
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(())
}

//! Scheduled events across PostgreSQL worker processes: how long after its due time a delayed
//! event, published in this process, starts in a worker process.

use std::time::Duration;

use durabus::Timestamp;

use super::harness::batches;
use super::pg_workers::{EndToEnd, publisher_and_workers, tally, wait_completed};
use crate::cmd::Db;

/// Delay of each measured event: long enough that every worker has gone back to sleep on its
/// timer before the event is due.
const DELAY: Duration = Duration::from_millis(50);

/// On a fresh schema with `workers` idle worker processes: `samples` events, one every 5 ms,
/// each due 50 ms after it is published; the workers record each handler's start minus its
/// due time. Warm-up events (without a due time) go first and are not counted.
pub async fn lateness(db: &Db, workers: usize, samples: u64) -> anyhow::Result<EndToEnd> {
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

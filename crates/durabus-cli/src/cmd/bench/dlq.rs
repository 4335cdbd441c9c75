//! The dead-letter listing with many dead events.

use std::time::Instant;

use durabus::{InsertMode, Outcome, Page};

use super::harness::{Bench, batches, median};

/// Fills a database with `n` dead events, then times the first page of the listing (ms).
pub async fn first_page(b: &Bench, n: u64, runs: usize) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let store = bus.store();
    let now = bus.clock().now();
    for events in batches(0, n) {
        let events = events?;
        let k = events.len();
        store.insert(events, InsertMode::Pending, now).await?;
        let claimed = store.claim_due(now, k).await?;
        let dead = claimed
            .into_iter()
            .map(|e| Outcome::Dead {
                id: e.id,
                retry_count: 4,
                errors: vec!["benchmark failure".into(); 4],
                delivered: vec![],
            })
            .collect();
        store.record_many(dead, now).await?;
    }
    let dlq = bus.dlq();
    let _ = dlq.list(Page::default()).await?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let page = dlq.list(Page::default()).await?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            page.len() as u64 == n.min(100),
            "short page: {}",
            page.len()
        );
    }
    bus.shutdown().await?;
    Ok(median(times))
}

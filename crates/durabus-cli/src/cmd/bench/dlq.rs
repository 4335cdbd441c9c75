//! The dead-letter listing with many dead events.

use std::time::Instant;

use durabus::{InsertMode, Outcome, Page};

use super::harness::{Bench, event, median};

/// Fills a database with `n` dead events, then times the first page of the listing (ms).
pub async fn first_page(b: &Bench, n: u64, runs: usize) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let store = bus.store();
    let now = bus.clock().now();
    let mut i = 0;
    while i < n {
        let k = (n - i).min(1000);
        let events = (i..i + k).map(event).collect::<anyhow::Result<Vec<_>>>()?;
        store.insert(events, InsertMode::Pending, now).await?;
        let claimed = store.claim_due(now, k as usize).await?;
        let writes = claimed.into_iter().map(|e| {
            let store = store.clone();
            async move {
                store
                    .record(
                        Outcome::Dead {
                            id: e.id,
                            retry_count: 4,
                            errors: vec!["benchmark failure".into(); 4],
                            delivered: vec![],
                        },
                        now,
                    )
                    .await
            }
        });
        for r in futures_join(writes).await {
            r?;
        }
        i += k;
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

/// Runs the futures concurrently on the runtime and collects their results in order.
async fn futures_join<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        if let Ok(v) = h.await {
            out.push(v);
        }
    }
    out
}

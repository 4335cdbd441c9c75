//! The cost of a `/metrics` scrape on a database with a large history and many dead letters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::MetricsConfig;

use super::harness::{Bench, Counter, batches, median};

/// Scrape times (ms).
#[derive(Debug, Default)]
pub struct Scrape {
    /// A scrape that reads the store gauges (every gauge query, then the encoding).
    pub refresh_ms: f64,
    /// A scrape served from the gauge cache (the encoding and the process figures).
    pub cached_ms: f64,
}

/// Delivers `history` events through a bus (all `done`), adds `dead` dead letters, then times
/// `runs` scrapes that refresh the gauges and `runs` that hit the cache.
pub async fn scrape(b: &Bench, history: u64, dead: u64, runs: usize) -> anyhow::Result<Scrape> {
    let path = b.path();
    {
        let bus = b.builder_at(&path).build().await?;
        let counter = Arc::new(Counter::default());
        counter.subscribe(&bus).await?;
        bus.start().await?;
        for events in batches(0, history) {
            bus.enqueue_batch(events?).await?;
        }
        counter.wait_for(history, Duration::from_secs(900)).await?;
        super::dlq::fill(&bus, dead).await?;
        bus.shutdown().await?;
    }
    let time = |bus: durabus::EventBus| async move {
        bus.metrics_text().await?;
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let text = bus.metrics_text().await?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            anyhow::ensure!(
                text.contains("durabus_dead_letters{status=\"pending\"}"),
                "no dead-letter gauge in the scrape"
            );
            anyhow::ensure!(
                text.contains("durabus_store_up 1"),
                "the scrape could not read the store: a failed read is not what is timed"
            );
        }
        bus.shutdown().await?;
        anyhow::Ok(median(times))
    };
    let always = MetricsConfig {
        gauge_refresh: Duration::ZERO,
        ..MetricsConfig::default()
    };
    let refresh_ms = time(b.builder_at(&path).metrics(always).build().await?).await?;
    let cached_ms = time(b.builder_at(&path).build().await?).await?;
    Ok(Scrape {
        refresh_ms,
        cached_ms,
    })
}

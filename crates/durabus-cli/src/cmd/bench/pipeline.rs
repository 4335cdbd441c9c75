//! Delivery figures: end to end, latency, recovery, memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::{Event, InsertMode, SubscribeOptions};
use tokio::sync::mpsc;

use super::harness::{Bench, Counter, batches, event, percentile, rss_mb};

const LIMIT: Duration = Duration::from_secs(300);

/// Events per second from the first publish until a no-op handler has seen all `n`.
pub async fn end_to_end(b: &Bench, n: u64) -> anyhow::Result<(f64, f64)> {
    let (store, builder) = b.store_and_builder().await?;
    let bus = builder.build().await?;
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    bus.start().await?;
    let start = Instant::now();
    push(&bus, 0, n).await?;
    counter.wait_for(n, LIMIT).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    let (transactions, _) = store.write_stats();
    Ok((eps, n as f64 / transactions.max(1) as f64))
}

/// Publish → handler start, one event at a time on an idle bus: (p50, p99) in µs.
pub async fn latency(b: &Bench, samples: usize) -> anyhow::Result<(f64, f64)> {
    let bus = b.builder().build().await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    bus.subscribe(
        "bench.*",
        move |_e: Event| {
            let _ = tx.send(Instant::now());
            async { Ok(()) }
        },
        SubscribeOptions::default(),
    )
    .await?;
    bus.start().await?;
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples + 50 {
        let ev = event(i as u64)?;
        // Idle between events, as a quiet service would be.
        tokio::time::sleep(Duration::from_micros(200)).await;
        let start = Instant::now();
        bus.enqueue_event(ev).await?;
        let seen = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("handler channel closed"))?;
        if i >= 50 {
            lat.push(seen.duration_since(start).as_secs_f64() * 1e6);
        }
    }
    bus.shutdown().await?;
    lat.sort_by(|a, b| a.total_cmp(b));
    Ok((percentile(&lat, 0.50), percentile(&lat, 0.99)))
}

/// `start()` with `n` events stuck in `processing` until all are handled, in ms.
pub async fn recovery(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    let store = bus.store();
    for events in batches(0, n) {
        store
            .insert(events?, InsertMode::Claimed, bus.clock().now())
            .await?;
    }
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    let start = Instant::now();
    let recovered = bus.start().await?;
    anyhow::ensure!(recovered == n, "recovered {recovered} of {n}");
    counter.wait_for(n, LIMIT).await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    bus.shutdown().await?;
    Ok(ms)
}

/// Resident memory before and after pushing `n` events through the bus, in MB.
pub async fn rss(b: &Bench, n: u64) -> anyhow::Result<(f64, f64)> {
    let bus = b.builder().build().await?;
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    bus.start().await?;
    // Warm up so allocator pools and caches exist before the first reading.
    let warm = 20_000.min(n);
    push(&bus, 0, warm).await?;
    counter.wait_for(warm, LIMIT).await?;
    let start = rss_mb();
    push(&bus, warm, n).await?;
    counter.wait_for(n, LIMIT).await?;
    let end = rss_mb();
    bus.shutdown().await?;
    Ok((start, end))
}

/// Publishes events `from..to` in batches of 1,000.
async fn push(bus: &durabus::EventBus, from: u64, to: u64) -> anyhow::Result<()> {
    for events in batches(from, to) {
        bus.enqueue_batch(events?).await?;
    }
    Ok(())
}

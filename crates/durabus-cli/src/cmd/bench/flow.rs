//! Flow control: end to end with a concurrency limit of 64 on the handler's subscription,
//! against end to end without one, in the same run and on the same store, alternating.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::{Actor, ActorKind, BusBuilder, SubscribeOptions};
use serde::Serialize;

use super::harness::{Bench, Counter, batches, median};

/// The concurrency limit of the limited runs.
const LIMIT: u32 = 64;

/// The figures of the `flow` group.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Figures {
    /// Events per run.
    pub flow_events: u64,
    /// End to end without a limit, and with a concurrency limit of 64 (medians, ev/s).
    pub unlimited_e2e_eps: f64,
    pub limited_e2e_eps: f64,
}

/// Events per second from the first publish until a no-op handler has seen all `n`, on a bus
/// from `builder` whose subscription has a concurrency limit of `limit`, or none.
pub async fn end_to_end(builder: BusBuilder, n: u64, limit: Option<u32>) -> anyhow::Result<f64> {
    let bus = builder.build().await?;
    let counter = Arc::new(Counter::default());
    counter
        .subscribe_with(&bus, SubscribeOptions::default().name("bench-flow"))
        .await?;
    if let Some(max) = limit {
        let bench = Actor::new("bench", ActorKind::Cli);
        bus.concurrency_limits()
            .set("bench-flow", max, None, &bench)
            .await?;
    }
    // Start reads the limits before the first claim.
    bus.start().await?;
    let start = Instant::now();
    for events in batches(0, n) {
        bus.enqueue_batch(events?).await?;
    }
    counter.wait_for(n, Duration::from_secs(600)).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(eps)
}

/// Runs the group on fresh SQLite databases: `runs` of each, alternating.
pub async fn run(b: &Bench, n: u64, runs: usize) -> anyhow::Result<Figures> {
    let (mut plain, mut limited) = (Vec::new(), Vec::new());
    for run in 0..runs {
        b.say(&format!("end to end without a limit (run {})", run + 1));
        plain.push(end_to_end(b.builder(), n, None).await?);
        b.say(&format!(
            "end to end with a concurrency limit of {LIMIT} (run {})",
            run + 1
        ));
        limited.push(end_to_end(b.builder(), n, Some(LIMIT)).await?);
    }
    b.cleanup();
    Ok(Figures {
        flow_events: n,
        unlimited_e2e_eps: median(plain),
        limited_e2e_eps: median(limited),
    })
}

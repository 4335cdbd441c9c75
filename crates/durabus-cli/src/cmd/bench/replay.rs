//! Replay at scale: a large selection replayed unthrottled, and a rate-limited replay while
//! the bus delivers and one caller keeps publishing.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durabus::{
    Actor, ActorKind, EventBus, ReplayHooks, ReplayRequest, ReplaySelection, RunOptions,
};

use super::harness::{Bench, Counter, enqueue_batches, percentile};

/// Fills the database with `n` pending events (the bus not started: nothing delivers them).
async fn fill(bus: &EventBus, n: u64) -> anyhow::Result<()> {
    enqueue_batches(bus, n).await?;
    Ok(())
}

fn every() -> ReplaySelection {
    ReplaySelection {
        all: true,
        ..ReplaySelection::default()
    }
}

fn actor() -> Actor {
    Actor::new("bench", ActorKind::Cli)
}

/// Replays `n` stored events unthrottled (re-publish mode, default chunk): events/s.
pub async fn unthrottled(b: &Bench, n: u64) -> anyhow::Result<f64> {
    let bus = b.builder().build().await?;
    fill(&bus, n).await?;
    let replays = bus.replays();
    let op = replays
        .submit(&ReplayRequest::new(every()), &actor())
        .await?;
    anyhow::ensure!(op.total == n, "selected {} of {n}", op.total);
    let start = Instant::now();
    let done = replays
        .run(&op.id, &RunOptions::default(), &ReplayHooks::new(), |_| {})
        .await?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(done.processed == n, "replayed {} of {n}", done.processed);
    bus.shutdown().await?;
    Ok(n as f64 / secs)
}

/// The rate-limited figures.
#[derive(Debug, Default)]
pub struct Limited {
    /// The limit asked for (events/s).
    pub target: u32,
    /// The rate over the 10 s from second 1 (or over what follows second 1 of a shorter run).
    pub measured_eps: f64,
    /// The window (every 10 s window after the first second) furthest from the target.
    pub worst_window_eps: f64,
    /// One caller's publish latency while the replay ran, and just before it (ms).
    pub live_p99_ms: f64,
    pub baseline_p99_ms: f64,
}

/// One caller publishes in a loop until `stop`; every latency (ms).
async fn one_caller(bus: EventBus, stop: Arc<std::sync::atomic::AtomicBool>) -> Vec<f64> {
    let mut lat = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let start = Instant::now();
        if bus.enqueue("bench.live", &1).await.is_err() {
            break;
        }
        lat.push(start.elapsed().as_secs_f64() * 1e3);
        // A live caller publishes, it does not spin: about 1,000 events/s.
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lat
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    percentile(&v, 0.99)
}

/// The rate of the window `[from, from + width]` from progress samples `(s, processed)`: the
/// samples nearest inside each end.
fn window_rate(samples: &[(f64, u64)], from: f64, width: f64) -> Option<f64> {
    let first = samples.iter().find(|(t, _)| *t >= from)?;
    let last = samples.iter().rev().find(|(t, _)| *t <= from + width)?;
    (last.0 > first.0).then(|| (last.1 - first.1) as f64 / (last.0 - first.0))
}

/// Replays `rate × seconds` events at `rate` on a started bus (a counting no-op handler on
/// every type) while one caller publishes: the measured rate and that caller's p99.
pub async fn limited(b: &Bench, rate: u32, seconds: u64) -> anyhow::Result<Limited> {
    let n = u64::from(rate) * seconds;
    let bus = b.builder().build().await?;
    fill(&bus, n).await?;
    // Delivered before the replay: the live table holds only what the run adds.
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    bus.start().await?;
    counter.wait_for(n, Duration::from_secs(600)).await?;

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let baseline = {
        let caller = tokio::spawn(one_caller(bus.clone(), stop.clone()));
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        p99(caller.await?)
    };
    stop.store(false, std::sync::atomic::Ordering::Relaxed);

    let replays = bus.replays();
    let selection = every().types(["bench.order.*"]);
    let op = replays
        .submit(&ReplayRequest::new(selection).rate_limit(rate), &actor())
        .await?;
    anyhow::ensure!(op.total == n, "selected {} of {n}", op.total);
    let caller = tokio::spawn(one_caller(bus.clone(), stop.clone()));
    let samples = Arc::new(Mutex::new(vec![(0.0, 0u64)]));
    let start = Instant::now();
    let s = samples.clone();
    let done = replays
        .run(
            &op.id,
            &RunOptions::default(),
            &ReplayHooks::new(),
            move |op| {
                if let Ok(mut s) = s.lock() {
                    s.push((start.elapsed().as_secs_f64(), op.processed));
                }
            },
        )
        .await?;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let live = caller.await?;
    anyhow::ensure!(done.processed == n, "replayed {} of {n}", done.processed);
    let samples = samples
        .lock()
        .map_err(|_| anyhow::anyhow!("progress samples poisoned"))?
        .clone();
    let end = samples.last().map_or(0.0, |s| s.0);
    let width = (end - 1.0).clamp(0.5, 10.0);
    let measured = window_rate(&samples, 1.0, width).unwrap_or(0.0);
    let target = f64::from(rate);
    let mut worst = measured;
    let mut from = 1.0;
    while from + width <= end {
        if let Some(r) = window_rate(&samples, from, width)
            && (r - target).abs() > (worst - target).abs()
        {
            worst = r;
        }
        from += 0.1;
    }
    bus.shutdown().await?;
    Ok(Limited {
        target: rate,
        measured_eps: measured,
        worst_window_eps: worst,
        live_p99_ms: p99(live),
        baseline_p99_ms: baseline,
    })
}

#[cfg(test)]
mod tests {
    use super::window_rate;

    #[test]
    fn a_window_rate_uses_the_samples_inside_it() {
        let samples: Vec<(f64, u64)> = (0..=30).map(|i| (i as f64 * 0.5, i * 1_000)).collect();
        assert_eq!(window_rate(&samples, 1.0, 10.0), Some(2_000.0));
        assert_eq!(window_rate(&samples, 20.0, 10.0), None);
    }
}

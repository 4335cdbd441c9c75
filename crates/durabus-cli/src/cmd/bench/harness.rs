//! Shared pieces of the benchmark: fresh databases, a counting no-op handler, medians, RSS.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use durabus::{
    BusBuilder, Durability, Event, EventBus, NewEvent, SqliteOptions, SqliteStore, SubscribeOptions,
};
use tokio::sync::Notify;

pub struct Bench {
    pub durability: Durability,
    dir: tempfile::TempDir,
    verbose: bool,
    next: AtomicU64,
}

impl Bench {
    pub fn new(durability: Durability, verbose: bool) -> anyhow::Result<Self> {
        Ok(Bench {
            durability,
            dir: tempfile::tempdir().context("cannot create a temporary directory")?,
            verbose,
            next: AtomicU64::new(0),
        })
    }

    pub fn say(&self, what: &str) {
        if self.verbose {
            eprintln!("  measuring {what} …");
        }
    }

    /// Says what one measurement found, on a terminal run (as [`Bench::say`]).
    pub fn note(&self, what: &str) {
        if self.verbose {
            eprintln!("    {what}");
        }
    }

    /// A builder on a new, empty database file.
    pub fn builder(&self) -> BusBuilder {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("bench-{n}.db"));
        EventBus::builder().sqlite(path).durability(self.durability)
    }

    /// A builder on the database at `path` (new or not).
    pub fn builder_at(&self, path: &std::path::Path) -> BusBuilder {
        EventBus::builder()
            .sqlite(path)
            .durability(self.durability)
            .concurrency(slots())
    }

    /// A new database path.
    pub fn path(&self) -> std::path::PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir.path().join(format!("bench-{n}.db"))
    }

    /// A new SQLite store, kept at hand for its write statistics, and a builder on it.
    pub async fn store_and_builder(&self) -> anyhow::Result<(Arc<SqliteStore>, BusBuilder)> {
        let options = SqliteOptions {
            durability: self.durability,
            ..SqliteOptions::default()
        };
        let store = Arc::new(SqliteStore::open(self.path(), options).await?);
        let builder = EventBus::builder()
            .store(store.clone())
            .concurrency(slots());
        Ok((store, builder))
    }

    /// Runs `f` once to warm up, then `runs` times, returning the measurements.
    pub async fn repeat<T, F, Fut>(&self, runs: usize, mut f: F) -> anyhow::Result<Vec<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        f().await?;
        self.cleanup();
        let mut out = Vec::with_capacity(runs);
        for _ in 0..runs {
            out.push(f().await?);
            self.cleanup();
        }
        Ok(out)
    }

    /// Deletes the databases of finished measurements, so the kernel writing back their pages
    /// does not slow the next one down.
    pub fn cleanup(&self) {
        if let Ok(entries) = std::fs::read_dir(self.dir.path()) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// A payload of about 200 bytes of JSON.
pub fn event(i: u64) -> anyhow::Result<NewEvent> {
    Ok(NewEvent::new(
        "bench.order.created",
        &serde_json::json!({
            "order_id": i,
            "customer": "customer-0001-with-a-reasonably-long-identifier",
            "items": [{"sku": "SKU-12345", "qty": 2, "price_cents": 1999},
                      {"sku": "SKU-67890", "qty": 1, "price_cents": 4999}],
            "currency": "EUR",
            "note": "benchmark payload"
        }),
    )?)
}

/// Events `from..to` in batches of 1,000.
pub fn batches(from: u64, to: u64) -> impl Iterator<Item = anyhow::Result<Vec<NewEvent>>> {
    (from..to)
        .step_by(1000)
        .map(move |start| (start..(start + 1000).min(to)).map(event).collect())
}

/// One caller awaiting each durable enqueue of `n` events: events/s.
pub async fn enqueue_sequentially(bus: &EventBus, n: u64) -> anyhow::Result<f64> {
    let start = std::time::Instant::now();
    for i in 0..n {
        bus.enqueue_event(event(i)?).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `callers` tasks enqueueing `n / callers` events each, all at once: (events enqueued,
/// events/s).
pub async fn enqueue_concurrently(
    bus: &Arc<EventBus>,
    n: u64,
    callers: usize,
) -> anyhow::Result<(u64, f64)> {
    let per = n / callers as u64;
    let start = std::time::Instant::now();
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
    let total = per * callers as u64;
    Ok((total, total as f64 / start.elapsed().as_secs_f64()))
}

/// `n` events in batches of 1,000, one call each: events/s.
pub async fn enqueue_batches(bus: &EventBus, n: u64) -> anyhow::Result<f64> {
    let start = std::time::Instant::now();
    for events in batches(0, n) {
        bus.enqueue_batch(events?).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Counts deliveries; wakes a waiter when a target is reached.
///
/// The handler wakes the waiter only once the count it waits for is reached: a wake for every
/// delivery would put a thread wake-up per event (the waiter's, on the bench's own thread) into
/// the pipeline being measured.
#[derive(Default)]
pub struct Counter {
    seen: AtomicU64,
    /// The count [`wait_for`](Self::wait_for) waits for; 0: nobody waits.
    goal: AtomicU64,
    wake: Notify,
}

impl Counter {
    /// Subscribes a no-op handler that counts.
    pub async fn subscribe(self: &Arc<Self>, bus: &EventBus) -> anyhow::Result<()> {
        self.subscribe_with(bus, SubscribeOptions::default()).await
    }

    /// [`subscribe`](Self::subscribe) with `options` (a name, say).
    pub async fn subscribe_with(
        self: &Arc<Self>,
        bus: &EventBus,
        options: SubscribeOptions,
    ) -> anyhow::Result<()> {
        let c = self.clone();
        bus.subscribe(
            "bench.*",
            move |_e: Event| {
                let seen = c.seen.fetch_add(1, Ordering::SeqCst) + 1;
                let goal = c.goal.load(Ordering::SeqCst);
                if goal != 0 && seen >= goal {
                    c.wake.notify_one();
                }
                async { Ok(()) }
            },
            options,
        )
        .await?;
        Ok(())
    }

    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::SeqCst)
    }

    /// Waits until `target` deliveries were seen (at most `limit`).
    pub async fn wait_for(&self, target: u64, limit: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        // Set before the count is read: a delivery that reaches the goal after the read sees
        // it and wakes this waiter (both sequentially consistent).
        self.goal.store(target.max(1), Ordering::SeqCst);
        let reached = async {
            while self.seen() < target {
                let notified = self.wake.notified();
                if self.seen() >= target {
                    break;
                }
                anyhow::ensure!(
                    tokio::time::timeout_at(deadline, notified).await.is_ok()
                        || self.seen() >= target,
                    "only {} of {target} events delivered within {limit:?}",
                    self.seen()
                );
            }
            Ok(())
        }
        .await;
        // Nobody waits any more: the deliveries after the goal (a bench publishing its next
        // round) wake no one until the next wait sets its own.
        self.goal.store(0, Ordering::SeqCst);
        reached
    }
}

/// Resident memory of this process in MB (Linux; 0 elsewhere).
pub fn rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Delivery slots of benchmark buses: the bus default unless `DURABUS_BENCH_SLOTS` says.
pub fn slots() -> usize {
    std::env::var("DURABUS_BENCH_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(durabus::BusConfig::default().concurrency)
}

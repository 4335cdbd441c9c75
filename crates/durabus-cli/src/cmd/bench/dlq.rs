//! Dead letters at scale: the listings and the groups with many records, and a bulk retry
//! while publishers keep publishing.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use durabus::{
    Action, Actor, ActorKind, BulkRequest, DeadLetterFilter, DeadLetterStatus, EventBus,
    InsertMode, Keyset, NewEvent, Outcome, Page, RunOptions,
};

use super::harness::{Bench, median};

/// Event types of the dead letters (a listing filters by one of them).
const TYPES: u64 = 10;
/// Failing subscriptions (so this many failure groups).
const GROUPS: u64 = 100;

/// A death without its `system.dead_letter` announcement (the listings are what is measured).
fn quiet_death(id: durabus::EventId, event_type: &str, sub: &str) -> durabus::dlq::Death {
    let errors = vec![format!("attempt 4 [{sub}]: benchmark failure"); 4];
    let mut d = durabus::dlq::Death::new(
        id,
        event_type,
        Some(sub),
        "benchmark failure",
        Vec::new(),
        errors,
        4,
        durabus::DeadLetterPolicy::default(),
    );
    // Filled straight into the store: no announcements (they would be claimed as work).
    d.announcement = None;
    d.new_group = None;
    d
}

/// Fills the bus's store with `n` dead letters over [`TYPES`] types and [`GROUPS`] groups.
pub(super) async fn fill(bus: &EventBus, n: u64) -> anyhow::Result<()> {
    let store = bus.store();
    let now = bus.clock().now();
    let mut i = 0u64;
    while i < n {
        let k = (n - i).min(1_000);
        let events = (i..i + k)
            .map(|j| NewEvent::new(&format!("bench.t{}", j % TYPES), &j))
            .collect::<durabus::Result<Vec<_>>>()?;
        i += k;
        store.insert(events, InsertMode::Pending, now).await?;
        let claimed = store.claim_due(now, k as usize).await?;
        let dead = claimed
            .into_iter()
            .map(|e| {
                let sub = format!("sub-{}", e.payload.parse::<u64>().unwrap_or(0) % GROUPS);
                Outcome::Dead {
                    id: e.id,
                    retry_count: 4,
                    errors: vec!["benchmark failure".into(); 4],
                    delivered: vec![],
                    death: Box::new(quiet_death(e.id, &e.event_type, &sub)),
                }
            })
            .collect();
        store.record_many(dead, now).await?;
    }
    Ok(())
}

/// Timings over a queue of `n` dead letters, in ms (medians of `runs`).
#[derive(Debug, Default)]
pub struct Listings {
    /// The spec's listing (dead events), first page.
    pub events_first_page: f64,
    /// Records filtered by type and status, first page.
    pub records_first_page: f64,
    /// The failure groups.
    pub groups: f64,
}

async fn time<T, F, Fut>(runs: usize, mut f: F) -> anyhow::Result<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    f().await?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f().await?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(times))
}

/// Fills a database with `n` dead letters, then times the listings and the groups.
pub async fn listings(b: &Bench, n: u64, runs: usize) -> anyhow::Result<Listings> {
    let bus = b.builder().build().await?;
    fill(&bus, n).await?;
    let dlq = bus.dlq();
    let records = bus.dead_letters();
    let filter = DeadLetterFilter {
        event_type: Some("bench.t3".into()),
        status: vec![DeadLetterStatus::Pending],
        ..DeadLetterFilter::default()
    };
    let out = Listings {
        events_first_page: time(runs, || async {
            let page = dlq.list(Page::default()).await?;
            anyhow::ensure!(
                page.len() as u64 == n.min(100),
                "short page: {}",
                page.len()
            );
            Ok(())
        })
        .await?,
        records_first_page: time(runs, || async {
            let page = records.list(filter.clone(), Keyset::default()).await?;
            anyhow::ensure!(
                page.items.len() as u64 == (n / TYPES).min(50),
                "short page: {}",
                page.items.len()
            );
            Ok(())
        })
        .await?,
        groups: time(runs, || async {
            let groups = records.groups(50).await?;
            anyhow::ensure!(
                groups.len() as u64 == GROUPS.min(n).min(50),
                "groups: {}",
                groups.len()
            );
            Ok(())
        })
        .await?,
    };
    bus.shutdown().await?;
    Ok(out)
}

/// The bulk retry figure.
#[derive(Debug, Default)]
pub struct Bulk {
    /// Dead letters retried per second by the bulk operation.
    pub retry_eps: f64,
    /// Publishers' p99 latency while it ran (ms).
    pub publish_p99_ms: f64,
    /// Publishers' p99 latency before it started, same database (ms).
    pub baseline_p99_ms: f64,
}

/// `publishers` callers enqueue in a loop until `stop`; returns every latency (ms).
async fn publish_while(bus: &EventBus, publishers: usize, stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut tasks = Vec::with_capacity(publishers);
    for _ in 0..publishers {
        let bus = bus.clone();
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                if bus.enqueue("live.order", &1).await.is_err() {
                    break;
                }
                lat.push(start.elapsed().as_secs_f64() * 1e3);
            }
            lat
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap_or_default());
    }
    all
}

fn p99(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 * 0.99) as usize).min(v.len() - 1)]
}

/// Bulk retry of `n` dead letters while `publishers` callers publish: the bulk rate and the
/// publishers' p99 during it (and for a second before it, as the baseline).
pub async fn bulk_retry(
    bus: &EventBus,
    n: u64,
    publishers: usize,
    chunk: Option<usize>,
) -> anyhow::Result<Bulk> {
    fill(bus, n).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let baseline = {
        let run = publish_while(bus, publishers, stop.clone());
        let timer = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            stop.store(true, Ordering::Relaxed);
        };
        let (lat, ()) = tokio::join!(run, timer);
        p99(lat)
    };
    stop.store(false, Ordering::Relaxed);
    let actor = Actor::new("bench", ActorKind::Cli);
    let op = bus
        .dead_letters()
        .submit(
            &BulkRequest {
                filter: DeadLetterFilter {
                    event_type: Some("bench.*".into()),
                    ..DeadLetterFilter::default()
                },
                action: Action::Retry,
                all: false,
            },
            &actor,
        )
        .await?;
    let ops = bus.operations();
    let options = RunOptions {
        chunk,
        ..RunOptions::default()
    };
    let run = publish_while(bus, publishers, stop.clone());
    let bulk = async {
        let start = Instant::now();
        let done = ops.run(&op.id, &options, |_| {}).await;
        let secs = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        done.map(|op| (op, secs))
    };
    let (lat, done) = tokio::join!(run, bulk);
    let (op, secs) = done?;
    anyhow::ensure!(op.processed == n, "bulk retried {} of {n}", op.processed);
    Ok(Bulk {
        retry_eps: n as f64 / secs,
        publish_p99_ms: p99(lat),
        baseline_p99_ms: baseline,
    })
}

/// [`bulk_retry`] on a fresh SQLite database.
pub async fn bulk_retry_sqlite(
    b: &Bench,
    n: u64,
    publishers: usize,
    chunk: Option<usize>,
) -> anyhow::Result<Bulk> {
    let bus = b.builder().build().await?;
    let out = bulk_retry(&bus, n, publishers, chunk).await;
    bus.shutdown().await?;
    out
}

//! Flow control: end to end with a concurrency limit of 64 on the handler's subscription, and
//! with 100 tenants limited to 2 runs each, against end to end without a limit, in the same
//! run and on the same store (SQLite, or one bus on a PostgreSQL schema of its own),
//! alternating. Every run publishes the same events (each with a `tenant` metadata field, one
//! of 100 in turn).

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::{Actor, ActorKind, BusBuilder, PartitionBy, PartitionLimit, SubscribeOptions};
use serde::Serialize;

use super::harness::{Bench, Counter, batches, median};
use super::pg_workers::{drop_schema, fresh};
use super::verdict::Misses;
use crate::cmd::Db;

/// The concurrency limit of the limited runs.
const LIMIT: u32 = 64;

/// The tenants of the partitioned runs, and the runs of each at once.
const TENANTS: u64 = 100;
const PER_TENANT: u32 = 2;

/// A lever set on the subscription of an end-to-end run.
#[derive(Debug, Clone, Copy)]
pub enum Lever {
    /// None.
    Unlimited,
    /// A concurrency limit of this many runs at once.
    Limit(u32),
    /// [`TENANTS`] tenants (the `tenant` metadata field), at most this many runs of each.
    PerTenant(u32),
}

/// The figures of the `flow` group.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Figures {
    /// Events per run.
    pub flow_events: u64,
    /// End to end without a limit, and with a concurrency limit of 64 (medians, ev/s).
    pub unlimited_e2e_eps: f64,
    pub limited_e2e_eps: f64,
    /// End to end with 100 tenants limited to 2 runs each (median, ev/s).
    pub partitioned_e2e_eps: f64,
}

/// Events per second from the first publish until a no-op handler has seen all `n`, on a bus
/// from `builder` whose subscription has `lever` set.
pub async fn end_to_end(builder: BusBuilder, n: u64, lever: Lever) -> anyhow::Result<f64> {
    let bus = builder.build().await?;
    let counter = Arc::new(Counter::default());
    counter
        .subscribe_with(&bus, SubscribeOptions::default().name("bench-flow"))
        .await?;
    let bench = Actor::new("bench", ActorKind::Cli);
    match lever {
        Lever::Unlimited => {}
        Lever::Limit(max) => {
            bus.concurrency_limits()
                .set("bench-flow", max, None, &bench)
                .await?;
        }
        Lever::PerTenant(each) => {
            let by = PartitionBy::Metadata("tenant".into());
            bus.concurrency_limits()
                .set_partitioned(
                    "bench-flow",
                    durabus::concurrency::MAX_IN_FLIGHT,
                    None,
                    Some(PartitionLimit::new(by, each)),
                    &bench,
                )
                .await?;
        }
    }
    // Start reads the limits before the first claim.
    bus.start().await?;
    let start = Instant::now();
    let mut i = 0u64;
    for events in batches(0, n) {
        let events = events?
            .into_iter()
            .map(|e| {
                i += 1;
                e.with_metadata("tenant", format!("tenant-{}", i % TENANTS))
            })
            .collect();
        bus.enqueue_batch(events).await?;
    }
    counter.wait_for(n, Duration::from_secs(600)).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(eps)
}

/// The three levers a run measures, in the order it measures them, with what it says.
const LEVERS: [(Lever, &str); 3] = [
    (Lever::Unlimited, "without a limit"),
    (Lever::Limit(LIMIT), "with a concurrency limit of 64"),
    (
        Lever::PerTenant(PER_TENANT),
        "with 100 tenants limited to 2 each",
    ),
];

/// `runs` of each lever, alternating, each end to end on a bus `measure` makes; the medians.
async fn alternate(
    n: u64,
    runs: usize,
    say: impl Fn(&str),
    mut measure: impl AsyncFnMut(Lever) -> anyhow::Result<f64>,
) -> anyhow::Result<Figures> {
    let mut eps: [Vec<f64>; 3] = Default::default();
    for run in 0..runs {
        for (i, (lever, what)) in LEVERS.iter().enumerate() {
            say(&format!("end to end {what} (run {})", run + 1));
            eps[i].push(measure(*lever).await?);
        }
    }
    let [plain, limited, partitioned] = eps;
    Ok(Figures {
        flow_events: n,
        unlimited_e2e_eps: median(plain),
        limited_e2e_eps: median(limited),
        partitioned_e2e_eps: median(partitioned),
    })
}

/// Runs the group on fresh SQLite databases: `runs` of each, alternating.
pub async fn run(b: &Bench, n: u64, runs: usize) -> anyhow::Result<Figures> {
    let figures = alternate(
        n,
        runs,
        |w| b.say(w),
        async |lever| end_to_end(b.builder(), n, lever).await,
    )
    .await;
    b.cleanup();
    figures
}

/// Runs the group on PostgreSQL, each run on a fresh schema of `db`, dropped after it.
pub async fn pg_run(db: &Db, n: u64, runs: usize, say: impl Fn(&str)) -> anyhow::Result<Figures> {
    alternate(n, runs, say, async |lever| {
        let target = fresh(db);
        let eps = end_to_end(target.builder(), n, lever).await;
        drop_schema(&target).await?;
        eps
    })
    .await
}

/// Prints the group's figures beside their targets, judged into `misses`.
pub fn print(f: &Figures, misses: &mut Misses) {
    let ratio = |with: f64, without: f64| {
        if without > 0.0 {
            format!("{:.0} ({:.2} ×)", with, with / without)
        } else {
            "—".into()
        }
    };
    outln!();
    outln!(
        "end to end, {} events, a concurrency limit of 64 on the subscription (target: ≥ 0.9 × without)",
        f.flow_events
    );
    outln!("{:<30}  {:>12}  {:>20}", "figure", "no limit", "limit 64");
    let judged = misses.ratio(
        "end to end with a concurrency limit",
        f.limited_e2e_eps,
        f.unlimited_e2e_eps,
        0.9,
    );
    outln!(
        "{:<30}  {:>12.0}  {:>20}  {judged}",
        "end to end (ev/s)",
        f.unlimited_e2e_eps,
        ratio(f.limited_e2e_eps, f.unlimited_e2e_eps)
    );
    outln!(
        "and with 100 tenants (a metadata field) limited to 2 runs each (target: ≥ 0.8 × without)"
    );
    let judged = misses.ratio(
        "end to end with 100 tenants limited to 2 each",
        f.partitioned_e2e_eps,
        f.unlimited_e2e_eps,
        0.8,
    );
    outln!(
        "{:<30}  {:>12.0}  {:>20}  {judged}",
        "end to end (ev/s)",
        f.unlimited_e2e_eps,
        ratio(f.partitioned_e2e_eps, f.unlimited_e2e_eps)
    );
}

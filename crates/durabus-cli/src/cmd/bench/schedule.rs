//! Scheduled events and priorities: the hot path with a million future events in the table, how
//! late a delayed event starts on an idle bus, and how soon an urgent event overtakes a backlog.

use std::sync::Arc;
use std::time::Duration;

use durabus::{Event, EventBus, NewEvent, SubscribeOptions, Timestamp};
use serde::Serialize;
use tokio::sync::mpsc;

use super::harness::{Bench, Counter, batches, percentile};
use super::history::{self, Fill};
use crate::cmd::bench_worker::now_us;

/// The figures of the `schedule` group (SQLite).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Figures {
    /// Future events (due in 30 days) in the database of the comparison.
    pub scheduled_events: u64,
    /// 64 concurrent publishers, no worker: empty database, then with the scheduled events.
    pub empty_publish_eps: f64,
    pub scheduled_publish_eps: f64,
    /// The bus started on that backlog until all are handled (claims and completions).
    pub empty_drain_eps: f64,
    pub scheduled_drain_eps: f64,
    /// End to end while the bus runs.
    pub empty_e2e_eps: f64,
    pub scheduled_e2e_eps: f64,
    /// A delayed event's start after its due time on an idle bus (ms).
    pub late_samples: usize,
    pub late_p50_ms: f64,
    pub late_p99_ms: f64,
    /// Priority-0 events in the backlog that priority-10 events overtake.
    pub overtake_backlog: u64,
    /// Publish → handler start of a priority-10 event while the backlog drains (ms).
    pub overtake_samples: usize,
    pub overtake_p50_ms: f64,
    pub overtake_p99_ms: f64,
}

/// Runs the group: the comparison with `scheduled` future events (`n` events per run, `callers`
/// publishers, `runs` runs), `late` lateness samples and the overtaking of a `backlog`.
pub async fn run(
    b: &Bench,
    scheduled: u64,
    n: u64,
    callers: usize,
    runs: usize,
    (late, backlog): (usize, u64),
) -> anyhow::Result<Figures> {
    let mut f = Figures {
        scheduled_events: scheduled,
        overtake_backlog: backlog,
        ..Figures::default()
    };
    b.say("hot path with a million events scheduled for next month");
    let (empty, full) = history::compare(b, Fill::Scheduled, scheduled, n, callers, runs).await?;
    (f.empty_publish_eps, f.scheduled_publish_eps) = (empty.publish_eps, full.publish_eps);
    (f.empty_drain_eps, f.scheduled_drain_eps) = (empty.drain_eps, full.drain_eps);
    (f.empty_e2e_eps, f.scheduled_e2e_eps) = (empty.e2e_eps, full.e2e_eps);

    b.say("a delayed event's start after its due time, idle bus");
    let mut lateness = lateness(b, late).await?;
    lateness.sort_by(f64::total_cmp);
    f.late_samples = lateness.len();
    f.late_p50_ms = percentile(&lateness, 0.50);
    f.late_p99_ms = percentile(&lateness, 0.99);

    b.say("a priority-10 event overtaking a backlog of priority-0 events");
    let mut overtake = overtake(b, backlog).await?;
    overtake.sort_by(f64::total_cmp);
    f.overtake_samples = overtake.len();
    f.overtake_p50_ms = percentile(&overtake, 0.50);
    f.overtake_p99_ms = percentile(&overtake, 0.99);
    b.cleanup();
    Ok(f)
}

/// Milliseconds since the Unix epoch, with the microseconds as a fraction.
fn now_ms() -> f64 {
    now_us() as f64 / 1000.0
}

/// Subscribes `pattern` with a handler that sends `now - start(event)` in ms, where `start`
/// reads the time the event is measured from.
async fn measuring(
    bus: &EventBus,
    pattern: &str,
    start: fn(&Event) -> Option<f64>,
) -> anyhow::Result<mpsc::UnboundedReceiver<f64>> {
    let (tx, rx) = mpsc::unbounded_channel();
    bus.subscribe(
        pattern,
        move |e: Event| {
            if let Some(from) = start(&e) {
                let _ = tx.send(now_ms() - from);
            }
            async { Ok(()) }
        },
        SubscribeOptions::default(),
    )
    .await?;
    Ok(rx)
}

/// `samples` events, one at a time, each delayed by 5 ms on an idle bus: how long after its due
/// time each handler started (ms).
async fn lateness(b: &Bench, samples: usize) -> anyhow::Result<Vec<f64>> {
    let bus = b.builder().build().await?;
    let mut rx = measuring(&bus, "bench.*", |e| {
        e.deliver_at.map(|t| t.as_millis() as f64)
    })
    .await?;
    bus.start().await?;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples + 10 {
        let e = NewEvent::new("bench.later", &i)?.delay(Duration::from_millis(5));
        bus.enqueue_event(e).await?;
        let late = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await?
            .ok_or_else(|| anyhow::anyhow!("the measuring handler stopped"))?;
        // The first ten warm the bus up.
        if i >= 10 {
            out.push(late);
        }
    }
    bus.shutdown().await?;
    Ok(out)
}

/// A backlog of `backlog` priority-0 events, then the bus started and a priority-10 event
/// published every 10 ms while the backlog drains: each one's publish → handler start (ms).
async fn overtake(b: &Bench, backlog: u64) -> anyhow::Result<Vec<f64>> {
    let bus = Arc::new(b.builder().build().await?);
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    let mut rx = measuring(&bus, "urgent.*", |e| {
        e.payload_value()["sent_us"]
            .as_u64()
            .map(|us| us as f64 / 1000.0)
    })
    .await?;
    for events in batches(0, backlog) {
        bus.enqueue_batch(events?).await?;
    }
    bus.start().await?;
    let mut out = Vec::new();
    // While at least a tenth of the backlog is left, so each urgent event meets one.
    while counter.seen() < backlog - backlog / 10 {
        let e =
            NewEvent::new("urgent.page", &serde_json::json!({ "sent_us": now_us() }))?.priority(10);
        bus.enqueue_event(e).await?;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    counter.wait_for(backlog, Duration::from_secs(600)).await?;
    bus.shutdown().await?;
    while let Ok(ms) = rx.try_recv() {
        out.push(ms);
    }
    anyhow::ensure!(
        !out.is_empty(),
        "the backlog drained before an urgent event"
    );
    Ok(out)
}

/// The scheduled event of the PostgreSQL lateness figure: due at `due` (ms since the epoch),
/// carrying its due time in µs as the `sent_us` the worker processes measure from.
pub fn due_event(i: u64, due: Timestamp) -> anyhow::Result<NewEvent> {
    let due_us = u64::try_from(due.as_millis()).unwrap_or(0) * 1000;
    Ok(NewEvent::new(
        "bench.later",
        &serde_json::json!({ "i": i, "sent_us": due_us }),
    )?
    .deliver_at(due))
}

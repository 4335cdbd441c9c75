//! Dead-letter records: written with the death, announced, grouped, acted on, retried on the
//! auto-retry schedule (an injected clock drives it), listed with filters and keyset pages.

mod listings;
mod new_groups;
mod records;
pub use listings::*;
pub use new_groups::*;
pub use records::*;

use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use std::time::Duration;

use durabus::{
    Action, Actor, ActorKind, DeadLetter, DeadLetterFilter, DeadLetterStatus, ErrorKind, Event,
    EventBus, EventId, EventQuery, EventStatus, Keyset, RetryOverride, SubscribeOptions, Timestamp,
};

use crate::support::*;

const HOUR: Duration = Duration::from_secs(3600);

/// An error with a source, as handlers' errors often are.
#[derive(Debug)]
struct Refused {
    order: u64,
    source: std::io::Error,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "card for order {} refused", self.order)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub fn ann() -> Actor {
    Actor::new("ann", ActorKind::Library)
}

/// A bus whose `pay.*` handler (named `payments`, no retries) fails while `healthy` is false.
pub async fn paying_bus(h: &Harness, healthy: Arc<AtomicBool>) -> EventBus {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "pay.*",
        move |e: Event| {
            let healthy = healthy.clone();
            async move {
                if healthy.load(Ordering::SeqCst) {
                    return Ok(());
                }
                let order = e.payload::<u64>().unwrap_or(0);
                Err(Refused {
                    order,
                    source: std::io::Error::other("issuer said no"),
                }
                .into())
            }
        },
        SubscribeOptions::default()
            .name("payments")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    bus
}

/// Waits until the record of `id` satisfies `ok` (at most 10 s of real time).
pub async fn wait_record(
    bus: &EventBus,
    id: EventId,
    what: &str,
    ok: impl Fn(&DeadLetter) -> bool,
) -> DeadLetter {
    let store = bus.store();
    let start = std::time::Instant::now();
    loop {
        if let Some(d) = store.dlq_get(id).await.unwrap()
            && ok(&d)
        {
            return d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The auto-retry job as the bus's scheduler lists it.
pub async fn auto_retry_job(bus: &EventBus) -> durabus::scheduler::JobInfo {
    bus.scheduler()
        .unwrap()
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.name == "dead-letter-auto-retry")
        .unwrap()
}

/// Waits until the auto-retry job has recorded the end of its run for `tick` or a later one
/// (at most 10 s of real time). Its dead letters show the run's work before the run ends; a
/// clock moved before then is time that passed while the job ran, whose ticks are skipped.
pub async fn wait_auto_retry_ended(bus: &EventBus, tick: Timestamp) {
    let start = std::time::Instant::now();
    loop {
        if let Some(row) = auto_retry_job(bus).await.last
            && row.last_tick >= Some(tick)
            && row.running_by.is_none()
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for the auto-retry run of {tick:?} to end"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Every `system.dead_letter` event stored, whatever its status.
pub async fn announcements(bus: &EventBus) -> Vec<Event> {
    bus.history()
        .list(EventQuery {
            event_type: Some("system.dead_letter".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
}

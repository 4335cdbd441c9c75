//! Snoozing handlers, on every store: rescheduled without a failure, capped per subscription.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durabus::{Event, EventStatus, SubscribeOptions};

use crate::support::*;

const LATER: Duration = Duration::from_secs(30);

/// Subscribes `name` to `s.*` with a handler that snoozes its first `snoozes` calls for 30 s,
/// then succeeds; returns its call count.
async fn snoozing(
    bus: &durabus::EventBus,
    name: &str,
    snoozes: usize,
    options: SubscribeOptions,
) -> Arc<AtomicUsize> {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    bus.subscribe(
        "s.*",
        move |_e: Event| {
            let n = c.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < snoozes {
                    return durabus::handler::snooze(LATER);
                }
                Ok(())
            }
        },
        options.name(name),
    )
    .await
    .unwrap();
    calls
}

async fn calls_reach(calls: &Arc<AtomicUsize>, n: usize) {
    eventually("the handler's calls", || {
        let calls = calls.clone();
        async move { (calls.load(Ordering::SeqCst) >= n).then_some(()) }
    })
    .await;
}

pub async fn a_snoozing_handler_is_called_again_later_without_a_failure(h: &Harness) {
    let bus = h.builder().await.concurrency(1).build().await.unwrap();
    let snoozer = snoozing(&bus, "waits", 2, SubscribeOptions::default()).await;
    let plain = count_calls(&bus, "s.*").await;
    bus.start().await.unwrap();
    let start = h.clock.now();
    let id = bus.enqueue("s.order", &1).await.unwrap();
    calls_reach(&snoozer, 1).await;
    let e = eventually("the snooze recorded", || {
        let bus = bus.clone();
        async move {
            let e = bus.store().get_event(id).await.unwrap()?;
            (e.status == EventStatus::Pending).then_some(e)
        }
    })
    .await;
    assert_eq!(e.retry_count, 0, "a snooze is not a failed attempt");
    assert!(e.errors.is_empty());
    assert_eq!(e.next_attempt_at, Some(start.plus(LATER)));
    assert_eq!(bus.store().snoozes(id, "waits").await.unwrap(), 1);
    // The other subscription ran in the same pass and is done with the event.
    assert_eq!(plain.load(Ordering::SeqCst), 1);
    assert_eq!(e.delivered.len(), 1);
    // The breaker heard nothing: no failure in its window.
    let breaker = bus
        .breakers()
        .into_iter()
        .find(|b| b.name.as_deref() == Some("waits"))
        .unwrap();
    assert_eq!(breaker.breaker.samples, 0, "{breaker:?}");
    // Not before its time; then a second snooze, then the success.
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(snoozer.load(Ordering::SeqCst), 1);
    h.advance(LATER);
    calls_reach(&snoozer, 2).await;
    eventually("the second snooze recorded", || {
        let bus = bus.clone();
        async move {
            (bus.store().snoozes(id, "waits").await.unwrap() == 2
                && bus.store().get_event(id).await.unwrap()?.status == EventStatus::Pending)
                .then_some(())
        }
    })
    .await;
    h.advance(LATER);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(e.retry_count, 0);
    assert_eq!(snoozer.load(Ordering::SeqCst), 3);
    assert_eq!(
        plain.load(Ordering::SeqCst),
        1,
        "the other handler ran once"
    );
    bus.shutdown().await.unwrap();
}

pub async fn snoozes_past_the_cap_count_as_a_failure(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    let snoozer = snoozing(
        &bus,
        "stubborn",
        usize::MAX,
        SubscribeOptions::default().max_snoozes(1),
    )
    .await;
    bus.start().await.unwrap();
    let id = bus.enqueue("s.order", &1).await.unwrap();
    calls_reach(&snoozer, 1).await;
    eventually("the snooze recorded", || {
        let bus = bus.clone();
        async move { (bus.store().snoozes(id, "stubborn").await.unwrap() == 1).then_some(()) }
    })
    .await;
    h.advance(LATER);
    calls_reach(&snoozer, 2).await;
    // The second snooze is one too many: a failed attempt, retried on the retry schedule.
    let e = eventually("the failure recorded", || {
        let bus = bus.clone();
        async move {
            let e = bus.store().get_event(id).await.unwrap()?;
            (e.retry_count == 1).then_some(e)
        }
    })
    .await;
    assert!(e.errors[0].contains("max_snoozes"), "{:?}", e.errors);
    assert_eq!(bus.store().snoozes(id, "stubborn").await.unwrap(), 1);
    bus.shutdown().await.unwrap();
}

//! Circuit breakers per subscription, and the retry metrics, through the bus.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use durabus::{
    BreakerState, Event, EventBus, EventStatus, RetryOverride, RetryPolicy, SubscribeOptions,
};
use tokio::sync::Semaphore;

use crate::support::*;

/// A handler that fails while `fail` is set; counts calls.
fn switchable(fail: Arc<AtomicBool>, calls: Arc<AtomicU32>) -> impl durabus::Handler {
    move |_e: Event| {
        let fail = fail.clone();
        let calls = calls.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                Err("downstream is down".into())
            } else {
                Ok(())
            }
        }
    }
}

async fn no_retries_bus(h: &Harness) -> EventBus {
    h.builder()
        .await
        .retry_policy(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .build()
        .await
        .unwrap()
}

fn breaker_of(bus: &EventBus, name: &str) -> durabus::SubscriptionBreaker {
    bus.breakers()
        .into_iter()
        .find(|b| b.name.as_deref() == Some(name))
        .unwrap()
}

pub async fn an_open_breaker_defers_events_and_a_probe_closes_it(h: &Harness) {
    let bus = no_retries_bus(h).await;
    let (a_fail, a_calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let (b_fail, b_calls) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU32::new(0)));
    bus.subscribe(
        "b.*",
        switchable(a_fail, a_calls.clone()),
        SubscribeOptions::default().name("a"),
    )
    .await
    .unwrap();
    bus.subscribe(
        "b.*",
        switchable(b_fail.clone(), b_calls.clone()),
        SubscribeOptions::default().name("b"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    for i in 0..3 {
        bus.publish("b.x", &i).await.unwrap();
        assert_eq!(
            breaker_of(&bus, "b").breaker.state,
            BreakerState::Closed,
            "fewer than 4 samples"
        );
    }
    bus.publish("b.x", &3).await.unwrap();
    let opened_at = h.clock.now();
    let b = breaker_of(&bus, "b").breaker;
    assert_eq!(b.state, BreakerState::Open);
    assert_eq!(
        (b.samples, b.failure_rate, b.opened_at),
        (4, 1.0, Some(opened_at))
    );
    let a = breaker_of(&bus, "a").breaker;
    assert_eq!(
        (a.state, a.samples, a.failure_rate),
        (BreakerState::Closed, 4, 0.0)
    );

    // Open: b is skipped, a runs, and the event waits for b. max_retries is 0, yet the event is
    // not dead: a skip is not a failed attempt.
    let id = bus.publish("b.x", &4).await.unwrap();
    assert_eq!(a_calls.load(Ordering::SeqCst), 5);
    assert_eq!(b_calls.load(Ordering::SeqCst), 4);
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert_eq!(e.retry_count, 0);
    assert!(e.errors.is_empty());
    assert_eq!(e.delivered, vec!["a".to_string()]);
    assert_eq!(
        e.next_attempt_at,
        Some(opened_at.plus(Duration::from_secs(30)))
    );
    assert_eq!(bus.metrics().events_deferred_total, 1);

    b_fail.store(false, Ordering::SeqCst);
    h.advance(Duration::from_millis(29_999));
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(b_calls.load(Ordering::SeqCst), 4, "still open");
    h.advance(Duration::from_millis(1));
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(
        b_calls.load(Ordering::SeqCst),
        5,
        "the deferred event reached b"
    );
    assert_eq!(a_calls.load(Ordering::SeqCst), 5, "a was not run twice");
    assert_eq!(e.delivered, vec!["a".to_string(), "b".to_string()]);
    let b = breaker_of(&bus, "b").breaker;
    assert_eq!(
        (b.state, b.opened_at, b.samples),
        (BreakerState::Closed, None, 0)
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_half_open_breaker_lets_exactly_one_probe_through(h: &Harness) {
    let bus = no_retries_bus(h).await;
    let fail = Arc::new(AtomicBool::new(true));
    let gate = Arc::new(Semaphore::new(0));
    let running = Arc::new(AtomicU32::new(0));
    let entered = Arc::new(AtomicU32::new(0));
    let max_running = Arc::new(AtomicU32::new(0));
    let (f, g, r, en, m) = (
        fail.clone(),
        gate.clone(),
        running.clone(),
        entered.clone(),
        max_running.clone(),
    );
    bus.subscribe(
        "p.*",
        move |_e: Event| {
            let (f, g, r, en, m) = (f.clone(), g.clone(), r.clone(), en.clone(), m.clone());
            async move {
                if f.load(Ordering::SeqCst) {
                    return Err("down".into());
                }
                en.fetch_add(1, Ordering::SeqCst);
                let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                let _permit = g.acquire().await;
                r.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            }
        },
        SubscribeOptions::default().name("probe"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    for i in 0..4 {
        bus.publish("p.x", &i).await.unwrap();
    }
    assert_eq!(breaker_of(&bus, "probe").breaker.state, BreakerState::Open);
    fail.store(false, Ordering::SeqCst);
    h.advance(Duration::from_secs(30));
    // Two events at once against the half-open breaker.
    let e1 = bus.enqueue("p.y", &1).await.unwrap();
    let e2 = bus.enqueue("p.y", &2).await.unwrap();
    let deferred = eventually("one probe running and one event deferred", || {
        let bus = bus.clone();
        let entered = entered.clone();
        async move {
            let a = bus.store().get_event(e1).await.ok()??;
            let b = bus.store().get_event(e2).await.ok()??;
            let deferred = [a, b].into_iter().find(|e| {
                e.status == EventStatus::Pending && e.next_attempt_at > Some(e.created_at)
            });
            (entered.load(Ordering::SeqCst) == 1)
                .then_some(deferred)
                .flatten()
        }
    })
    .await;
    assert_eq!(
        deferred.next_attempt_at,
        Some(h.clock.now().plus(Duration::from_secs(1)))
    );
    assert_eq!(
        breaker_of(&bus, "probe").breaker.state,
        BreakerState::HalfOpen
    );
    assert!(breaker_of(&bus, "probe").breaker.probe_in_flight);
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(entered.load(Ordering::SeqCst), 1, "a second probe ran");
    gate.add_permits(10);
    let probe = if deferred.id == e1 { e2 } else { e1 };
    wait_status(&bus, probe, EventStatus::Done).await;
    assert_eq!(
        breaker_of(&bus, "probe").breaker.state,
        BreakerState::Closed
    );
    h.advance(Duration::from_secs(1));
    wait_status(&bus, deferred.id, EventStatus::Done).await;
    assert_eq!(entered.load(Ordering::SeqCst), 2);
    assert_eq!(max_running.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

pub async fn a_probe_skipped_by_an_earlier_failure_is_released(h: &Harness) {
    let bus = no_retries_bus(h).await;
    let (a_fail, a_calls) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU32::new(0)),
    );
    let (b_fail, b_calls) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicU32::new(0)));
    bus.subscribe(
        "d.*",
        switchable(a_fail.clone(), a_calls.clone()),
        SubscribeOptions::default().name("a"),
    )
    .await
    .unwrap();
    bus.subscribe(
        "d.*",
        switchable(b_fail.clone(), b_calls.clone()),
        SubscribeOptions::default().name("b"),
    )
    .await
    .unwrap();
    for i in 0..4 {
        bus.publish("d.x", &i).await.unwrap();
    }
    assert_eq!(breaker_of(&bus, "b").breaker.state, BreakerState::Open);
    h.advance(Duration::from_secs(30));
    // a fails first: b was admitted as the probe but never ran.
    a_fail.store(true, Ordering::SeqCst);
    bus.publish("d.x", &5).await.unwrap();
    assert_eq!(b_calls.load(Ordering::SeqCst), 4);
    let b = breaker_of(&bus, "b").breaker;
    assert_eq!(
        (b.state, b.probe_in_flight),
        (BreakerState::HalfOpen, false)
    );
    // The next event probes b; had the flag stayed set, b would be skipped forever.
    a_fail.store(false, Ordering::SeqCst);
    b_fail.store(false, Ordering::SeqCst);
    let id = bus.publish("d.x", &6).await.unwrap();
    assert_eq!(b_calls.load(Ordering::SeqCst), 5);
    assert_eq!(get(&bus, id).await.status, EventStatus::Done);
    assert_eq!(breaker_of(&bus, "b").breaker.state, BreakerState::Closed);
    bus.shutdown().await.unwrap();
}

pub async fn outcomes_are_recorded_only_for_handlers_that_ran(h: &Harness) {
    let bus = no_retries_bus(h).await;
    let calls = [0, 1, 2].map(|_| Arc::new(AtomicU32::new(0)));
    let fails = [false, true, false].map(|f| Arc::new(AtomicBool::new(f)));
    for (i, name) in ["first", "second", "third"].into_iter().enumerate() {
        bus.subscribe(
            "o.*",
            switchable(fails[i].clone(), calls[i].clone()),
            SubscribeOptions::default().name(name),
        )
        .await
        .unwrap();
    }
    bus.publish("o.x", &1).await.unwrap();
    let first = breaker_of(&bus, "first").breaker;
    let second = breaker_of(&bus, "second").breaker;
    let third = breaker_of(&bus, "third").breaker;
    assert_eq!(
        (first.samples, first.failure_rate),
        (1, 0.0),
        "success before the failure"
    );
    assert_eq!(
        (second.samples, second.failure_rate),
        (1, 1.0),
        "the failure"
    );
    assert_eq!(third.samples, 0, "nothing for handlers after the failure");
    assert_eq!(calls[2].load(Ordering::SeqCst), 0);
    bus.shutdown().await.unwrap();
}

pub async fn metrics_follow_a_scripted_run(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let fc = flaky_calls.clone();
    bus.subscribe(
        "m.*",
        move |e: Event| {
            let fc = fc.clone();
            async move {
                match e.event_type.as_str() {
                    "m.flaky" if fc.fetch_add(1, Ordering::SeqCst) == 0 => Err("once".into()),
                    "m.dead" => Err("always".into()),
                    _ => Ok(()),
                }
            }
        },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(1)),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let ok = bus.publish("m.ok", &1).await.unwrap();
    let flaky = bus.publish("m.flaky", &1).await.unwrap();
    let dead = bus.publish("m.dead", &1).await.unwrap();
    h.advance(Duration::from_secs(2));
    wait_status(&bus, ok, EventStatus::Done).await;
    wait_status(&bus, flaky, EventStatus::Done).await;
    wait_status(&bus, dead, EventStatus::Dlq).await;
    let m = eventually("metrics of all three", || {
        let m = bus.metrics();
        async move { (m.events_succeeded_total + m.events_dead_lettered_total == 3).then_some(m) }
    })
    .await;
    assert_eq!(m.delivery_attempts_total, 5);
    assert_eq!(m.retries_total, 2);
    assert_eq!(m.failed_attempts_total, 3);
    assert_eq!(m.events_succeeded_total, 2);
    assert_eq!(m.events_succeeded_after_retry_total, 1);
    assert_eq!(m.events_dead_lettered_total, 1);
    assert_eq!(m.success_after_retry_rate, 0.5);
    assert_eq!(m.by_type["m.dead"].dlq_rate, 1.0);
    assert_eq!(m.by_type["m.ok"].dlq_rate, 0.0);
    assert_eq!(m.by_type["m.flaky"].retries_total, 1);
    assert_eq!(
        m.attempts_histogram,
        std::collections::BTreeMap::from([(1, 1), (2, 2)])
    );
    bus.shutdown().await.unwrap();
}

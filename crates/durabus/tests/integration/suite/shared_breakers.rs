//! Breakers seen and shared across processes, on every store: each process reports its
//! breakers; a shared breaker that opens in one process opens in the others, and half-open
//! lets one probe through for the whole cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use durabus::{
    BreakerConfig, BreakerState, Clock, Event, EventBus, EventStatus, RetryPolicy, SubscribeOptions,
};
use tokio::sync::Semaphore;

use crate::support::*;

const REFRESH: Duration = Duration::from_millis(10);

/// A bus of its own on the harness's store (another process, as far as the store can tell).
async fn process(h: &Harness, shared: bool) -> EventBus {
    h.builder()
        .await
        .retry_policy(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        })
        .breaker(BreakerConfig {
            shared,
            ..BreakerConfig::default()
        })
        .pause_refresh(REFRESH)
        .build()
        .await
        .unwrap()
}

/// Subscribes `pay` on `s.*`: fails while `fail` is set, waits for a permit of `gate` first
/// when one is given, counts calls.
async fn pay(
    bus: &EventBus,
    fail: Arc<AtomicBool>,
    gate: Option<Arc<Semaphore>>,
) -> Arc<AtomicU32> {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    bus.subscribe(
        "s.*",
        move |_e: Event| {
            let (fail, gate) = (fail.clone(), gate.clone());
            c.fetch_add(1, Ordering::SeqCst);
            async move {
                if let Some(g) = gate {
                    g.acquire().await.map_err(|e| e.to_string())?.forget();
                }
                if fail.load(Ordering::SeqCst) {
                    Err("the card processor is down".into())
                } else {
                    Ok(())
                }
            }
        },
        SubscribeOptions::default().name("pay"),
    )
    .await
    .unwrap();
    calls
}

fn state(bus: &EventBus) -> BreakerState {
    bus.breakers()
        .into_iter()
        .find(|b| b.name.as_deref() == Some("pay"))
        .map(|b| b.breaker.state)
        .unwrap()
}

async fn open_on(bus: &EventBus) {
    for i in 0..4 {
        bus.publish("s.card", &i).await.unwrap();
    }
    assert_eq!(state(bus), BreakerState::Open);
}

pub async fn every_process_reports_its_breakers(h: &Harness) {
    let a = process(h, false).await;
    let b = process(h, false).await;
    let fail_a = Arc::new(AtomicBool::new(true));
    pay(&a, fail_a, None).await;
    let b_calls = pay(&b, Arc::new(AtomicBool::new(false)), None).await;
    a.start().await.unwrap();
    b.start().await.unwrap();
    open_on(&a).await;
    // Not shared: the other process's breaker stays closed and its handler runs.
    let id = b.publish("s.card", &9).await.unwrap();
    wait_status(&b, id, EventStatus::Done).await;
    assert_eq!(b_calls.load(Ordering::SeqCst), 1);
    assert_eq!(state(&b), BreakerState::Closed);
    // An operator's view (a bus delivering nothing) sees both processes' breakers.
    let operator = h.builder().await.deliver(false).build().await.unwrap();
    let reports = eventually("both processes' reports", || async {
        let r = operator.breaker_reports().await.unwrap();
        let pay: Vec<_> = r.into_iter().filter(|r| r.subscription == "pay").collect();
        (pay.len() == 2 && pay.iter().any(|r| r.state == BreakerState::Open)).then_some(pay)
    })
    .await;
    let open = reports
        .iter()
        .find(|r| r.state == BreakerState::Open)
        .unwrap();
    let closed = reports
        .iter()
        .find(|r| r.state == BreakerState::Closed)
        .unwrap();
    assert_ne!(open.process, closed.process);
    assert_eq!((open.samples, open.failure_rate), (4, 1.0));
    assert!(open.opened_at.is_some());
    // And in the metrics, one series per process.
    let m = super::telemetry::scrape(&operator).await;
    let value = |p: &str| {
        super::telemetry::num(
            &m,
            "durabus_breaker_reported_state",
            &[("subscription", "pay"), ("process", p)],
        )
    };
    assert_eq!((value(&open.process), value(&closed.process)), (2.0, 0.0));
    for bus in [a, b, operator] {
        bus.shutdown().await.unwrap();
    }
}

pub async fn a_shared_breaker_opens_everywhere_and_probes_once(h: &Harness) {
    let a = process(h, true).await;
    let b = process(h, true).await;
    let fail_a = Arc::new(AtomicBool::new(true));
    // Every handler run takes a permit: the first four (the failures that open the breaker)
    // have theirs; the probe waits for the test.
    let gate = Arc::new(Semaphore::new(4));
    let a_calls = pay(&a, fail_a.clone(), Some(gate.clone())).await;
    let b_calls = pay(&b, Arc::new(AtomicBool::new(false)), Some(gate.clone())).await;
    let calls = || a_calls.load(Ordering::SeqCst) + b_calls.load(Ordering::SeqCst);
    a.start().await.unwrap();
    b.start().await.unwrap();
    open_on(&a).await;
    let opened_at = h.clock.now();
    // The other process follows within its refresh, and holds the event back for it.
    eventually("the other process's breaker to open", || async {
        (state(&b) == BreakerState::Open).then_some(())
    })
    .await;
    let held = b.publish("s.card", &10).await.unwrap();
    let e = get(&b, held).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert_eq!(e.retry_count, 0, "deferred, not failed");
    assert_eq!(
        e.next_attempt_at,
        Some(opened_at.plus(BreakerConfig::default().open_for))
    );
    assert_eq!(b_calls.load(Ordering::SeqCst), 0);

    // Half-open: one probe for the whole cluster, whichever process asks first; the other
    // events (here and there) are turned away while it runs.
    h.advance(BreakerConfig::default().open_for);
    fail_a.store(false, Ordering::SeqCst);
    let mut publishes = Vec::new();
    for bus in [a.clone(), b.clone()] {
        publishes.push(tokio::spawn(
            async move { bus.publish("s.card", &11).await },
        ));
    }
    eventually("the probe to start", || async {
        (calls() == 5).then_some(())
    })
    .await;
    // A few refreshes and polls: no second probe anywhere.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(calls(), 5, "one probe in the whole cluster");
    // The probe succeeds: closed in every process; what waited is delivered.
    gate.add_permits(100);
    let mut ids = vec![held];
    for p in publishes {
        ids.push(p.await.unwrap().unwrap());
    }
    for bus in [&a, &b] {
        eventually("every process's breaker to close", || async {
            (state(bus) == BreakerState::Closed).then_some(())
        })
        .await;
    }
    h.advance(BreakerConfig::default().probe_wait);
    for id in ids {
        wait_status(&b, id, EventStatus::Done).await;
    }
    assert_eq!(calls(), 7, "each of the three held events ran once");
    for bus in [a, b] {
        bus.shutdown().await.unwrap();
    }
}

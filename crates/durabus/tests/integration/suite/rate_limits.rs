//! Rate limits per subscription, on every store: a burst spread over reserved slots across
//! two processes, a limit changed and removed without a restart, and what is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::{Actor, ActorKind, Clock, ErrorKind, Event, EventBus, EventStatus, SubscribeOptions};

use crate::support::*;

const REFRESH: Duration = Duration::from_millis(10);

async fn process(h: &Harness, calls: &Arc<AtomicU32>) -> EventBus {
    let bus = h
        .builder()
        .await
        .pause_refresh(REFRESH)
        .build()
        .await
        .unwrap();
    let c = calls.clone();
    bus.subscribe(
        "r.*",
        move |_e: Event| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        },
        SubscribeOptions::default().name("api"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    bus
}

async fn wait_calls(calls: &AtomicU32, n: u32) {
    eventually(&format!("{n} calls"), || async {
        (calls.load(Ordering::SeqCst) >= n).then_some(())
    })
    .await;
    // A few polls more: no extra call sneaks in.
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(calls.load(Ordering::SeqCst), n);
}

pub async fn a_rate_limit_spreads_a_burst_over_slots_across_processes(h: &Harness) {
    let calls = Arc::new(AtomicU32::new(0));
    let a = process(h, &calls).await;
    let b = process(h, &calls).await;
    let ops = Actor::new("ops", ActorKind::Library);
    let limit = a
        .rate_limits()
        .set("api", 2, Duration::from_secs(1), &ops)
        .await
        .unwrap();
    assert_eq!((limit.per, limit.interval_ms), (2, 1000));
    // Both processes read it within a refresh.
    tokio::time::sleep(REFRESH * 5).await;
    let t0 = h.clock.now();
    let mut ids = Vec::new();
    for (i, bus) in [&a, &b, &a, &b, &a, &b].into_iter().enumerate() {
        ids.push(bus.enqueue("r.call", &i).await.unwrap());
    }
    // Two at once (the limit's burst), the others put off to their own slots, 500 ms apart.
    wait_calls(&calls, 2).await;
    let mut due: Vec<i64> = eventually("the others to wait for their slots", || async {
        let mut due = Vec::new();
        for id in &ids {
            let e = get(&a, *id).await;
            assert_eq!(
                e.retry_count, 0,
                "waiting for a slot is not a failed attempt"
            );
            match (e.status, e.next_attempt_at) {
                (EventStatus::Done, _) => {}
                (EventStatus::Pending, Some(t)) if t > t0 => {
                    due.push(t.as_millis() - t0.as_millis())
                }
                _ => return None,
            }
        }
        Some(due)
    })
    .await;
    due.sort_unstable();
    assert_eq!(due, vec![500, 1000, 1500, 2000]);
    h.advance(Duration::from_millis(500));
    wait_calls(&calls, 3).await;
    h.advance(Duration::from_millis(1500));
    for id in &ids {
        wait_status(&a, *id, EventStatus::Done).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 6);

    // A new value holds without a restart: 100 per second lets the next burst through.
    a.rate_limits()
        .set("api", 100, Duration::from_secs(1), &ops)
        .await
        .unwrap();
    tokio::time::sleep(REFRESH * 5).await;
    h.advance(Duration::from_secs(1));
    for i in 0..5 {
        b.enqueue("r.call", &i).await.unwrap();
    }
    wait_calls(&calls, 11).await;
    assert_eq!(a.rate_limits().list().await.unwrap()[0].per, 100);
    let removed = a.rate_limits().remove("api").await.unwrap();
    assert_eq!(removed.set_by.name, "ops");
    assert!(a.rate_limits().list().await.unwrap().is_empty());
    let e = a.rate_limits().remove("api").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    for bus in [a, b] {
        bus.shutdown().await.unwrap();
    }
}

pub async fn bad_rate_limits_are_refused_and_nothing_changes(h: &Harness) {
    let calls = Arc::new(AtomicU32::new(0));
    let bus = process(h, &calls).await;
    let ops = Actor::new("ops", ActorKind::Library);
    let limits = bus.rate_limits();
    for (sub, per, interval) in [
        ("api", 0, Duration::from_secs(1)),
        ("api", durabus::rate::MAX_PER + 1, Duration::from_secs(1)),
        ("api", 1, Duration::ZERO),
        ("api", 1, Duration::from_secs(2 * 24 * 3600)),
    ] {
        let e = limits.set(sub, per, interval, &ops).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{per} {interval:?}: {e}");
    }
    let e = limits
        .set("nobody", 1, Duration::from_secs(1), &ops)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(limits.list().await.unwrap().is_empty());
    bus.shutdown().await.unwrap();
}

//! Retries, back-off, dead letters, partial retries, timeouts and panics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::{Event, EventStatus, RetryOverride, RetryPolicy, SubscribeOptions};

use crate::support::*;

/// A handler that fails its first `fails` calls, then succeeds; counts calls.
fn flaky(fails: u32, calls: Arc<AtomicU32>) -> impl durabus::Handler {
    move |_e: Event| {
        let calls = calls.clone();
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n <= fails {
                Err(format!("boom {n}").into())
            } else {
                Ok(())
            }
        }
    }
}

fn within_jitter(actual_ms: i64, expected_ms: i64) -> bool {
    let lo = expected_ms as f64 * 0.9 - 1.0;
    let hi = expected_ms as f64 * 1.1 + 1.0;
    (actual_ms as f64) >= lo && (actual_ms as f64) <= hi
}

pub async fn a_failure_is_retried_on_the_persisted_schedule(h: &Harness) {
    let bus = h.bus().await;
    let calls = Arc::new(AtomicU32::new(0));
    bus.subscribe(
        "pay.*",
        flaky(3, calls.clone()),
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let t0 = h.clock.now();
    let id = bus.publish("pay.charge", &1).await.unwrap();
    // Attempt 1 failed; attempt 2 is due base (1000 ms) later, ±10 %.
    let mut expected = [1000i64, 2000, 4000].into_iter();
    for attempt in 1..=3u32 {
        let e = eventually("retry to be scheduled", || {
            let store = bus.store();
            async move {
                store
                    .get_event(id)
                    .await
                    .ok()
                    .flatten()
                    .filter(|e| e.status == EventStatus::Pending && e.retry_count == attempt)
            }
        })
        .await;
        assert_eq!(e.errors.len() as u32, attempt);
        assert!(e.errors[attempt as usize - 1].contains(&format!("boom {attempt}")));
        let due = e.next_attempt_at.unwrap();
        let wait = due.as_millis() - h.clock.now().as_millis();
        let want = expected.next().unwrap();
        assert!(
            within_jitter(wait, want),
            "attempt {} waits {wait} ms, want {want} ±10 %",
            attempt + 1
        );
        // Not delivered before its time.
        h.advance(Duration::from_millis((wait as u64).saturating_sub(1)));
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            attempt,
            "ran before its retry time"
        );
        h.advance(Duration::from_millis(1));
    }
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(e.retry_count, 3);
    assert_eq!(e.errors.len(), 3);
    assert!(h.clock.now() > t0);
    bus.shutdown().await.unwrap();
}

async fn drive_to_dlq(h: &Harness, bus: &durabus::EventBus, id: durabus::EventId) -> Event {
    loop {
        let e = get(bus, id).await;
        match e.status {
            EventStatus::Dlq => return e,
            EventStatus::Pending => {
                let due = e.next_attempt_at.unwrap();
                h.clock.set(due.max(h.clock.now()));
                let before = e.retry_count;
                eventually("the next attempt", || {
                    let store = bus.store();
                    async move {
                        store.get_event(id).await.ok().flatten().filter(|e| {
                            e.status == EventStatus::Dlq
                                || (e.status == EventStatus::Pending && e.retry_count > before)
                        })
                    }
                })
                .await;
            }
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

pub async fn exhausted_retries_move_the_event_to_the_dlq_intact(h: &Harness) {
    let bus = h.bus().await;
    let calls = Arc::new(AtomicU32::new(0));
    bus.subscribe(
        "pay.*",
        flaky(u32::MAX, calls.clone()),
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus
        .publish("pay.charge", &serde_json::json!({"amount": 5}))
        .await
        .unwrap();
    let e = drive_to_dlq(h, &bus, id).await;
    let policy = RetryPolicy::default();
    assert_eq!(
        calls.load(Ordering::SeqCst),
        policy.max_retries + 1,
        "maxRetries + 1 attempts"
    );
    assert_eq!(e.retry_count, 4);
    assert_eq!(e.errors.len(), 4, "one error per attempt: {:?}", e.errors);
    for (i, err) in e.errors.iter().enumerate() {
        assert!(err.contains(&format!("boom {}", i + 1)), "{err}");
    }
    assert_eq!(e.dlq_at, Some(h.clock.now()));
    assert_eq!(e.next_attempt_at, None);
    assert_eq!(e.payload, r#"{"amount":5}"#);
    assert_eq!(e.event_type, "pay.charge");
    // Nothing runs it again.
    h.advance(Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    bus.shutdown().await.unwrap();
}

pub async fn overrides_of_matching_subscriptions_merge_most_permissively(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    let a = Arc::new(AtomicU32::new(0));
    let b = Arc::new(AtomicU32::new(0));
    bus.subscribe(
        "m.*",
        flaky(0, a.clone()),
        SubscribeOptions::default().retry(
            RetryOverride::default()
                .max_retries(1)
                .base_delay(Duration::from_millis(300)),
        ),
    )
    .await
    .unwrap();
    bus.subscribe(
        "m.x",
        flaky(u32::MAX, b.clone()),
        SubscribeOptions::default().retry(
            RetryOverride::default()
                .max_retries(5)
                .base_delay(Duration::from_millis(700))
                .max_delay(Duration::from_millis(800)),
        ),
    )
    .await
    .unwrap();
    // An override that contradicts itself is refused.
    assert!(matches!(
        bus.subscribe(
            "m.*",
            flaky(0, a.clone()),
            SubscribeOptions::default().retry(
                RetryOverride::default()
                    .base_delay(Duration::from_millis(700))
                    .max_delay(Duration::from_millis(500))
            ),
        )
        .await,
        Err(durabus::Error::Invalid(_))
    ));
    bus.start().await.unwrap();
    let id = bus.publish("m.x", &1).await.unwrap();
    let e = get(&bus, id).await;
    // base = min(300, 700) = 300; max delay = max(30000 default of a, 800) = 30000.
    let wait = e.next_attempt_at.unwrap().as_millis() - h.clock.now().as_millis();
    assert!(within_jitter(wait, 300), "waits {wait}");
    let e = drive_to_dlq(h, &bus, id).await;
    assert_eq!(
        b.load(Ordering::SeqCst),
        6,
        "max(1, 5) retries = 6 attempts"
    );
    assert_eq!(
        a.load(Ordering::SeqCst),
        1,
        "the handler that succeeded ran once"
    );
    assert_eq!(e.retry_count, 6);
    bus.shutdown().await.unwrap();
}

pub async fn a_retry_runs_only_the_handlers_that_have_not_succeeded(h: &Harness) {
    let bus = h.bus().await;
    let ok_calls = Arc::new(AtomicU32::new(0));
    let bad_calls = Arc::new(AtomicU32::new(0));
    let after_calls = Arc::new(AtomicU32::new(0));
    bus.subscribe(
        "p.*",
        flaky(0, ok_calls.clone()),
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.subscribe(
        "p.*",
        flaky(1, bad_calls.clone()),
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.subscribe(
        "p.*",
        flaky(0, after_calls.clone()),
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.publish("p.x", &1).await.unwrap();
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert_eq!(
        e.delivered.len(),
        1,
        "the first handler is recorded as delivered"
    );
    assert_eq!(
        after_calls.load(Ordering::SeqCst),
        0,
        "handlers after a failure do not run"
    );
    h.advance(Duration::from_secs(2));
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(ok_calls.load(Ordering::SeqCst), 1);
    assert_eq!(bad_calls.load(Ordering::SeqCst), 2);
    assert_eq!(after_calls.load(Ordering::SeqCst), 1);
    assert_eq!(e.delivered.len(), 3);
    bus.shutdown().await.unwrap();
}

pub async fn named_delivery_records_survive_a_restart(h: &Harness) {
    let ok_calls = Arc::new(AtomicU32::new(0));
    let bad_calls = Arc::new(AtomicU32::new(0));
    let id = {
        let bus = h.bus().await;
        bus.subscribe(
            "r.*",
            flaky(0, ok_calls.clone()),
            SubscribeOptions::default().name("mailer"),
        )
        .await
        .unwrap();
        bus.subscribe(
            "r.*",
            flaky(u32::MAX, bad_calls.clone()),
            SubscribeOptions::default().name("ledger"),
        )
        .await
        .unwrap();
        let id = bus.publish("r.x", &1).await.unwrap();
        bus.shutdown().await.unwrap();
        id
    };
    assert_eq!(ok_calls.load(Ordering::SeqCst), 1);
    // A new process: the same names, and the ledger works now.
    let bus = h.bus().await;
    bus.subscribe(
        "r.*",
        flaky(0, ok_calls.clone()),
        SubscribeOptions::default().name("mailer"),
    )
    .await
    .unwrap();
    bus.subscribe(
        "r.*",
        flaky(0, bad_calls.clone()),
        SubscribeOptions::default().name("ledger"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    h.advance(Duration::from_secs(2));
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(
        ok_calls.load(Ordering::SeqCst),
        1,
        "mailer is not run twice"
    );
    assert_eq!(bad_calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        e.delivered,
        vec!["mailer".to_string(), "ledger".to_string()]
    );
    assert_eq!(
        bus.store().subscriptions().await.unwrap().len(),
        2,
        "rows replaced by name"
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_handler_timeout_is_a_failure(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "slow.*",
        |_e: Event| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(())
        },
        SubscribeOptions::default().timeout(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let started = std::time::Instant::now();
    let id = bus.publish("slow.job", &1).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert_eq!(e.retry_count, 1);
    assert!(
        e.errors[0].contains("timed out after 20 ms"),
        "{:?}",
        e.errors
    );
    bus.shutdown().await.unwrap();
}

pub async fn the_default_handler_timeout_applies(h: &Harness) {
    let bus = h
        .builder()
        .await
        .handler_timeout(Duration::from_millis(15))
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "slow.*",
        |_e: Event| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(())
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus.publish("slow.job", &1).await.unwrap();
    assert!(get(&bus, id).await.errors[0].contains("timed out after 15 ms"));
    bus.shutdown().await.unwrap();
}

pub async fn a_panicking_handler_does_not_take_the_bus_down(h: &Harness) {
    let bus = h.bus().await;
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    bus.subscribe(
        "p.*",
        move |_e: Event| {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    panic!("handler bug");
                }
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.publish("p.x", &1).await.unwrap();
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    assert!(
        e.errors[0].contains("handler panicked: handler bug"),
        "{:?}",
        e.errors
    );
    h.advance(Duration::from_secs(2));
    wait_status(&bus, id, EventStatus::Done).await;
    // The bus still takes new work.
    let id2 = bus.publish("p.y", &2).await.unwrap();
    assert_eq!(get(&bus, id2).await.status, EventStatus::Done);
    bus.shutdown().await.unwrap();
}

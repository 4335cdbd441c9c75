//! `durabus::testing` as an application's test suite uses it, on SQLite and PostgreSQL,
//! including what a failing assertion says.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::testing::TestBus;
use durabus::{Event, EventStatus, RetryOverride, SubscribeOptions};
use serde_json::json;

fn pg_url() -> String {
    std::env::var("DURABUS_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn buses() -> Vec<TestBus> {
    let mut v = vec![
        TestBus::sqlite().await.unwrap(),
        TestBus::in_memory().await.unwrap(),
    ];
    match TestBus::postgres(&pg_url()).await {
        Ok(b) => v.push(b),
        Err(e) => assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PostgreSQL is required with CI=true: {e}"
        ),
    }
    v
}

/// A handler that fails its first `failures` calls for each event, counting every call.
async fn flaky(bus: &TestBus, failures: u32) -> Arc<AtomicU32> {
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    bus.subscribe(
        "pay.*",
        move |e: Event| {
            let c = c.clone();
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                if e.retry_count < failures {
                    return Err(format!("gateway said no (attempt {})", e.retry_count + 1).into());
                }
                Ok(())
            }
        },
        SubscribeOptions::default()
            .name("payments")
            .retry(RetryOverride::default().max_retries(3)),
    )
    .await
    .unwrap();
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_delivers_what_is_due_and_the_assertions_find_it() {
    for bus in buses().await {
        let calls = flaky(&bus, 0).await;
        for id in 0..3 {
            bus.enqueue("pay.charge", &json!({ "order": id }))
                .await
                .unwrap();
        }
        let drained = bus.drain().await.unwrap();
        assert_eq!((drained.done, drained.dead, drained.waiting), (3, 0, 0));
        assert_eq!(drained.advanced, Duration::ZERO);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(bus.handled_by("payments").await, 3);
        let e = bus
            .assert_published("pay.charge", |p| p["order"] == 2)
            .await;
        bus.assert_status(e.id, EventStatus::Done).await;
        assert_eq!(bus.published("pay.charge").await.unwrap().len(), 3);
        // Nothing due: a second drain does nothing.
        assert_eq!(bus.drain().await.unwrap().done, 0);
        bus.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_through_backoff_moves_the_clock_to_each_retry() {
    for bus in buses().await {
        let calls = flaky(&bus, 2).await;
        let id = bus
            .enqueue("pay.charge", &json!({ "order": 1 }))
            .await
            .unwrap();
        let first = bus.drain().await.unwrap();
        assert_eq!(
            (first.done, first.waiting),
            (0, 1),
            "the retry waits for its back-off"
        );
        let rest = bus.drain_through_backoff().await.unwrap();
        assert_eq!((rest.done, rest.waiting), (1, 0));
        assert!(
            rest.advanced >= Duration::from_secs(1),
            "{:?}",
            rest.advanced
        );
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        bus.assert_status(id, EventStatus::Done).await;
        bus.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_always_fails_ends_in_the_dead_letter_queue() {
    for bus in buses().await {
        let calls = flaky(&bus, u32::MAX).await;
        let id = bus
            .enqueue("pay.refund", &json!({ "order": 9 }))
            .await
            .unwrap();
        let drained = bus.drain_through_backoff().await.unwrap();
        assert_eq!((drained.done, drained.dead), (0, 1));
        assert_eq!(calls.load(Ordering::SeqCst), 4, "1 attempt + 3 retries");
        let d = bus.assert_dead_letter(id, "gateway said no").await;
        assert_eq!(d.attempts, 4);
        bus.close().await;
    }
}

/// The message of a failed assertion.
async fn panic_message(f: impl Future<Output = ()> + Send + 'static) -> String {
    let err = tokio::spawn(f).await.expect_err("the assertion must fail");
    let payload = err.into_panic();
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_assertions_say_what_was_there_instead() {
    let bus = Arc::new(TestBus::sqlite().await.unwrap());
    flaky(&bus, u32::MAX).await;
    let id = bus
        .enqueue("pay.charge", &json!({ "order": 5 }))
        .await
        .unwrap();
    bus.drain().await.unwrap();

    let b = bus.clone();
    let msg = panic_message(async move {
        b.assert_published("pay.charge", |p| p["order"] == 6).await;
    })
    .await;
    assert!(
        msg.contains("no \"pay.charge\" event with a matching payload")
            && msg.contains("\"order\":5"),
        "{msg}"
    );
    let b = bus.clone();
    let msg = panic_message(async move {
        b.assert_status(id, EventStatus::Done).await;
    })
    .await;
    assert!(
        msg.contains("is pending, not done") && msg.contains("gateway said no"),
        "{msg}"
    );
    let b = bus.clone();
    let msg = panic_message(async move {
        b.assert_dead_letter(id, "x").await;
    })
    .await;
    assert!(
        msg.contains("is not a dead letter (it is pending)"),
        "{msg}"
    );
    bus.drain_through_backoff().await.unwrap();
    let b = bus.clone();
    let msg = panic_message(async move {
        b.assert_dead_letter(id, "timeout").await;
    })
    .await;
    assert!(msg.contains("does not contain \"timeout\""), "{msg}");
}

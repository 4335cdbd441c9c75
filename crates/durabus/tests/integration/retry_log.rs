//! Every failed attempt, the final one included, emits a structured `tracing` warning with the
//! fields of the retry policy document.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use durabus::{Clock, Event, EventBus, EventStatus, ManualClock, RetryOverride, SubscribeOptions};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

use crate::support::{FieldVisitor as Visitor, Fields};

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<(tracing::Level, Fields)>>>);

impl<S: tracing::Subscriber> Layer<S> for Capture {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Visitor(&mut fields));
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields));
    }
}

// A current-thread runtime keeps every bus task on this thread, where the capture is installed.
#[tokio::test(flavor = "current_thread")]
async fn each_failed_attempt_logs_a_structured_warning() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::listen(subscriber);

    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::default();
    let bus = EventBus::builder()
        .sqlite(dir.path().join("log.db"))
        .clock(Arc::new(clock.clone()))
        .build()
        .await
        .unwrap();
    let sub = bus
        .subscribe(
            "log.*",
            |_e: Event| async { Err("disk full".into()) },
            SubscribeOptions::default().retry(RetryOverride::default().max_retries(2)),
        )
        .await
        .unwrap();
    bus.start().await.unwrap();
    let id = bus.publish("log.x", &1).await.unwrap();
    loop {
        let e = bus.store().get_event(id).await.unwrap().unwrap();
        match e.status {
            EventStatus::Dlq => break,
            EventStatus::Pending => {
                if let Some(due) = e.next_attempt_at {
                    clock.set(due.max(clock.now()));
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    bus.shutdown().await.unwrap();

    let warnings: Vec<Fields> = capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, f)| *level == tracing::Level::WARN && f.contains_key("attempt"))
        .map(|(_, f)| f.clone())
        .collect();
    assert_eq!(
        warnings.len(),
        3,
        "one warning per failed attempt: {warnings:?}"
    );
    for (i, w) in warnings.iter().enumerate() {
        assert_eq!(w["event_id"], id.to_string());
        assert_eq!(w["event_type"], "log.x");
        assert_eq!(w["subscription_id"], sub);
        assert_eq!(w["attempt"], (i + 1).to_string());
        assert_eq!(w["max_attempts"], "3");
        assert!(w["error"].contains("disk full"));
        let delay: u64 = w["delay_ms"].parse().unwrap();
        let want = [1000u64, 2000, 0][i];
        assert!(
            delay >= want * 9 / 10 && delay <= want * 11 / 10,
            "attempt {} delay {delay}, want {want} ±10 %",
            i + 1
        );
    }
    assert_eq!(warnings[2]["dead_lettered"], "true");
}

fn warnings(capture: &Capture) -> Vec<Fields> {
    capture
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(level, f)| *level == tracing::Level::WARN && f.contains_key("attempt"))
        .map(|(_, f)| f.clone())
        .collect()
}

// `finalize(false)` of an own loop goes through the same decision as a handler's failure: the
// same warning with every field.
#[tokio::test(flavor = "current_thread")]
async fn a_failure_reported_by_finalize_logs_the_same_fields() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::listen(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let bus = EventBus::builder()
        .sqlite(dir.path().join("own.db"))
        .clock(Arc::new(ManualClock::default()))
        .retry_policy(durabus::RetryPolicy {
            max_retries: 0,
            ..durabus::RetryPolicy::default()
        })
        .build()
        .await
        .unwrap();
    bus.recover().await.unwrap();
    let id = bus.enqueue("own.job", &1).await.unwrap();
    assert_eq!(bus.poll().await.unwrap().unwrap().id, id);
    bus.finalize(id, false).await.unwrap();
    bus.shutdown().await.unwrap();
    let w = warnings(&capture);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["event_id"], id.to_string());
    assert_eq!(w[0]["event_type"], "own.job");
    assert_eq!(w[0]["subscription_id"], "poll/finalize");
    assert_eq!(w[0]["attempt"], "1");
    assert_eq!(w[0]["max_attempts"], "1");
    assert_eq!(w[0]["delay_ms"], "0");
    assert_eq!(w[0]["error"], "finalized as failed");
    assert_eq!(w[0]["dead_lettered"], "true");
}

// A dead letter whose attempts were all used by crashes logs the subscription that never got
// it, the delay and the last error, like any other.
#[tokio::test(flavor = "current_thread")]
async fn attempts_exhausted_by_crashes_log_every_field() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::listen(subscriber);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let clock = ManualClock::default();
    let open = || {
        EventBus::builder()
            .sqlite(&path)
            .clock(Arc::new(clock.clone()))
            .retry_policy(durabus::RetryPolicy {
                max_retries: 1,
                ..durabus::RetryPolicy::default()
            })
            .build()
    };
    // Two processes take the event and die with it.
    let mut id = None;
    for _ in 0..2 {
        let bus = open().await.unwrap();
        bus.recover().await.unwrap();
        if id.is_none() {
            id = Some(bus.enqueue("fatal.z", &1).await.unwrap());
        }
        assert!(bus.poll().await.unwrap().is_some());
        bus.store().close().await.unwrap();
    }
    let id = id.unwrap();
    let bus = open().await.unwrap();
    let sub = bus
        .subscribe(
            "fatal.*",
            |_e: Event| async { Ok(()) },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    bus.start().await.unwrap();
    loop {
        let e = bus.store().get_event(id).await.unwrap().unwrap();
        if e.status == EventStatus::Dlq {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    bus.shutdown().await.unwrap();
    let w = warnings(&capture);
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(w[0]["event_id"], id.to_string());
    assert_eq!(w[0]["subscription_id"], sub);
    assert_eq!(w[0]["attempt"], "2");
    assert_eq!(w[0]["max_attempts"], "2");
    assert_eq!(w[0]["delay_ms"], "0");
    assert!(w[0]["error"].contains("interrupted"), "{w:?}");
    assert_eq!(w[0]["dead_lettered"], "true");
}

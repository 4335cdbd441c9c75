//! Typed events and permanent failures, on every store: a typed publish reaches a typed
//! handler; a payload that does not fit its type is dead-lettered after one attempt, naming the
//! type and the field, without calling the handler; a handler's permanent error is never
//! retried.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use durabus::{Event, EventStatus, NewEvent, SubscribeOptions, TypedEvent};
use serde::{Deserialize, Serialize};

use crate::support::*;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct OrderPaid {
    order: u64,
    amount_cents: u64,
}

impl TypedEvent for OrderPaid {
    const EVENT_TYPE: &'static str = "order.paid";
}

/// Subscribes a typed handler that keeps what it was given; returns that list.
async fn keeping(bus: &durabus::EventBus) -> Arc<std::sync::Mutex<Vec<(OrderPaid, Event)>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    bus.subscribe_typed(
        move |paid: OrderPaid, event: Event| {
            s.lock().unwrap().push((paid, event));
            async { Ok(()) }
        },
        SubscribeOptions::default().name("receipts"),
    )
    .await
    .unwrap();
    seen
}

async fn dead(bus: &durabus::EventBus, id: durabus::EventId) -> Event {
    eventually("the dead letter", || async {
        let e = bus.store().get_event(id).await.unwrap()?;
        (e.status == EventStatus::Dlq).then_some(e)
    })
    .await
}

pub async fn a_typed_publish_reaches_a_typed_handler_with_its_metadata(h: &Harness) {
    let bus = h.bus().await;
    let seen = keeping(&bus).await;
    bus.start().await.unwrap();
    let paid = OrderPaid {
        order: 7,
        amount_cents: 1250,
    };
    let id = bus.publish_typed(&paid).await.unwrap();
    let mut with_meta = NewEvent::typed(&OrderPaid {
        order: 8,
        amount_cents: 99,
    })
    .unwrap();
    with_meta.metadata.insert("tenant".into(), "acme".into());
    let second = bus.enqueue_event(with_meta).await.unwrap();
    eventually("both delivered", || async {
        (seen.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].0, paid);
    assert_eq!(seen[0].1.id, id);
    assert_eq!(seen[0].1.event_type, "order.paid");
    assert_eq!(seen[1].1.id, second);
    assert_eq!(
        seen[1].1.metadata.get("tenant").map(String::as_str),
        Some("acme")
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_payload_that_does_not_fit_is_dead_lettered_once_naming_the_field(h: &Harness) {
    let bus = h.bus().await;
    let seen = keeping(&bus).await;
    bus.start().await.unwrap();
    // Published through the untyped API with a mistake: the amount is text.
    let id = bus
        .publish(
            "order.paid",
            &serde_json::json!({"order": 9, "amount_cents": "ten"}),
        )
        .await
        .unwrap();
    let e = dead(&bus, id).await;
    assert_eq!(e.retry_count, 1, "one attempt, no retry: {:?}", e.errors);
    let error = e.last_error().unwrap();
    assert!(error.contains("order.paid"), "{error}");
    assert!(error.contains("field amount_cents"), "{error}");
    assert!(error.contains("[receipts]"), "{error}");
    assert!(
        seen.lock().unwrap().is_empty(),
        "the handler was not called"
    );
    // Nothing retries it later.
    h.advance(std::time::Duration::from_secs(3600));
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let again = bus.store().get_event(id).await.unwrap().unwrap();
    assert_eq!((again.status, again.retry_count), (EventStatus::Dlq, 1));
    bus.shutdown().await.unwrap();
}

pub async fn a_permanent_error_is_never_retried(h: &Harness) {
    let bus = h.bus().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    bus.subscribe(
        "pay.*",
        move |_e: Event| {
            c.fetch_add(1, Ordering::SeqCst);
            async { durabus::handler::permanent("the card number is malformed") }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.publish("pay.card", &1).await.unwrap();
    let e = dead(&bus, id).await;
    assert_eq!(e.retry_count, 1);
    assert!(
        e.last_error()
            .unwrap()
            .contains("the card number is malformed")
    );
    h.advance(std::time::Duration::from_secs(3600));
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

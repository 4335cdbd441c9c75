//! Dedup windows, on every store: a second publish of a key inside its window stores nothing
//! and answers the first event's id; after the window the key is free again.

use std::time::Duration;

use durabus::{ErrorKind, EventQuery, EventStatus, NewEvent};

use crate::support::*;

const WINDOW: Duration = Duration::from_secs(60);

fn keyed(n: i32, key: &str) -> NewEvent {
    NewEvent::new("d.order", &n).unwrap().dedup(key, WINDOW)
}

async fn stored(bus: &durabus::EventBus) -> usize {
    bus.history()
        .list(EventQuery::default())
        .await
        .unwrap()
        .len()
}

pub async fn a_second_publish_in_the_window_answers_the_first_id_and_stores_nothing(h: &Harness) {
    let bus = h.bus().await;
    let calls = count_calls(&bus, "d.*").await;
    let first = bus.enqueue_event(keyed(1, "order-7")).await.unwrap();
    h.advance(Duration::from_secs(30));
    // Every publish path answers the first id and stores nothing.
    assert_eq!(bus.enqueue_event(keyed(2, "order-7")).await.unwrap(), first);
    assert_eq!(bus.publish_event(keyed(3, "order-7")).await.unwrap(), first);
    let batch = bus
        .enqueue_batch(vec![
            keyed(4, "order-7"),
            keyed(5, "order-8"),
            keyed(6, "order-8"),
        ])
        .await
        .unwrap();
    assert_eq!(batch[0], first);
    assert_ne!(batch[1], first);
    assert_eq!(
        batch[2], batch[1],
        "a key twice in one batch is stored once"
    );
    assert_eq!(stored(&bus).await, 2);
    // The inline publish of a duplicate delivered nothing.
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    // The window runs from the first publish: 60 s after it the key is free again.
    h.advance(Duration::from_secs(29));
    assert_eq!(bus.enqueue_event(keyed(7, "order-7")).await.unwrap(), first);
    h.advance(Duration::from_secs(1));
    let second = bus.enqueue_event(keyed(8, "order-7")).await.unwrap();
    assert_ne!(second, first);
    // ... and the new event opens a new window.
    assert_eq!(
        bus.enqueue_event(keyed(9, "order-7")).await.unwrap(),
        second
    );
    assert_eq!(stored(&bus).await, 3);
    let e = bus.store().get_event(second).await.unwrap().unwrap();
    assert_eq!(e.payload, "8");
    assert_eq!(e.status, EventStatus::Pending);
    bus.shutdown().await.unwrap();
}

pub async fn a_duplicate_of_a_delayed_event_answers_its_id(h: &Harness) {
    let bus = h.bus().await;
    let later = keyed(1, "remind-7").delay(Duration::from_secs(600));
    let first = bus.publish_event(later).await.unwrap();
    assert_eq!(
        bus.store().get_event(first).await.unwrap().unwrap().status,
        EventStatus::Scheduled
    );
    assert_eq!(
        bus.publish_event(keyed(2, "remind-7")).await.unwrap(),
        first
    );
    // An id published again with its own key is the known id, not a duplicate.
    let again = keyed(3, "remind-7").with_id(first);
    assert_eq!(bus.enqueue_event(again).await.unwrap(), first);
    assert_eq!(stored(&bus).await, 1);
    bus.shutdown().await.unwrap();
}

pub async fn racing_publishes_of_one_key_store_one_event(h: &Harness) {
    let bus = h.bus().await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let bus = bus.clone();
            tokio::spawn(async move { bus.enqueue_event(keyed(i, "race")).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    ids.dedup();
    assert_eq!(
        ids.len(),
        1,
        "every racer answers the one stored id: {ids:?}"
    );
    assert_eq!(stored(&bus).await, 1);
    bus.shutdown().await.unwrap();
}

pub async fn bad_dedup_keys_and_windows_are_refused_and_nothing_is_stored(h: &Harness) {
    let bus = h.bus().await;
    let e = || NewEvent::new("d.bad", &1).unwrap();
    let bad = [
        (e().dedup("", WINDOW), "dedup_key"),
        (e().dedup("k".repeat(256), WINDOW), "dedup_key"),
        (e().dedup("k", Duration::ZERO), "dedup_window"),
    ];
    for (event, field) in bad {
        for err in [
            bus.enqueue_event(event.clone()).await.unwrap_err(),
            bus.publish_event(event.clone()).await.unwrap_err(),
            bus.enqueue_batch(vec![e(), event]).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            assert_eq!(err.invalid_value().map(|i| i.field).as_deref(), Some(field));
        }
    }
    assert_eq!(stored(&bus).await, 0);
    // A refused key took nothing: it is free for a good publish.
    let ok = bus.enqueue_event(e().dedup("k", WINDOW)).await.unwrap();
    assert_eq!(bus.enqueue_event(e().dedup("k", WINDOW)).await.unwrap(), ok);
    bus.shutdown().await.unwrap();
}

//! The dead-letter inspector.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durabus::{
    DlqInspector, Error, Event, EventId, EventStatus, Page, RetryOverride, SubscribeOptions,
};

use crate::support::*;

/// Publishes `n` events that die at once (no retries), one per clock second.
async fn dead_events(h: &Harness, bus: &durabus::EventBus, n: usize) -> Vec<EventId> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(bus.publish("dead.x", &i).await.unwrap());
        h.advance(Duration::from_secs(1));
    }
    ids
}

async fn failing_bus(h: &Harness, healthy: Arc<AtomicBool>) -> durabus::EventBus {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "dead.*",
        move |_e: Event| {
            let healthy = healthy.clone();
            async move {
                if healthy.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("downstream unavailable".into())
                }
            }
        },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    bus
}

pub async fn list_pages_dead_events_newest_first(h: &Harness) {
    let bus = failing_bus(h, Arc::new(AtomicBool::new(false))).await;
    let ids = dead_events(h, &bus, 5).await;
    let ok = bus.publish("alive.x", &1).await.unwrap();
    let dlq = bus.dlq();
    let all = dlq.list(Page::default()).await.unwrap();
    let got: Vec<_> = all.iter().map(|e| e.id).collect();
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(got, want, "newest first, only dead events");
    assert!(!got.contains(&ok));
    assert!(
        all.iter()
            .all(|e| e.status == EventStatus::Dlq && e.errors.len() == 1)
    );
    let page: Vec<_> = dlq
        .list(Page::new(1, 2))
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(page, want[1..3].to_vec());
    assert!(dlq.list(Page::new(5, 10)).await.unwrap().is_empty());
    assert_eq!(dlq.get(ids[0]).await.unwrap().id, ids[0]);
    assert!(matches!(dlq.get(ok).await, Err(Error::EventNotFound(..))));
    bus.shutdown().await.unwrap();
}

pub async fn retry_resets_a_dead_event_and_it_is_delivered_again(h: &Harness) {
    let healthy = Arc::new(AtomicBool::new(false));
    let bus = failing_bus(h, healthy.clone()).await;
    bus.start().await.unwrap();
    let ids = dead_events(h, &bus, 1).await;
    let id = ids[0];
    assert_eq!(get(&bus, id).await.status, EventStatus::Dlq);
    healthy.store(true, Ordering::SeqCst);
    // The inspector needs only the store.
    let inspector = DlqInspector::with_clock(bus.store(), Arc::new(h.clock.clone()));
    inspector.retry(id).await.unwrap();
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(e.retry_count, 0, "full reset");
    assert!(e.errors.is_empty(), "errors cleared");
    assert_eq!(e.dlq_at, None);
    assert!(
        matches!(inspector.retry(id).await, Err(Error::EventNotFound(..))),
        "not dead any more"
    );
    assert!(matches!(
        inspector.retry(EventId::new()).await,
        Err(Error::EventNotFound(..))
    ));
    bus.shutdown().await.unwrap();
}

pub async fn purge_deletes_dead_events_created_at_or_before_the_cutoff(h: &Harness) {
    let bus = failing_bus(h, Arc::new(AtomicBool::new(false))).await;
    let old = bus.publish("dead.old", &1).await.unwrap();
    h.advance(Duration::from_secs(86_400));
    let edge = bus.publish("dead.edge", &1).await.unwrap();
    h.advance(Duration::from_millis(1));
    let young = bus.publish("dead.young", &1).await.unwrap();
    let healthy = bus.publish("alive.x", &1).await.unwrap();
    // Now: edge is exactly 2 days old + 1 ms... set the clock so edge is exactly at the cutoff.
    let edge_created = get(&bus, edge).await.created_at;
    h.clock
        .set(edge_created.plus(Duration::from_secs(2 * 86_400)));
    let dlq = bus.dlq();
    assert_eq!(
        dlq.purge(2).await.unwrap(),
        2,
        "old and the one exactly at the cutoff"
    );
    assert!(bus.store().get_event(old).await.unwrap().is_none());
    assert!(bus.store().get_event(edge).await.unwrap().is_none());
    assert!(bus.store().get_event(young).await.unwrap().is_some());
    assert!(
        bus.store().get_event(healthy).await.unwrap().is_some(),
        "only dead events are purged"
    );
    assert_eq!(dlq.purge(0).await.unwrap(), 1);
    assert_eq!(dlq.purge(0).await.unwrap(), 0);
    bus.shutdown().await.unwrap();
}

pub async fn list_returns_at_most_100_by_default(h: &Harness) {
    let bus = failing_bus(h, Arc::new(AtomicBool::new(false))).await;
    let batch: Vec<_> = (0..120)
        .map(|i| durabus::NewEvent::new("dead.x", &i).unwrap())
        .collect();
    // Pending now; the failing handler (no retries) dead-letters each on its first attempt.
    let store = bus.store();
    store
        .insert(batch, durabus::InsertMode::Pending, h.clock.now())
        .await
        .unwrap();
    bus.start().await.unwrap();
    eventually("120 dead events", || {
        let dlq = bus.dlq();
        async move { (dlq.list(Page::new(0, 1000)).await.ok()?.len() == 120).then_some(()) }
    })
    .await;
    assert_eq!(bus.dlq().list(Page::default()).await.unwrap().len(), 100);
    assert_eq!(bus.dlq().list(Page::new(100, 100)).await.unwrap().len(), 20);
    bus.shutdown().await.unwrap();
}

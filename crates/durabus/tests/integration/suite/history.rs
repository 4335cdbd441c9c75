//! Idempotent publish and the event history.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durabus::{Event, EventBus, EventId, EventQuery, EventStatus, NewEvent, SubscribeOptions};

use crate::support::*;

async fn counting_bus(h: &Harness, pattern: &str) -> (EventBus, Arc<AtomicUsize>) {
    let bus = h.bus().await;
    let count = count_calls(&bus, pattern).await;
    (bus, count)
}

pub async fn publishing_one_id_again_stores_and_delivers_it_once(h: &Harness) {
    let (bus, count) = counting_bus(h, "order.*").await;
    let event = NewEvent::new("order.placed", &1).unwrap();
    let id = event.id;
    assert_eq!(bus.publish_event(event.clone()).await.unwrap(), id);
    assert_eq!(bus.publish_event(event.clone()).await.unwrap(), id);
    assert_eq!(bus.enqueue_event(event.clone()).await.unwrap(), id);
    assert_eq!(count.load(Ordering::SeqCst), 1);
    // Racing publishes of a fresh id: one stores and delivers it, all return the id.
    let racer = NewEvent::new("order.paid", &2).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (bus, racer) = (bus.clone(), racer.clone());
            tokio::spawn(async move { bus.publish_event(racer).await })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), racer.id);
    }
    assert_eq!(count.load(Ordering::SeqCst), 2);
    // A batch repeating stored ids stores only the new one; every id comes back.
    let fresh = NewEvent::new("order.shipped", &3).unwrap();
    let ids = bus
        .enqueue_batch(vec![
            event.clone(),
            fresh.clone(),
            racer.clone(),
            fresh.clone(),
        ])
        .await
        .unwrap();
    assert_eq!(ids, vec![id, fresh.id, racer.id, fresh.id]);
    bus.start().await.unwrap();
    wait_status(&bus, fresh.id, EventStatus::Done).await;
    let all = bus
        .store()
        .list_events(EventQuery::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    bus.shutdown().await.unwrap();
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

pub async fn history_lists_by_type_status_and_time(h: &Harness) {
    let (bus, _count) = counting_bus(h, "h.ok").await;
    let t0 = h.clock.now();
    let mut ids: Vec<EventId> = Vec::new();
    for i in 0..6 {
        let ty = if i % 2 == 0 { "h.ok" } else { "h.other" };
        ids.push(bus.publish(ty, &i).await.unwrap());
        h.advance(Duration::from_secs(60));
    }
    // One still pending (enqueued, the bus is not started).
    let pending = bus.enqueue("h.ok", &99).await.unwrap();
    let history = bus.history();
    let q = |status, ty: Option<&str>, from: Option<u64>, before: Option<u64>| EventQuery {
        status,
        event_type: ty.map(str::to_owned),
        created_from: from.map(|m| t0.plus(Duration::from_secs(m * 60))),
        created_before: before.map(|m| t0.plus(Duration::from_secs(m * 60))),
        ..EventQuery::default()
    };
    let ids_of = |events: Vec<Event>| events.into_iter().map(|e| e.id).collect::<Vec<_>>();
    // Everything, newest first.
    let mut newest_first = ids.clone();
    newest_first.push(pending);
    newest_first.reverse();
    assert_eq!(
        ids_of(history.list(q(None, None, None, None)).await.unwrap()),
        newest_first
    );
    // Done events of one type.
    assert_eq!(
        ids_of(
            history
                .list(q(Some(EventStatus::Done), Some("h.ok"), None, None))
                .await
                .unwrap()
        ),
        vec![ids[4], ids[2], ids[0]]
    );
    // A time range: from is inclusive, before is exclusive.
    assert_eq!(
        ids_of(history.list(q(None, None, Some(1), Some(3))).await.unwrap()),
        vec![ids[2], ids[1]]
    );
    assert_eq!(
        ids_of(
            history
                .list(q(Some(EventStatus::Pending), Some("h.ok"), Some(6), None))
                .await
                .unwrap()
        ),
        vec![pending]
    );
    // A range that ends where (or before) it starts selects nothing, as the API documents
    // (no JSON Schema can compare two fields, so it is not refused).
    for (from, before) in [(3, 3), (5, 1)] {
        assert!(
            history
                .list(q(None, None, Some(from), Some(before)))
                .await
                .unwrap()
                .is_empty()
        );
    }
    bus.shutdown().await.unwrap();
}

pub async fn purge_removes_only_done_events_completed_at_or_before_the_cutoff(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "p.ok",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.subscribe(
        "p.dead",
        |_e: Event| async { Err("always fails".into()) },
        SubscribeOptions::default().retry(durabus::RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let mut old = Vec::new();
    for i in 0..7 {
        old.push(bus.publish("p.ok", &i).await.unwrap());
    }
    let dead = bus.publish("p.dead", &0).await.unwrap();
    assert_eq!(get(&bus, dead).await.status, EventStatus::Dlq);
    h.advance(Duration::from_secs(86_400));
    let edge = bus.publish("p.ok", &"edge").await.unwrap();
    h.advance(Duration::from_millis(1));
    let young = bus.publish("p.ok", &"young").await.unwrap();
    let pending = bus.enqueue("p.ok", &"pending").await.unwrap();
    // Now exactly one day after `edge` completed: edge is at the cutoff and goes.
    let edge_done = get(&bus, edge).await.updated_at;
    h.clock.set(edge_done.plus(Duration::from_secs(86_400)));
    // Chunks of 3: the purge takes several transactions and still deletes all 8.
    let history = bus.history().purge_chunk(3);
    assert_eq!(history.purge(Duration::from_secs(86_400)).await.unwrap(), 8);
    for id in old.iter().chain([&edge]) {
        assert!(bus.store().get_event(*id).await.unwrap().is_none());
    }
    for id in [young, pending, dead] {
        assert!(
            bus.store().get_event(id).await.unwrap().is_some(),
            "{id} kept"
        );
    }
    assert_eq!(history.purge(Duration::from_secs(86_400)).await.unwrap(), 0);
    assert_eq!(history.purge(Duration::ZERO).await.unwrap(), 1, "young");
    assert!(bus.store().get_event(pending).await.unwrap().is_some());
    assert!(bus.store().get_event(dead).await.unwrap().is_some());
    bus.shutdown().await.unwrap();
}

pub async fn finished_events_are_counted_per_minute(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "m.*",
        |e: Event| async move {
            if e.event_type == "m.bad" {
                Err("refused".into())
            } else {
                Ok(())
            }
        },
        SubscribeOptions::default().retry(durabus::RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let start = h.clock.now();
    let store = bus.store();
    assert!(store.finished_per_minute(start).await.unwrap().is_empty());
    // Minute 0: three delivered. Minute 2: one delivered, one dead.
    let mut first = Vec::new();
    for i in 0..3 {
        first.push(bus.publish("m.ok", &i).await.unwrap());
    }
    for id in first {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    h.advance(Duration::from_secs(150));
    bus.publish("m.ok", &3).await.unwrap();
    let dead = bus.publish("m.bad", &4).await.unwrap();
    wait_status(&bus, dead, EventStatus::Dlq).await;
    let minute = |offset_min: i64| durabus::Timestamp(start.as_millis() + offset_min * 60_000);
    // The dead-letter record is written with the outcome: wait for it too.
    eventually("the dead-letter record", || async {
        let dead: u64 = store
            .finished_per_minute(start)
            .await
            .unwrap()
            .iter()
            .map(|m| m.dead)
            .sum();
        (dead == 1).then_some(())
    })
    .await;
    let all = store.finished_per_minute(start).await.unwrap();
    let shape: Vec<_> = all.iter().map(|m| (m.minute, m.done, m.dead)).collect();
    assert_eq!(shape, vec![(minute(0), 3, 0), (minute(2), 1, 1)]);
    // `since` is rounded down to its minute; earlier minutes are left out.
    let later = store
        .finished_per_minute(durabus::Timestamp(start.as_millis() + 61_000))
        .await
        .unwrap();
    assert_eq!(later.len(), 1);
    assert_eq!(
        (later[0].minute, later[0].done, later[0].dead),
        (minute(2), 1, 1)
    );
    bus.shutdown().await.unwrap();
}

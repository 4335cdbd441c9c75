//! Publish options: scheduled events (`deliver_at`, `delay`) and priorities, on every store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use durabus::{
    Actor, ErrorKind, Event, EventQuery, EventStatus, InsertMode, NewEvent, PublishOptions, Stored,
    SubscribeOptions, Timestamp,
};

use crate::support::*;

/// A started bus with a counting handler for `s.*`.
async fn counting_bus(h: &Harness) -> (durabus::EventBus, Arc<std::sync::atomic::AtomicUsize>) {
    let bus = h.bus().await;
    let calls = count_calls(&bus, "s.*").await;
    bus.start().await.unwrap();
    (bus, calls)
}

pub async fn a_delayed_event_waits_for_its_time_and_is_delivered_once(h: &Harness) {
    let (bus, calls) = counting_bus(h).await;
    let start = h.clock.now();
    let id = bus
        .enqueue_event(
            NewEvent::new("s.remind", &1)
                .unwrap()
                .delay(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Scheduled);
    let due = start.plus(Duration::from_secs(3600));
    assert_eq!(e.next_attempt_at, Some(due));
    assert_eq!(e.deliver_at, Some(due));
    // `publish` of a scheduled event returns once it is stored: nothing to wait for.
    let published = bus
        .publish_event(NewEvent::new("s.remind", &2).unwrap().deliver_at(due))
        .await
        .unwrap();
    assert_eq!(get(&bus, published).await.status, EventStatus::Scheduled);
    // Not a millisecond early.
    h.clock.set(due.minus(Duration::from_millis(1)));
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(get(&bus, id).await.status, EventStatus::Scheduled);
    // Due: both delivered, once each.
    h.clock.set(due);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(e.retry_count, 0);
    assert_eq!(
        e.deliver_at,
        Some(due),
        "the scheduled time stays on record"
    );
    wait_status(&bus, published, EventStatus::Done).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    bus.shutdown().await.unwrap();
}

pub async fn a_time_in_the_past_means_now(h: &Harness) {
    let (bus, calls) = counting_bus(h).await;
    let past = h.clock.now().minus(Duration::from_secs(60));
    let id = bus
        .publish_event(NewEvent::new("s.late", &1).unwrap().deliver_at(past))
        .await
        .unwrap();
    // `publish` delivered it inline, as an event without options.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(e.deliver_at, None, "not a scheduled event");
    let zero = bus
        .enqueue_event(NewEvent::new("s.late", &2).unwrap().delay(Duration::ZERO))
        .await
        .unwrap();
    wait_status(&bus, zero, EventStatus::Done).await;
    bus.shutdown().await.unwrap();
}

pub async fn a_scheduled_event_survives_a_restart(h: &Harness) {
    let id = {
        let bus = h.bus().await;
        let id = bus
            .enqueue_batch(vec![
                NewEvent::new("s.later", &1)
                    .unwrap()
                    .delay(Duration::from_secs(60)),
            ])
            .await
            .unwrap()[0];
        // The process dies without a shutdown.
        drop(bus);
        id
    };
    let (bus, calls) = counting_bus(h).await;
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Scheduled);
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    h.advance(Duration::from_secs(60));
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

pub async fn scheduled_events_are_claimed_when_due_in_due_order(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let at = |s: u64| now.plus(Duration::from_secs(s));
    let later = NewEvent::new("s.b", &1).unwrap().deliver_at(at(20));
    let sooner = NewEvent::new("s.a", &1).unwrap().deliver_at(at(10));
    let (later_id, sooner_id) = (later.id, sooner.id);
    let stored = store
        .insert(vec![later, sooner], InsertMode::Pending, now)
        .await
        .unwrap();
    assert_eq!(stored, vec![Stored::New, Stored::New]);
    assert_eq!(store.next_due().await.unwrap(), Some(at(10)));
    assert!(store.claim_due(now, 10).await.unwrap().is_empty());
    assert!(store.claim_due(at(9), 10).await.unwrap().is_empty());
    // Claiming at the due time: the event is taken (at once on SQLite; on PostgreSQL the
    // claim that finds it due makes it pending, and the next takes it).
    let mut got = store.claim_due(at(10), 10).await.unwrap();
    if got.is_empty() {
        got = store.claim_due(at(10), 10).await.unwrap();
    }
    assert_eq!(
        got.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![sooner_id]
    );
    assert_eq!(got[0].status, EventStatus::Processing);
    assert_eq!(store.next_due().await.unwrap(), Some(at(20)));
    let mut got = store.claim_due(at(30), 10).await.unwrap();
    if got.is_empty() {
        got = store.claim_due(at(30), 10).await.unwrap();
    }
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), vec![later_id]);
    store.close().await.unwrap();
}

pub async fn due_events_are_claimed_highest_priority_first_and_fifo_within_one(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let mut order = Vec::new();
    // Published one millisecond apart, so publish order is due order.
    for (i, p) in [0i16, 5, -3, 5, 0, 10, -3, 100, -100]
        .into_iter()
        .enumerate()
    {
        let e = NewEvent::new("s.p", &i).unwrap().priority(p);
        order.push((p, i, e.id));
        store
            .insert(
                vec![e],
                InsertMode::Pending,
                now.plus(Duration::from_millis(i as u64)),
            )
            .await
            .unwrap();
    }
    let later = now.plus(Duration::from_secs(1));
    // A claim of two takes the two highest.
    let first = store.claim_due(later, 2).await.unwrap();
    assert_eq!(
        first.iter().map(|e| e.priority).collect::<Vec<_>>(),
        vec![100, 10]
    );
    let rest = store.claim_due(later, 100).await.unwrap();
    order.sort_by_key(|(p, i, _)| (std::cmp::Reverse(*p), *i));
    let expected: Vec<_> = order.iter().skip(2).map(|(_, _, id)| *id).collect();
    assert_eq!(rest.iter().map(|e| e.id).collect::<Vec<_>>(), expected);
    store.close().await.unwrap();
}

pub async fn a_delayed_prioritised_batch_is_delivered_by_priority_when_due(h: &Harness) {
    // One handler at a time, so the order of the calls is the order of the claim.
    let bus = h.builder().await.concurrency(1).build().await.unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    bus.subscribe(
        "c.*",
        move |e: Event| {
            s.lock().unwrap().push(e.priority);
            async { Ok(()) }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let due = h.clock.now().plus(Duration::from_secs(5));
    // Three events due at the same time with different priorities, published low first.
    let events: Vec<NewEvent> = [-1i16, 0, 7]
        .into_iter()
        .map(|p| {
            NewEvent::new("c.x", &p)
                .unwrap()
                .with_options(PublishOptions::new().deliver_at(due).priority(p))
        })
        .collect();
    let ids = bus.enqueue_batch(events).await.unwrap();
    let scheduled = bus
        .history()
        .list(EventQuery {
            status: Some(EventStatus::Scheduled),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(scheduled.len(), 3, "listed and filtered as scheduled");
    h.clock.set(due);
    for id in &ids {
        wait_status(&bus, *id, EventStatus::Done).await;
    }
    assert_eq!(*seen.lock().unwrap(), vec![7, 0, -1]);
    let done = bus
        .history()
        .list(EventQuery {
            status: Some(EventStatus::Done),
            event_type: Some("c.x".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert!(done.iter().all(|e| e.deliver_at == Some(due)), "{done:?}");
    bus.shutdown().await.unwrap();
}

pub async fn bad_publish_options_are_refused_and_nothing_is_stored(h: &Harness) {
    let bus = h.bus().await;
    let bad = [
        NewEvent::new("s.bad", &1).unwrap().priority(101),
        NewEvent::new("s.bad", &1).unwrap().priority(-101),
        NewEvent::new("s.bad", &1)
            .unwrap()
            .delay(Duration::from_secs(200 * 366 * 24 * 3600)),
        NewEvent::new("s.bad", &1)
            .unwrap()
            .deliver_at(Timestamp(i64::MAX)),
    ];
    for e in bad.iter().cloned() {
        let err = bus.enqueue_event(e.clone()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        let err = bus.publish_event(e.clone()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        // One bad event fails its whole batch.
        let good = NewEvent::new("s.bad", &2).unwrap();
        let err = bus.enqueue_batch(vec![good, e]).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    let stored = bus.history().list(EventQuery::default()).await.unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    bus.shutdown().await.unwrap();
}

pub async fn scheduled_depth_is_a_gauge(h: &Harness) {
    let bus = h.bus().await;
    let later = h.clock.now().plus(Duration::from_secs(30));
    for i in 0..3 {
        bus.enqueue_event(NewEvent::new("s.g", &i).unwrap().deliver_at(later))
            .await
            .unwrap();
    }
    bus.enqueue("s.g", &9).await.unwrap();
    let g = bus.store().gauges(h.clock.now()).await.unwrap();
    assert_eq!(g.scheduled, 3);
    assert_eq!(g.pending, 1);
    assert_eq!(g.next_scheduled_at, Some(later));
    bus.shutdown().await.unwrap();
}

/// A prioritised event goes back to pending by a retry, a release and a recovery, and as a dead
/// letter sent back: each time the next claim takes it again, ahead of priority 0.
pub async fn a_prioritised_event_is_claimed_again_after_each_way_back_to_pending(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    // The clock the dead-letter retry reads: when the last claims below run.
    h.clock.set(now.plus(Duration::from_secs(3600)));
    let plain = NewEvent::new("s.p", &0).unwrap();
    let urgent = NewEvent::new("s.p", &1).unwrap().priority(7);
    let (plain_id, id) = (plain.id, urgent.id);
    store
        .insert(vec![plain, urgent], InsertMode::Pending, now)
        .await
        .unwrap();
    let first = |got: Vec<Event>| got.first().map(|e| e.id);
    let claim = |at: Timestamp| {
        let store = store.clone();
        async move {
            let mut got = store.claim_due(at, 1).await.unwrap();
            if got.is_empty() {
                got = store.claim_due(at, 1).await.unwrap();
            }
            got
        }
    };
    assert_eq!(first(claim(now).await), Some(id));
    // A retry.
    store
        .record(
            durabus::Outcome::Retry {
                id,
                retry_count: 1,
                errors: vec!["down".into()],
                delivered: Vec::new(),
                next_attempt_at: now,
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(first(claim(now).await), Some(id), "after a retry");
    // A release.
    store.release(vec![id], now).await.unwrap();
    assert_eq!(first(claim(now).await), Some(id), "after a release");
    // A crash and its recovery, by the next process, once the lease ran out (PostgreSQL).
    store.close().await.unwrap();
    let store = h.backend.open().await;
    let now = now.plus(Duration::from_secs(3600));
    store.recover_processing(now).await.unwrap();
    let claim = |at: Timestamp| {
        let store = store.clone();
        async move {
            let mut got = store.claim_due(at, 1).await.unwrap();
            if got.is_empty() {
                got = store.claim_due(at, 1).await.unwrap();
            }
            got
        }
    };
    assert_eq!(first(claim(now).await), Some(id), "after a recovery");
    // A dead letter sent back.
    store
        .record(
            durabus::Outcome::Dead {
                id,
                retry_count: 4,
                errors: vec!["down".into()],
                delivered: Vec::new(),
                death: Box::new(durabus::dlq::Death::new(
                    id,
                    "s.p",
                    None,
                    "down",
                    Vec::new(),
                    vec!["down".into()],
                    4,
                    durabus::dlq::DeadLetterPolicy::default(),
                )),
            },
            now,
        )
        .await
        .unwrap();
    durabus::DeadLetters::with_clock(store.clone(), Arc::new(h.clock.clone()))
        .retry(id, &Actor::new("ada", durabus::ActorKind::Cli))
        .await
        .unwrap();
    assert_eq!(
        first(claim(now).await),
        Some(id),
        "after a dead-letter retry"
    );
    // And the plain one is still there, behind it.
    assert_eq!(first(claim(now).await), Some(plain_id));
    store.close().await.unwrap();
}

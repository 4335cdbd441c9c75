//! Cancelling events, on every store: waiting events, running ones, one subscription, and what
//! is refused.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use durabus::cancel::{CancelOutcome, CancelRequest};
use durabus::{
    Actor, ActorKind, ErrorKind, Event, EventId, EventQuery, EventStatus, InsertMode, NewEvent,
    SubscribeOptions,
};

use crate::support::*;

fn request(id: EventId, subscription: Option<&str>) -> CancelRequest {
    CancelRequest {
        event_id: id,
        subscription: subscription.map(str::to_owned),
        actor: Actor::new("ada", ActorKind::Library),
        reason: "the customer withdrew the order".into(),
    }
}

pub async fn a_scheduled_or_pending_event_cancelled_never_runs(h: &Harness) {
    let bus = h.bus().await;
    let calls = count_calls(&bus, "c.*").await;
    let later = bus
        .enqueue_event(
            NewEvent::new("c.later", &1)
                .unwrap()
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let now = bus.enqueue("c.now", &2).await.unwrap();
    for id in [later, now] {
        let c = bus.cancel(request(id, None)).await.unwrap();
        assert_eq!(c.outcome, CancelOutcome::Cancelled);
        assert_eq!((c.actor.as_str(), c.event_id), ("ada", id));
        let e = get(&bus, id).await;
        assert_eq!(e.status, EventStatus::Cancelled);
        assert_eq!(e.next_attempt_at, None);
    }
    bus.start().await.unwrap();
    h.advance(Duration::from_secs(120));
    // Something else goes through, so the worker has looked.
    let other = bus.enqueue("c.other", &3).await.unwrap();
    wait_status(&bus, other, EventStatus::Done).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the other event ran");
    assert_eq!(get(&bus, later).await.status, EventStatus::Cancelled);
    // On record, durable, listed by status.
    let record = bus.cancellations(later).await.unwrap();
    assert_eq!(record.len(), 1);
    assert_eq!(record[0].reason, "the customer withdrew the order");
    assert_eq!(record[0].subscription, None);
    let listed = bus
        .history()
        .list(EventQuery {
            status: Some(EventStatus::Cancelled),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 2);
    let stats = durabus::StoreStats::collect(bus.store().as_ref())
        .await
        .unwrap();
    assert_eq!(stats.by_status.cancelled, 2);
    bus.shutdown().await.unwrap();
}

pub async fn what_cannot_be_cancelled_is_refused_and_nothing_changes(h: &Harness) {
    let bus = h.bus().await;
    count_calls(&bus, "c.*").await;
    bus.start().await.unwrap();
    let done = bus.publish("c.done", &1).await.unwrap();
    wait_status(&bus, done, EventStatus::Done).await;
    let e = bus.cancel(request(done, None)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    // Unknown: not found.
    let e = bus.cancel(request(EventId::new(), None)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // Bad input: a blank reason, an empty subscription.
    let waiting = bus
        .enqueue_event(
            NewEvent::new("c.wait", &1)
                .unwrap()
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let mut bad = request(waiting, None);
    bad.reason = "   ".into();
    assert_eq!(
        bus.cancel(bad).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let e = bus.cancel(request(waiting, Some(""))).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(get(&bus, waiting).await.status, EventStatus::Scheduled);
    assert!(bus.cancellations(waiting).await.unwrap().is_empty());
    // Cancelled once: a second cancel is a conflict.
    bus.cancel(request(waiting, None)).await.unwrap();
    let e = bus.cancel(request(waiting, None)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    assert_eq!(bus.cancellations(waiting).await.unwrap().len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn a_running_event_finishes_and_no_retry_follows(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    // A handler that waits for the gate, then fails.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let (c, g) = (calls.clone(), gate.clone());
    bus.subscribe(
        "c.*",
        move |_e: Event| {
            c.fetch_add(1, Ordering::SeqCst);
            let g = g.clone();
            async move {
                g.notified().await;
                Err("the payment service refused".into())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.enqueue("c.slow", &1).await.unwrap();
    eventually("the handler starts", || {
        let calls = calls.clone();
        async move { (calls.load(Ordering::SeqCst) == 1).then_some(()) }
    })
    .await;
    let c = bus.cancel(request(id, None)).await.unwrap();
    assert_eq!(c.outcome, CancelOutcome::Running);
    assert!(get(&bus, id).await.cancel_requested);
    // The attempt fails: no retry follows, the event ends cancelled.
    gate.notify_one();
    let e = wait_status(&bus, id, EventStatus::Cancelled).await;
    assert_eq!(e.retry_count, 1, "the failed attempt is on record");
    h.advance(Duration::from_secs(3600));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "never run again");
    assert_eq!(
        bus.cancellations(id).await.unwrap()[0].outcome,
        CancelOutcome::Running
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_cancel_during_an_attempt_survives_a_crash(h: &Harness) {
    // A worker took the event and died; the cancel came meanwhile: recovery ends it cancelled.
    let store = h.backend.open().await;
    let e = NewEvent::new("c.crash", &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Claimed, h.clock.now())
        .await
        .unwrap();
    let c = store
        .cancel_event(request(id, None), h.clock.now())
        .await
        .unwrap();
    assert_eq!(c.outcome, CancelOutcome::Running);
    store.close().await.unwrap();
    // The next process starts once the dead one's lease ran out (PostgreSQL).
    h.advance(Duration::from_secs(3600));
    let bus = h.bus().await;
    let calls = count_calls(&bus, "c.*").await;
    bus.start().await.unwrap();
    let e = wait_status(&bus, id, EventStatus::Cancelled).await;
    assert!(e.next_attempt_at.is_none());
    let other = bus.enqueue("c.other", &2).await.unwrap();
    wait_status(&bus, other, EventStatus::Done).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "only the other event ran");
    bus.shutdown().await.unwrap();
}

pub async fn an_event_cancelled_for_one_subscription_runs_the_others(h: &Harness) {
    let bus = h.bus().await;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    for name in ["audit", "mail"] {
        let s = seen.clone();
        bus.subscribe(
            "c.*",
            move |_e: Event| {
                s.lock().unwrap().push(name);
                async { Ok(()) }
            },
            SubscribeOptions::default().name(name),
        )
        .await
        .unwrap();
    }
    let id = bus.enqueue("c.order", &1).await.unwrap();
    let c = bus.cancel(request(id, Some("mail"))).await.unwrap();
    assert_eq!(c.outcome, CancelOutcome::Cancelled);
    assert_eq!(c.subscription.as_deref(), Some("mail"));
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending, "the event itself waits on");
    assert_eq!(e.cancelled, vec!["mail".to_owned()]);
    // Twice for one subscription: refused.
    let err = bus.cancel(request(id, Some("mail"))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    bus.start().await.unwrap();
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(*seen.lock().unwrap(), vec!["audit"]);
    assert_eq!(e.delivered, vec!["audit".to_owned()]);
    // A subscription that has handled the event: nothing to cancel.
    let err = bus.cancel(request(id, Some("audit"))).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    bus.shutdown().await.unwrap();
}

//! Pausing and resuming, on every store: a subscription's events parked and woken, another
//! process's pause, pauses that expire, the whole bus, a restart, the race a refresh mends,
//! and what is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use durabus::pause::{PauseEndKind, parked_at};
use durabus::{
    Actor, ActorKind, Clock, ErrorKind, Event, EventBus, EventId, EventStatus, InsertMode,
    NewEvent, Outcome, PauseRequest, PauseScope, ResumeRequest, ResumeTarget, SubscribeOptions,
    Timestamp,
};

use crate::support::*;

const REFRESH: Duration = Duration::from_millis(10);

fn ops() -> Actor {
    Actor::new("ops", ActorKind::Library)
}

fn pause_of(scope: PauseScope, until: Option<Timestamp>) -> PauseRequest {
    PauseRequest {
        scope,
        until,
        actor: ops(),
        reason: "the mail provider is down".into(),
    }
}

fn resume_of(target: ResumeTarget) -> ResumeRequest {
    ResumeRequest {
        target,
        actor: Actor::new("ada", ActorKind::Library),
        reason: Some("it is back".into()),
    }
}

async fn bus(h: &Harness) -> EventBus {
    h.builder()
        .await
        .pause_refresh(REFRESH)
        .build()
        .await
        .unwrap()
}

/// Subscribes a counting handler named `name` to `pattern`.
async fn named(bus: &EventBus, name: &str, pattern: &str) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    bus.subscribe(
        pattern,
        move |_e: Event| {
            c.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        },
        SubscribeOptions::default().name(name),
    )
    .await
    .unwrap();
    count
}

async fn wait_count(count: &AtomicUsize, n: usize) {
    eventually(&format!("{n} calls"), || async {
        (count.load(Ordering::SeqCst) >= n).then_some(())
    })
    .await;
    assert_eq!(count.load(Ordering::SeqCst), n);
}

async fn wait_parked(bus: &EventBus, id: EventId, pause: i64) {
    eventually(&format!("event {id} parked by pause {pause}"), || async {
        let e = get(bus, id).await;
        (e.status == EventStatus::Pending && e.next_attempt_at == Some(parked_at(pause)))
            .then_some(())
    })
    .await;
}

pub async fn a_paused_subscription_parks_its_events_and_a_resume_delivers_them(h: &Harness) {
    let bus = bus(h).await;
    let mail = named(&bus, "mail", "p.*").await;
    let audit = named(&bus, "audit", "p.*").await;
    bus.start().await.unwrap();
    let pause = bus
        .pause(pause_of(PauseScope::Subscription("mail".into()), None))
        .await
        .unwrap();
    assert_eq!(
        (pause.actor.name.as_str(), pause.ended.as_ref()),
        ("ops", None)
    );
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(bus.enqueue("p.sent", &i).await.unwrap());
    }
    ids.push(bus.publish("p.sent", &3).await.unwrap());
    // The other subscription runs; the paused one's handler does not.
    wait_count(&audit, 4).await;
    for id in &ids {
        wait_parked(&bus, *id, pause.id).await;
        let e = get(&bus, *id).await;
        assert_eq!(e.retry_count, 0, "a parked event has no failed attempt");
        assert_eq!(e.delivered, vec!["audit".to_owned()]);
    }
    assert_eq!(mail.load(Ordering::SeqCst), 0);
    // The backlog is visible: the pause counts what it parks, the events are pending.
    let listed = bus.pauses().list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].id, listed[0].parked), (pause.id, 4));
    let stats = durabus::StoreStats::collect(bus.store().as_ref())
        .await
        .unwrap();
    assert_eq!(stats.by_status.pending, 4);
    // And in the metrics: how long the pause has held and what it parks.
    h.advance(Duration::from_secs(30));
    let m = super::telemetry::scrape(&bus).await;
    let labels = [("scope", "subscription"), ("target", "mail")];
    let num = super::telemetry::num;
    assert_eq!(num(&m, "durabus_pause_parked_events", &labels), 4.0);
    assert_eq!(num(&m, "durabus_pause_seconds", &labels), 30.0);

    // A restart keeps the pause and the parked events.
    bus.shutdown().await.unwrap();
    let bus = self::bus(h).await;
    let mail = named(&bus, "mail", "p.*").await;
    let audit = named(&bus, "audit", "p.*").await;
    bus.start().await.unwrap();
    assert_eq!(bus.pauses().list(None, 10).await.unwrap()[0].parked, 4);

    let ended = bus
        .resume(resume_of(ResumeTarget::Scope(PauseScope::Subscription(
            "mail".into(),
        ))))
        .await
        .unwrap();
    assert_eq!(ended.len(), 1);
    let end = ended[0].ended.clone().unwrap();
    assert_eq!(end.kind, PauseEndKind::Resumed);
    assert_eq!(
        (end.actor.name.as_str(), end.reason.as_deref()),
        ("ada", Some("it is back"))
    );
    assert_eq!(ended[0].parked, 0);
    for id in &ids {
        wait_status(&bus, *id, EventStatus::Done).await;
    }
    assert_eq!(mail.load(Ordering::SeqCst), 4, "each parked event ran once");
    assert_eq!(
        audit.load(Ordering::SeqCst),
        0,
        "the other handler did not run again"
    );
    // On record: no active pause; the ended one is listed with its end.
    assert!(bus.pauses().list(None, 10).await.unwrap().is_empty());
    let m = super::telemetry::scrape(&bus).await;
    assert_eq!(
        super::telemetry::value(&m, "durabus_pause_seconds", &[]),
        None
    );
    let history = bus.pauses().list(Some(Timestamp(0)), 10).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].reason, "the mail provider is down");
    bus.shutdown().await.unwrap();
}

pub async fn a_pause_made_by_another_process_holds_within_a_refresh(h: &Harness) {
    let worker = bus(h).await;
    let mail = named(&worker, "mail", "q.*").await;
    worker.start().await.unwrap();
    let first = worker.publish("q.sent", &0).await.unwrap();
    wait_status(&worker, first, EventStatus::Done).await;
    // An operator's process on the same database, delivering nothing.
    let operator = h
        .builder()
        .await
        .deliver(false)
        .pause_refresh(REFRESH)
        .build()
        .await
        .unwrap();
    let pause = operator
        .pause(pause_of(PauseScope::Matching("ma*".into()), None))
        .await
        .unwrap();
    eventually("the worker to see the pause", || async {
        (!worker.pauses_in_force().is_empty()).then_some(())
    })
    .await;
    let held = worker.enqueue("q.sent", &1).await.unwrap();
    wait_parked(&worker, held, pause.id).await;
    assert_eq!(mail.load(Ordering::SeqCst), 1);
    operator
        .resume(resume_of(ResumeTarget::Id(pause.id)))
        .await
        .unwrap();
    wait_status(&worker, held, EventStatus::Done).await;
    assert_eq!(mail.load(Ordering::SeqCst), 2);
    operator.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
}

pub async fn a_pause_until_a_time_ends_by_itself(h: &Harness) {
    let bus = bus(h).await;
    let mail = named(&bus, "mail", "u.*").await;
    bus.start().await.unwrap();
    let until = h.clock.now().plus(Duration::from_secs(60));
    let pause = bus
        .pause(pause_of(
            PauseScope::Subscription("mail".into()),
            Some(until),
        ))
        .await
        .unwrap();
    let id = bus.enqueue("u.sent", &1).await.unwrap();
    wait_parked(&bus, id, pause.id).await;
    h.advance(Duration::from_secs(61));
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(mail.load(Ordering::SeqCst), 1);
    let history = bus.pauses().list(Some(Timestamp(0)), 10).await.unwrap();
    let end = history[0].ended.clone().unwrap();
    assert_eq!((end.kind, end.at), (PauseEndKind::Expired, until));
    assert_eq!(end.actor.kind, ActorKind::Auto);
    bus.shutdown().await.unwrap();
}

pub async fn pausing_the_whole_bus_stops_claims_and_publish_returns_at_once(h: &Harness) {
    let bus = bus(h).await;
    let calls = named(&bus, "mail", "b.*").await;
    bus.start().await.unwrap();
    let pause = bus.pause(pause_of(PauseScope::Bus, None)).await.unwrap();
    // A claim that was already running when the pause came may still take (and park) what
    // it finds; a poll interval later none is running.
    tokio::time::sleep(Duration::from_millis(30)).await;
    // publish stores and returns: there is no delivery to wait for.
    let id = bus.publish("b.sent", &1).await.unwrap();
    let queued = bus.enqueue("b.sent", &2).await.unwrap();
    // A few poll intervals: nothing is claimed.
    tokio::time::sleep(Duration::from_millis(60)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    for e in [id, queued] {
        let e = get(&bus, e).await;
        assert_eq!(e.status, EventStatus::Pending);
        assert_ne!(
            e.next_attempt_at,
            Some(parked_at(pause.id)),
            "never claimed"
        );
    }
    assert_eq!(bus.poll().await.unwrap().map(|e| e.id), None);
    bus.resume(resume_of(ResumeTarget::Scope(PauseScope::Bus)))
        .await
        .unwrap();
    wait_status(&bus, id, EventStatus::Done).await;
    wait_status(&bus, queued, EventStatus::Done).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    bus.shutdown().await.unwrap();
}

pub async fn the_next_event_of_a_key_whose_head_finishes_during_a_bus_pause_waits_pending(
    h: &Harness,
) {
    let bus = bus(h).await;
    let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = Arc::new(tokio::sync::Notify::new());
    let (c, g) = (calls.clone(), gate.clone());
    bus.subscribe(
        "k.*",
        move |e: Event| {
            let (c, g) = (c.clone(), g.clone());
            async move {
                let n: i64 = e.payload()?;
                c.lock().unwrap().push(n);
                if n == 0 {
                    g.notified().await;
                }
                Ok(())
            }
        },
        SubscribeOptions::default().name("steps"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let events: Vec<NewEvent> = (0..2i64)
        .map(|n| NewEvent::new("k.step", &n).unwrap().ordering_key("k"))
        .collect();
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    bus.enqueue_batch(events).await.unwrap();
    eventually("the head runs", || async {
        (!calls.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    bus.pause(pause_of(PauseScope::Bus, None)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    // The head finishes while the bus is paused: the next event of its key is not left
    // running with nobody to run it (SQLite's completion claims it for the next claim, and
    // the paused worker gives it back); it waits, pending, for the resume.
    gate.notify_one();
    wait_status(&bus, ids[0], EventStatus::Done).await;
    wait_status(&bus, ids[1], EventStatus::Pending).await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(*calls.lock().unwrap(), vec![0]);
    let waiting = get(&bus, ids[1]).await;
    assert_eq!(
        (waiting.status, waiting.retry_count),
        (EventStatus::Pending, 0)
    );
    bus.resume(resume_of(ResumeTarget::Scope(PauseScope::Bus)))
        .await
        .unwrap();
    wait_status(&bus, ids[1], EventStatus::Done).await;
    assert_eq!(*calls.lock().unwrap(), vec![0, 1]);
    bus.shutdown().await.unwrap();
}

pub async fn an_event_parked_as_its_pause_ended_is_woken_by_a_refresh(h: &Harness) {
    let bus = bus(h).await;
    let mail = named(&bus, "mail", "r.*").await;
    // A pause that has ended, and an event an attempt parked for it afterwards (it read the
    // pause before the end): written through the store as the dispatcher writes it.
    let pause = bus
        .pause(pause_of(PauseScope::Subscription("mail".into()), None))
        .await
        .unwrap();
    bus.resume(resume_of(ResumeTarget::Id(pause.id)))
        .await
        .unwrap();
    let store = bus.store();
    let now = h.clock.now();
    let event = NewEvent::new("r.sent", &1).unwrap();
    let id = event.id;
    store
        .insert(vec![event], InsertMode::Claimed, now)
        .await
        .unwrap();
    let parked = Outcome::Retry {
        id,
        retry_count: 0,
        errors: Vec::new(),
        delivered: Vec::new(),
        next_attempt_at: parked_at(pause.id),
    };
    assert!(store.record(parked, now).await.unwrap());
    bus.start().await.unwrap();
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(mail.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

pub async fn bad_pauses_and_resumes_are_refused_and_nothing_changes(h: &Harness) {
    let bus = bus(h).await;
    named(&bus, "mail", "x.*").await;
    let now = h.clock.now();
    let refused = |r: durabus::Result<durabus::Pause>| r.unwrap_err().kind();
    let mut blank = pause_of(PauseScope::Subscription("mail".into()), None);
    blank.reason = "  ".into();
    assert_eq!(refused(bus.pause(blank).await), ErrorKind::InvalidInput);
    let past = pause_of(PauseScope::Subscription("mail".into()), Some(now));
    assert_eq!(refused(bus.pause(past).await), ErrorKind::InvalidInput);
    let empty = pause_of(PauseScope::Matching(String::new()), None);
    assert_eq!(refused(bus.pause(empty).await), ErrorKind::InvalidInput);
    let unknown = pause_of(PauseScope::Subscription("nobody".into()), None);
    assert_eq!(refused(bus.pause(unknown).await), ErrorKind::NotFound);
    assert!(
        bus.pauses()
            .list(Some(Timestamp(0)), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let e = bus
        .resume(resume_of(ResumeTarget::Id(12345)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = bus
        .resume(resume_of(ResumeTarget::Scope(PauseScope::Bus)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let p = bus
        .pause(pause_of(PauseScope::Subscription("mail".into()), None))
        .await
        .unwrap();
    bus.resume(resume_of(ResumeTarget::Id(p.id))).await.unwrap();
    let e = bus
        .resume(resume_of(ResumeTarget::Id(p.id)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict, "{e}");
    let mut long = resume_of(ResumeTarget::Id(p.id));
    long.reason = Some("x".repeat(durabus::pause::REASON_MAX_CHARS + 1));
    assert_eq!(
        bus.resume(long).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let history = bus.pauses().list(Some(Timestamp(0)), 10).await.unwrap();
    assert_eq!(history.len(), 1, "only the one pause is on record");
    bus.shutdown().await.unwrap();
}

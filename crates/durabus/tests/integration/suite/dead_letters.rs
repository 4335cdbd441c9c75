//! Dead-letter records: written with the death, announced, grouped, acted on, retried on the
//! auto-retry schedule (an injected clock drives it), listed with filters and keyset pages.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durabus::{
    Action, Actor, ActorKind, DeadLetter, DeadLetterFilter, DeadLetterStatus, ErrorKind, Event,
    EventBus, EventId, EventQuery, EventStatus, Keyset, RetryOverride, SubscribeOptions, Timestamp,
};

use crate::support::*;

const HOUR: Duration = Duration::from_secs(3600);

/// An error with a source, as handlers' errors often are.
#[derive(Debug)]
struct Refused {
    order: u64,
    source: std::io::Error,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "card for order {} refused", self.order)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

pub fn ann() -> Actor {
    Actor::new("ann", ActorKind::Library)
}

/// A bus whose `pay.*` handler (named `payments`, no retries) fails while `healthy` is false.
pub async fn paying_bus(h: &Harness, healthy: Arc<AtomicBool>) -> EventBus {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "pay.*",
        move |e: Event| {
            let healthy = healthy.clone();
            async move {
                if healthy.load(Ordering::SeqCst) {
                    return Ok(());
                }
                let order = e.payload::<u64>().unwrap_or(0);
                Err(Refused {
                    order,
                    source: std::io::Error::other("issuer said no"),
                }
                .into())
            }
        },
        SubscribeOptions::default()
            .name("payments")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    bus
}

/// Waits until the record of `id` satisfies `ok` (at most 10 s of real time).
pub async fn wait_record(
    bus: &EventBus,
    id: EventId,
    what: &str,
    ok: impl Fn(&DeadLetter) -> bool,
) -> DeadLetter {
    let store = bus.store();
    let start = std::time::Instant::now();
    loop {
        if let Some(d) = store.dlq_get(id).await.unwrap()
            && ok(&d)
        {
            return d;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The auto-retry job as the bus's scheduler lists it.
pub async fn auto_retry_job(bus: &EventBus) -> durabus::scheduler::JobInfo {
    bus.scheduler()
        .unwrap()
        .jobs()
        .await
        .unwrap()
        .into_iter()
        .find(|j| j.name == "dead-letter-auto-retry")
        .unwrap()
}

/// Waits until the auto-retry job has recorded the end of its run for `tick` or a later one
/// (at most 10 s of real time). Its dead letters show the run's work before the run ends; a
/// clock moved before then is time that passed while the job ran, whose ticks are skipped.
pub async fn wait_auto_retry_ended(bus: &EventBus, tick: Timestamp) {
    let start = std::time::Instant::now();
    loop {
        if let Some(row) = auto_retry_job(bus).await.last
            && row.last_tick >= Some(tick)
            && row.running_by.is_none()
        {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for the auto-retry run of {tick:?} to end"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Every `system.dead_letter` event stored, whatever its status.
pub async fn announcements(bus: &EventBus) -> Vec<Event> {
    bus.history()
        .list(EventQuery {
            event_type: Some("system.dead_letter".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
}

pub async fn a_dead_letter_gets_a_record_and_is_announced(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "system.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.payload);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let created = h.clock.now();
    let id = bus.publish("pay.charge", &42u64).await.unwrap();
    let d = bus.dead_letters().get(id).await.unwrap();
    assert_eq!(d.event_id, id);
    assert_eq!(d.event_type, "pay.charge");
    assert_eq!(d.payload, "42");
    assert_eq!(d.status, DeadLetterStatus::Pending);
    assert_eq!(d.subscription.as_deref(), Some("payments"));
    assert_eq!(d.last_error, "card for order 42 refused");
    assert_eq!(d.causes, vec!["issuer said no".to_owned()]);
    assert_eq!(d.attempts, 1);
    assert_eq!(d.error_history.len(), 1);
    assert_eq!(
        d.error_history[0].errors,
        vec!["attempt 1 [payments]: card for order 42 refused".to_owned()]
    );
    assert_eq!(d.error_history[0].causes, vec!["issuer said no".to_owned()]);
    assert_eq!(d.created_at, created);
    assert_eq!(d.next_auto_retry_at, Some(created.plus(HOUR)));
    assert_eq!((d.auto_retry_count, d.manual_retry_count), (0, 0));
    assert_eq!(d.fingerprint.len(), 16);
    assert!(d.seq > 0);
    // Announced in the same transaction, and delivered like any event.
    let announced = announcements(&bus).await;
    assert_eq!(announced.len(), 1);
    let payload = announced[0].payload_value();
    assert_eq!(payload["event_id"], id.to_string());
    assert_eq!(payload["type"], "pay.charge");
    assert_eq!(payload["error"], "card for order 42 refused");
    assert_eq!(payload["attempts"], 1);
    assert_eq!(payload["fingerprint"], d.fingerprint.as_str());
    eventually("the announcement delivered", || {
        let n = seen.len();
        async move { (n == 1).then_some(()) }
    })
    .await;
    // The inspector of the spec sees the dead event as before.
    assert_eq!(bus.dlq().get(id).await.unwrap().status, EventStatus::Dlq);
    bus.shutdown().await.unwrap();
}

/// Retried dead letters delivered while fresh events are delivered too (their outcomes are
/// written together): every record is resolved and every event is done.
pub async fn retried_dead_letters_among_fresh_events_resolve_their_records(h: &Harness) {
    let healthy = Arc::new(AtomicBool::new(false));
    let bus = paying_bus(h, healthy.clone()).await;
    bus.start().await.unwrap();
    let mut dead = Vec::new();
    for order in 0..5u64 {
        let id = bus.publish("pay.charge", &order).await.unwrap();
        wait_record(&bus, id, "the dead letter", |d| {
            d.status == DeadLetterStatus::Pending
        })
        .await;
        dead.push(id);
    }
    healthy.store(true, Ordering::SeqCst);
    let fresh: Vec<durabus::NewEvent> = (100..400u64)
        .map(|order| durabus::NewEvent::new("pay.charge", &order).unwrap())
        .collect();
    let fresh_ids: Vec<EventId> = fresh.iter().map(|e| e.id).collect();
    bus.enqueue_batch(fresh).await.unwrap();
    for id in &dead {
        bus.dead_letters()
            .retry(*id, &ann())
            .await
            .unwrap()
            .unwrap();
    }
    for id in &dead {
        let d = wait_record(&bus, *id, "resolved by the retry", |d| {
            d.status == DeadLetterStatus::Resolved
        })
        .await;
        assert_eq!(d.resolved_by.as_deref(), Some("ann"));
    }
    for id in dead.iter().chain(&fresh_ids) {
        eventually("every event done", || {
            let bus = &bus;
            async move { (get(bus, *id).await.status == EventStatus::Done).then_some(()) }
        })
        .await;
    }
    bus.shutdown().await.unwrap();
}

pub async fn the_auto_retry_schedule_runs_1h_6h_24h_then_manual(h: &Harness) {
    let healthy = Arc::new(AtomicBool::new(false));
    let bus = paying_bus(h, healthy.clone()).await;
    bus.start().await.unwrap();
    let id = bus.publish("pay.charge", &7u64).await.unwrap();
    let first = bus.dead_letters().get(id).await.unwrap();
    let fingerprint = first.fingerprint.clone();
    // Just before each retry is due nothing happens; a tick after it, the retry runs, fails
    // (still unhealthy), and the record is pending again with a new round.
    let mut due = first.next_auto_retry_at.unwrap();
    for (n, wait) in [(1u32, 6 * HOUR), (2, 24 * HOUR)] {
        let before = due.minus(Duration::from_secs(60));
        h.clock.set(before);
        // The job runs for the quarter hour before (and finds nothing due).
        let quarter = 15 * 60 * 1000;
        wait_auto_retry_ended(&bus, Timestamp(before.as_millis() / quarter * quarter)).await;
        assert_eq!(
            bus.dead_letters().get(id).await.unwrap().auto_retry_count,
            n - 1,
            "not before it is due"
        );
        h.clock.set(due.plus(Duration::from_secs(15 * 60)));
        let d = wait_record(&bus, id, "an auto retry round", |d| {
            d.auto_retry_count == n && d.status == DeadLetterStatus::Pending
        })
        .await;
        assert_eq!(d.error_history.len() as u32, n + 1, "every round kept");
        assert_eq!(d.error_history[0], first.error_history[0]);
        assert_eq!(
            d.error_history[n as usize].retried_by.as_deref(),
            Some("auto-retry")
        );
        let retried = d.last_retry_at.unwrap();
        assert!(retried >= due, "retried at a tick after it was due");
        wait_auto_retry_ended(&bus, retried).await;
        assert_eq!(d.next_auto_retry_at, Some(retried.plus(wait)));
        assert_eq!(d.fingerprint, fingerprint);
        due = d.next_auto_retry_at.unwrap();
    }
    h.clock.set(due.plus(Duration::from_secs(15 * 60)));
    let d = wait_record(&bus, id, "the third auto retry", |d| {
        d.auto_retry_count == 3 && d.status == DeadLetterStatus::Pending
    })
    .await;
    assert_eq!(d.next_auto_retry_at, None, "manual only from here");
    // Announced once, when the record was created: the failed rounds announce nothing more.
    let announced = announcements(&bus).await;
    assert_eq!(announced.len(), 1, "{announced:?}");
    assert_eq!(announced[0].payload_value()["event_id"], id.to_string());
    wait_auto_retry_ended(&bus, d.last_retry_at.unwrap()).await;
    // Days later, still nothing.
    h.advance(Duration::from_secs(3 * 86_400));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let d = bus.dead_letters().get(id).await.unwrap();
    assert_eq!(
        (d.auto_retry_count, d.status),
        (3, DeadLetterStatus::Pending)
    );
    // A manual retry delivers it once the handler is healthy: resolved by its actor.
    healthy.store(true, Ordering::SeqCst);
    let after = bus.dead_letters().retry(id, &ann()).await.unwrap().unwrap();
    assert_eq!(after.status, DeadLetterStatus::Retrying);
    assert_eq!(after.manual_retry_count, 1);
    let d = wait_record(&bus, id, "resolved by the retry", |d| {
        d.status == DeadLetterStatus::Resolved
    })
    .await;
    assert_eq!(d.resolved_by.as_deref(), Some("ann"));
    assert_eq!(d.error_history.len(), 4, "the history stays");
    assert_eq!(get(&bus, id).await.status, EventStatus::Done);
    assert!(auto_retry_job(&bus).await.last.unwrap().runs >= 3);
    bus.shutdown().await.unwrap();
}

pub async fn actions_follow_the_rules_and_say_why(h: &Harness) {
    let healthy = Arc::new(AtomicBool::new(false));
    let bus = paying_bus(h, healthy.clone()).await;
    let dl = bus.dead_letters();
    let missing = dl.retry(EventId::new(), &ann()).await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound);
    let id = bus.publish("pay.charge", &1u64).await.unwrap();
    let no_note = dl.resolve(id, " ", &ann()).await.unwrap_err();
    assert_eq!(no_note.kind(), ErrorKind::InvalidInput);
    let nobody = dl
        .retry(id, &Actor::new("", ActorKind::Library))
        .await
        .unwrap_err();
    assert_eq!(nobody.kind(), ErrorKind::InvalidInput);
    assert_eq!(dl.get(id).await.unwrap().status, DeadLetterStatus::Pending);
    // Retry: the event goes back with a fresh budget; while it is out, nothing else.
    let d = dl.retry(id, &ann()).await.unwrap().unwrap();
    assert_eq!(d.status, DeadLetterStatus::Retrying);
    assert_eq!(d.last_retry_by.as_deref(), Some("ann"));
    let e = get(&bus, id).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Pending, 0));
    assert!(e.errors.is_empty());
    for action in [
        Action::Retry,
        Action::Resolve { note: "x".into() },
        Action::Abandon { note: None },
        Action::Purge,
    ] {
        let err = dl.act(id, action.clone(), &ann()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{action:?}");
        assert!(err.to_string().contains("retrying"), "{err}");
    }
    // It fails again (no worker: deliver by hand through poll/finalize; the announcement of
    // its first death is due too, and is handled).
    while let Some(e) = bus.poll().await.unwrap() {
        bus.finalize(e.id, e.id != id).await.unwrap();
    }
    let d = dl.get(id).await.unwrap();
    assert_eq!(d.status, DeadLetterStatus::Pending);
    assert_eq!(d.error_history.len(), 2);
    // Abandon, then resolve; then nothing more.
    let d = dl
        .abandon(id, Some("customer left"), &ann())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.status, DeadLetterStatus::Abandoned);
    assert_eq!(d.next_auto_retry_at, None);
    let again = dl.abandon(id, None, &ann()).await.unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Conflict);
    let d = dl
        .resolve(id, "refunded by hand", &ann())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(d.status, DeadLetterStatus::Resolved);
    assert_eq!(d.resolution_note.as_deref(), Some("refunded by hand"));
    assert_eq!(d.resolved_by.as_deref(), Some("ann"));
    let twice = dl.resolve(id, "again", &ann()).await.unwrap_err();
    assert_eq!(twice.kind(), ErrorKind::Conflict);
    assert!(matches!(twice, durabus::Error::Conflict { ref status, .. } if status == "resolved"));
    // Purge removes the record and its dead event.
    assert!(dl.act(id, Action::Purge, &ann()).await.unwrap().is_none());
    assert_eq!(dl.get(id).await.unwrap_err().kind(), ErrorKind::NotFound);
    assert!(bus.store().get_event(id).await.unwrap().is_none());
    assert!(dl.groups(10).await.unwrap().is_empty());
    bus.shutdown().await.unwrap();
}

pub async fn a_failing_system_handler_makes_no_cascade(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    bus.subscribe(
        "system.*",
        |_e: Event| async { Err("the pager is down".into()) },
        SubscribeOptions::default()
            .name("alerts")
            .retry(RetryOverride::default().max_retries(1)),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.publish("pay.charge", &3u64).await.unwrap();
    // The announcement fails its first attempt, then its retry (~1 s later), and becomes a
    // dead letter.
    let store = bus.store();
    eventually("the announcement's first failure", || {
        let store = store.clone();
        async move {
            let events = store
                .list_events(EventQuery {
                    event_type: Some("system.dead_letter".into()),
                    ..EventQuery::default()
                })
                .await
                .ok()?;
            events
                .first()
                .filter(|e| e.retry_count == 1 && e.status == EventStatus::Pending)
                .map(|_| ())
        }
    })
    .await;
    h.advance(Duration::from_secs(5));
    let dead = eventually("the announcement's own dead letter", || {
        let dl = bus.dead_letters();
        async move {
            let page = dl
                .list(DeadLetterFilter::default(), Keyset::default())
                .await
                .ok()?;
            (page.items.len() == 2).then_some(page.items)
        }
    })
    .await;
    let sys = dead
        .iter()
        .find(|d| d.event_type == "system.dead_letter")
        .expect("the failing announcement is a dead letter");
    assert_eq!(sys.subscription.as_deref(), Some("alerts"));
    assert!(dead.iter().any(|d| d.event_id == id));
    // And it announces nothing: still one system.dead_letter event, after more time too.
    h.advance(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(announcements(&bus).await.len(), 1, "no cascade");
    bus.shutdown().await.unwrap();
}

pub async fn failure_groups_gather_the_same_failure(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    bus.subscribe(
        "ship.*",
        |e: Event| async move {
            let order = e.payload::<u64>().unwrap_or(0);
            Err(format!("card for order {order} refused").into())
        },
        SubscribeOptions::default()
            .name("shipping")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let mut paid = Vec::new();
    for order in [10u64, 2_000, 345_678] {
        paid.push(bus.publish("pay.charge", &order).await.unwrap());
        h.advance(Duration::from_millis(5));
    }
    let shipped = bus.publish("ship.parcel", &10u64).await.unwrap();
    let dl = bus.dead_letters();
    let groups = dl.groups(10).await.unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    let pay = &groups[0];
    assert_eq!((pay.count, pay.open), (3, 3), "largest first");
    assert_eq!(pay.subscription.as_deref(), Some("payments"));
    assert_eq!(pay.signature, "card for order <n> refused");
    assert_eq!(pay.event_types, vec!["pay.charge".to_owned()]);
    assert!(pay.first_seen < pay.last_seen);
    let ship = &groups[1];
    assert_eq!(ship.count, 1);
    assert_ne!(
        ship.fingerprint, pay.fingerprint,
        "another subscription, another group"
    );
    // Filter by group.
    let in_group = dl
        .list(
            DeadLetterFilter {
                group: Some(pay.fingerprint.clone()),
                ..DeadLetterFilter::default()
            },
            Keyset::default(),
        )
        .await
        .unwrap();
    assert_eq!(in_group.items.len(), 3);
    assert!(in_group.items.iter().all(|d| d.event_id != shipped));
    // Closing one: still three in the group, two open.
    dl.resolve(paid[0], "done by hand", &ann()).await.unwrap();
    let pay = dl
        .groups(10)
        .await
        .unwrap()
        .into_iter()
        .find(|g| g.fingerprint == pay.fingerprint)
        .unwrap();
    assert_eq!((pay.count, pay.open), (3, 2));
    bus.shutdown().await.unwrap();
}

pub async fn listings_filter_and_page_by_keyset(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let start = h.clock.now();
    let mut ids = Vec::new();
    for (i, t) in ["pay.a", "pay.b", "pay.a", "pay.ab", "pay.a"]
        .iter()
        .enumerate()
    {
        ids.push(bus.publish(t, &(i as u64)).await.unwrap());
        h.advance(Duration::from_secs(1));
    }
    let dl = bus.dead_letters();
    let list = |filter: DeadLetterFilter, limit: u32, before: Option<i64>| {
        let dl = dl.clone();
        async move { dl.list(filter, Keyset { before, limit }).await.unwrap() }
    };
    let by_type = |t: &str| DeadLetterFilter {
        event_type: Some(t.into()),
        ..DeadLetterFilter::default()
    };
    let exact = list(by_type("pay.a"), 50, None).await;
    let got: Vec<EventId> = exact.items.iter().map(|d| d.event_id).collect();
    assert_eq!(
        got,
        vec![ids[4], ids[2], ids[0]],
        "newest first, exact type"
    );
    // Summaries: the same page, the same fields, without payloads and error histories.
    let summaries = dl
        .list_summaries(
            by_type("pay.a"),
            Keyset {
                before: None,
                limit: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(summaries.items.len(), 2);
    assert_eq!(summaries.next, Some(exact.items[1].seq));
    for (s, d) in summaries.items.iter().zip(&exact.items) {
        assert_eq!(
            (
                s.event_id,
                s.seq,
                &s.event_type,
                &s.last_error,
                &s.fingerprint
            ),
            (
                d.event_id,
                d.seq,
                &d.event_type,
                &d.last_error,
                &d.fingerprint
            )
        );
        assert_eq!(
            (s.status, s.attempts, s.created_at),
            (d.status, d.attempts, d.created_at)
        );
        assert_eq!(s.rounds as usize, d.error_history.len());
        assert_eq!(s.subscription, d.subscription);
    }
    let rest = dl
        .list_summaries(
            by_type("pay.a"),
            Keyset {
                before: summaries.next,
                limit: 2,
            },
        )
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].event_id, ids[0]);
    assert_eq!(rest.next, None);
    assert!(
        dl.list_summaries(
            by_type("pay.a"),
            Keyset {
                before: None,
                limit: 5000
            }
        )
        .await
        .is_err(),
        "the page size is checked"
    );
    assert_eq!(
        list(by_type("pay.a*"), 50, None).await.items.len(),
        4,
        "glob"
    );
    assert_eq!(list(by_type("*.b"), 50, None).await.items.len(), 1);
    assert_eq!(
        list(by_type("pay_a"), 50, None).await.items.len(),
        0,
        "_ is literal"
    );
    // Keyset pages of two: 2 + 2 + 1, and no more.
    let p1 = list(DeadLetterFilter::default(), 2, None).await;
    assert_eq!(p1.items.len(), 2);
    let p2 = list(DeadLetterFilter::default(), 2, p1.next).await;
    let p3 = list(DeadLetterFilter::default(), 2, p2.next).await;
    assert_eq!(p3.items.len(), 1);
    assert_eq!(p3.next, None);
    let all: Vec<EventId> = [p1.items, p2.items, p3.items]
        .concat()
        .iter()
        .map(|d| d.event_id)
        .collect();
    let mut want = ids.clone();
    want.reverse();
    assert_eq!(all, want);
    // Status and time range.
    bus.dead_letters()
        .abandon(ids[1], None, &ann())
        .await
        .unwrap();
    let abandoned = list(
        DeadLetterFilter {
            status: vec![DeadLetterStatus::Abandoned],
            ..DeadLetterFilter::default()
        },
        50,
        None,
    )
    .await;
    assert_eq!(abandoned.items.len(), 1);
    assert_eq!(abandoned.items[0].event_id, ids[1]);
    let window = list(
        DeadLetterFilter {
            created_from: Some(start.plus(Duration::from_secs(1))),
            created_before: Some(start.plus(Duration::from_secs(3))),
            ..DeadLetterFilter::default()
        },
        50,
        None,
    )
    .await;
    let got: Vec<EventId> = window.items.iter().map(|d| d.event_id).collect();
    assert_eq!(got, vec![ids[2], ids[1]]);
    // Bad input is refused.
    assert_eq!(
        dl.list(by_type("pay a"), Keyset::default())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        dl.list(
            DeadLetterFilter::default(),
            Keyset {
                before: None,
                limit: 5000
            }
        )
        .await
        .unwrap_err()
        .kind(),
        ErrorKind::InvalidInput
    );
    bus.shutdown().await.unwrap();
}

pub async fn retention_deletes_closed_dead_letters_after_30_days(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    let resolved = bus.publish("pay.a", &1u64).await.unwrap();
    let abandoned = bus.publish("pay.a", &2u64).await.unwrap();
    let open = bus.publish("pay.a", &3u64).await.unwrap();
    let later = bus.publish("pay.a", &4u64).await.unwrap();
    dl.resolve(resolved, "fixed", &ann()).await.unwrap();
    dl.abandon(abandoned, None, &ann()).await.unwrap();
    let closed_at = h.clock.now();
    h.advance(Duration::from_millis(1));
    dl.resolve(later, "fixed later", &ann()).await.unwrap();
    // Exactly 30 days after the first two were closed: they go, the one closed 1 ms later
    // and the open one stay.
    h.clock
        .set(closed_at.plus(Duration::from_secs(30 * 86_400)));
    let report = bus
        .scheduler()
        .unwrap()
        .run_now("cleanup-dead-letters")
        .await
        .unwrap();
    assert_eq!(report.status, "ok");
    assert!(report.message.starts_with("2 "), "{}", report.message);
    for gone in [resolved, abandoned] {
        assert_eq!(dl.get(gone).await.unwrap_err().kind(), ErrorKind::NotFound);
        assert!(bus.store().get_event(gone).await.unwrap().is_none());
    }
    for kept in [open, later] {
        assert!(dl.get(kept).await.is_ok());
    }
    let group = &dl.groups(10).await.unwrap()[0];
    assert_eq!((group.count, group.open), (2, 1));
    bus.shutdown().await.unwrap();
}

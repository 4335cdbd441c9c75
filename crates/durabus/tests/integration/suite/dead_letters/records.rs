//! A dead letter's record: written and announced, resolved by a delivered retry, the auto-retry schedule, the actions' rules, no cascade.

use super::*;

pub async fn a_dead_letter_gets_a_record_and_is_announced(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "system.dead_letter",
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
    // While it is retrying, neither a second retry nor a purge (resolve and abandon would call
    // off this retry, which no worker has picked up: see
    // a_retry_no_worker_has_picked_up_can_be_resolved_or_abandoned).
    for action in [Action::Retry, Action::Purge] {
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
            (page.items.len() == 3).then_some(page.items)
        }
    })
    .await;
    let sys = dead
        .iter()
        .find(|d| d.event_type == "system.dead_letter")
        .expect("the failing announcement is a dead letter");
    assert_eq!(sys.subscription.as_deref(), Some("alerts"));
    assert!(dead.iter().any(|d| d.event_id == id));
    assert!(
        dead.iter()
            .any(|d| d.event_type == "system.failure_group.new"),
        "the new group's announcement failed too"
    );
    // And they announce nothing: still one system.dead_letter event and one new group (the
    // application's), after more time too, though the pager's failure is a new group.
    h.advance(Duration::from_secs(60));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(announcements(&bus).await.len(), 1, "no cascade");
    let groups = bus
        .store()
        .list_events(EventQuery {
            event_type: Some("system.failure_group.new".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(groups.len(), 1, "no cascade: {groups:?}");
    bus.shutdown().await.unwrap();
}

pub async fn a_retry_no_worker_has_picked_up_can_be_resolved_or_abandoned(h: &Harness) {
    let healthy = Arc::new(AtomicBool::new(false));
    let bus = paying_bus(h, healthy.clone()).await;
    let dl = bus.dead_letters();
    let (a, b, c) = (
        bus.publish("pay.charge", &1u64).await.unwrap(),
        bus.publish("pay.charge", &2u64).await.unwrap(),
        bus.publish("pay.charge", &3u64).await.unwrap(),
    );
    // No bus is running workers: each retry waits, its event pending.
    for id in [a, b, c] {
        let r = dl.retry(id, &ann()).await.unwrap().unwrap();
        assert_eq!(r.status, DeadLetterStatus::Retrying);
        assert_eq!(get(&bus, id).await.status, EventStatus::Pending);
    }
    // Called off: the record closes and its event goes back to the dead-letter queue.
    let resolved = dl
        .resolve(a, "fixed by hand", &ann())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resolved.status, DeadLetterStatus::Resolved);
    let abandoned = dl
        .abandon(b, Some("not worth it"), &ann())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(abandoned.status, DeadLetterStatus::Abandoned);
    for id in [a, b] {
        assert_eq!(get(&bus, id).await.status, EventStatus::Dlq);
    }
    // Once a worker holds the event, the round must end first.
    // (The claim takes the pending announcements of the three dead letters too.)
    let claimed: Vec<EventId> = bus
        .store()
        .claim_due(h.clock.now(), 10)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert!(claimed.contains(&c) && !claimed.contains(&a), "{claimed:?}");
    let busy = dl.resolve(c, "too late", &ann()).await.unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Conflict);
    assert!(busy.to_string().contains("wait for that round"), "{busy}");
    bus.store().release(claimed, h.clock.now()).await.unwrap();
    // A started bus delivers only the retry that was not called off.
    healthy.store(true, Ordering::SeqCst);
    bus.start().await.unwrap();
    let d = wait_record(&bus, c, "the remaining retry delivered", |d| {
        d.status == DeadLetterStatus::Resolved
    })
    .await;
    assert_eq!(d.resolved_by.as_deref(), Some("ann"));
    for id in [a, b] {
        assert_eq!(
            get(&bus, id).await.status,
            EventStatus::Dlq,
            "never delivered"
        );
    }
    bus.shutdown().await.unwrap();
}

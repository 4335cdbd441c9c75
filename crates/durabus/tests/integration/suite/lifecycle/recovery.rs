//! Recovery after crashes, own worker loops, the error hook.

use super::*;

pub async fn start_recovers_events_stuck_in_processing(h: &Harness) {
    // Simulate a crash mid-dispatch: events written as processing, never finished.
    let store = h.backend.open().await;
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    for i in 0..100 {
        let e = NewEvent::new("crash.x", &i).unwrap();
        ids.push(e.id);
        batch.push(e);
    }
    store
        .insert(batch, InsertMode::Claimed, h.clock.now())
        .await
        .unwrap();
    let other = NewEvent::new("crash.y", &0).unwrap();
    let other_id = other.id;
    store
        .insert(vec![other], InsertMode::Pending, h.clock.now())
        .await
        .unwrap();
    store.close().await.unwrap();
    h.advance(PAST_ANY_LEASE);

    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "crash.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.id.to_string());
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(
        bus.start().await.unwrap(),
        100,
        "only processing events are recovered"
    );
    for id in &ids {
        let e = wait_status(&bus, *id, EventStatus::Done).await;
        assert_eq!(e.retry_count, 1);
    }
    let o = wait_status(&bus, other_id, EventStatus::Done).await;
    assert_eq!(o.retry_count, 0);
    assert_eq!(seen.len(), 101, "each event delivered exactly once");
    // start twice is a no-op.
    assert_eq!(bus.start().await.unwrap(), 0);
    bus.shutdown().await.unwrap();
}

pub async fn a_crash_during_back_off_loses_nothing(h: &Harness) {
    let id = {
        let bus = h.bus().await;
        bus.subscribe(
            "b.*",
            |_e: Event| async { Err("down".into()) },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
        let id = bus.publish("b.x", &1).await.unwrap();
        // No shutdown: the process "dies" while the event waits for its retry.
        drop(bus);
        id
    };
    let bus = h.bus().await;
    let e = get(&bus, id).await;
    assert_eq!(e.status, EventStatus::Pending);
    let due = e.next_attempt_at.expect("the retry time is persisted");
    bus.subscribe(
        "b.*",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    h.clock.set(due);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(e.retry_count, 1);
    bus.shutdown().await.unwrap();
}

pub async fn attempts_used_up_by_crashes_end_in_the_dlq_without_another_run(h: &Harness) {
    // A handler that kills its process: every attempt ends in a crash, and each restart's
    // recovery counts the interrupted attempt.
    let store = h.backend.open().await;
    let e = NewEvent::new("fatal.x", &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Claimed, h.clock.now())
        .await
        .unwrap();
    store.close().await.unwrap();
    // Four more processes start, recover the event, take it, and die with it.
    for _ in 0..4 {
        h.advance(PAST_ANY_LEASE);
        let store = h.backend.open().await;
        assert_eq!(store.recover_processing(h.clock.now()).await.unwrap(), 1);
        assert_eq!(store.claim_due(h.clock.now(), 10).await.unwrap().len(), 1);
        store.close().await.unwrap();
    }
    h.advance(PAST_ANY_LEASE);
    let bus = h.bus().await;
    let calls = count_calls(&bus, "fatal.*").await;
    assert_eq!(bus.start().await.unwrap(), 1);
    let e = wait_status(&bus, id, EventStatus::Dlq).await;
    assert_eq!(
        e.retry_count, 5,
        "4 crashes + the interrupted attempt of this recovery"
    );
    assert_eq!(e.errors.len(), 5);
    assert!(e.errors.iter().all(|m| m.contains("interrupted")));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "no attempt beyond max_retries + 1"
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_dropped_publish_still_finishes_its_delivery(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "slow.*",
        |_e: Event| async {
            tokio::time::sleep(Duration::from_millis(60)).await;
            Ok(())
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "slow.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.id.to_string());
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    // The caller gives up while the first handler runs.
    let gave_up = tokio::time::timeout(Duration::from_millis(20), bus.publish("slow.x", &1)).await;
    assert!(
        gave_up.is_err(),
        "the publish should still have been running"
    );
    let id = eventually("the delivery to finish", || {
        let seen = seen.clone();
        async move { seen.all().first().cloned() }
    })
    .await;
    let e = wait_status(&bus, id.parse().unwrap(), EventStatus::Done).await;
    assert_eq!(e.retry_count, 0);
    bus.shutdown().await.unwrap();
}

pub async fn poll_and_finalize_run_a_loop_of_ones_own(h: &Harness) {
    let bus = h
        .builder()
        .await
        .retry_policy(durabus::RetryPolicy {
            max_retries: 1,
            ..durabus::RetryPolicy::default()
        })
        .build()
        .await
        .unwrap();
    assert_eq!(bus.recover().await.unwrap(), 0);
    assert!(bus.poll().await.unwrap().is_none(), "nothing due");
    let ok = bus.enqueue("own.ok", &1).await.unwrap();
    let bad = bus.enqueue("own.bad", &2).await.unwrap();
    // One event per poll, earliest first, held until finalized.
    let first = bus.poll().await.unwrap().unwrap();
    assert_eq!(first.id, ok);
    assert_eq!(first.status, EventStatus::Processing);
    let second = bus.poll().await.unwrap().unwrap();
    assert_eq!(second.id, bad);
    assert!(bus.poll().await.unwrap().is_none());
    bus.finalize(ok, true).await.unwrap();
    assert_eq!(get(&bus, ok).await.status, EventStatus::Done);
    // Finalizing twice: the event is no longer held.
    assert!(matches!(
        bus.finalize(ok, true).await,
        Err(Error::NotHeld(_))
    ));
    // A failure is retried on the schedule, then dead-lettered.
    bus.finalize(bad, false).await.unwrap();
    let e = get(&bus, bad).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Pending, 1));
    assert!(
        bus.poll().await.unwrap().is_none(),
        "not due before its back-off"
    );
    h.advance(Duration::from_secs(60));
    let again = bus.poll().await.unwrap().unwrap();
    assert_eq!(again.id, bad);
    bus.finalize(bad, false).await.unwrap();
    let e = get(&bus, bad).await;
    assert_eq!((e.status, e.retry_count), (EventStatus::Dlq, 2));
    assert_eq!(e.errors.len(), 2);
    assert!(matches!(
        bus.finalize(durabus::EventId::new(), true).await,
        Err(Error::EventNotFound(..))
    ));
    bus.shutdown().await.unwrap();
    assert!(matches!(bus.poll().await, Err(Error::Shutdown)));
    assert!(matches!(bus.recover().await, Err(Error::Shutdown)));
}

pub async fn recover_without_start_sends_a_crashed_loops_events_back(h: &Harness) {
    // A process running its own loop crashed holding an event.
    let crashed = h.bus().await;
    let id = crashed.enqueue("own.job", &1).await.unwrap();
    assert_eq!(crashed.poll().await.unwrap().unwrap().id, id);
    drop(crashed);
    h.advance(PAST_ANY_LEASE);
    let bus = h.bus().await;
    assert_eq!(bus.recover().await.unwrap(), 1);
    let again = bus.poll().await.unwrap().expect("the event is due again");
    assert_eq!((again.id, again.retry_count), (id, 1));
    assert!(
        again.errors[0].contains("interrupted"),
        "{:?}",
        again.errors
    );
    bus.finalize(id, true).await.unwrap();
    assert_eq!(get(&bus, id).await.status, EventStatus::Done);
    bus.shutdown().await.unwrap();
}

pub async fn finalize_failures_are_counted_like_handler_failures(h: &Harness) {
    let bus = h
        .builder()
        .await
        .retry_policy(durabus::RetryPolicy {
            max_retries: 1,
            ..durabus::RetryPolicy::default()
        })
        .build()
        .await
        .unwrap();
    bus.recover().await.unwrap();
    let ok = bus.enqueue("own.ok", &1).await.unwrap();
    let bad = bus.enqueue("own.bad", &2).await.unwrap();
    assert_eq!(bus.poll().await.unwrap().unwrap().id, ok);
    bus.finalize(ok, true).await.unwrap();
    assert_eq!(bus.poll().await.unwrap().unwrap().id, bad);
    bus.finalize(bad, false).await.unwrap();
    h.advance(Duration::from_secs(60));
    assert_eq!(bus.poll().await.unwrap().unwrap().id, bad);
    bus.finalize(bad, false).await.unwrap();
    let e = get(&bus, bad).await;
    assert_eq!(e.status, EventStatus::Dlq);
    assert_eq!(
        e.errors,
        vec![
            "attempt 1: finalized as failed".to_owned(),
            "attempt 2: finalized as failed".to_owned()
        ]
    );
    let m = bus.metrics();
    assert_eq!(m.delivery_attempts_total, 3);
    assert_eq!(m.failed_attempts_total, 2);
    assert_eq!(m.retries_total, 1);
    assert_eq!(m.events_succeeded_total, 1);
    assert_eq!(m.events_dead_lettered_total, 1);
    assert_eq!(m.by_type["own.bad"].dlq_rate, 1.0);
    assert_eq!(m.attempts_histogram.get(&2), Some(&1));
    // A finalize that is refused (not held) counts nothing.
    assert!(bus.finalize(ok, false).await.is_err());
    assert_eq!(bus.metrics().delivery_attempts_total, 3);
    bus.shutdown().await.unwrap();
}

pub async fn dead_letters_from_interrupted_attempts_are_counted(h: &Harness) {
    let store = h.backend.open().await;
    let e = NewEvent::new("fatal.y", &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Claimed, h.clock.now())
        .await
        .unwrap();
    store.close().await.unwrap();
    for _ in 0..4 {
        h.advance(PAST_ANY_LEASE);
        let store = h.backend.open().await;
        assert_eq!(store.recover_processing(h.clock.now()).await.unwrap(), 1);
        assert_eq!(store.claim_due(h.clock.now(), 10).await.unwrap().len(), 1);
        store.close().await.unwrap();
    }
    h.advance(PAST_ANY_LEASE);
    let bus = h.bus().await;
    let _calls = count_calls(&bus, "fatal.*").await;
    bus.start().await.unwrap();
    wait_status(&bus, id, EventStatus::Dlq).await;
    let m = bus.metrics();
    assert_eq!(m.events_dead_lettered_total, 1);
    assert_eq!(m.failed_attempts_total, 1);
    assert_eq!(m.by_type["fatal.y"].events_dead_lettered_total, 1);
    bus.shutdown().await.unwrap();
}

pub async fn the_error_hook_hears_what_fails_in_the_background(h: &Harness) {
    type Heard = Arc<std::sync::Mutex<Vec<(durabus::ErrorSource, durabus::ErrorKind, bool)>>>;
    let heard: Heard = Arc::default();
    let hook = |heard: &Heard| {
        let heard = heard.clone();
        move |e: &durabus::BusError<'_>| {
            heard
                .lock()
                .unwrap()
                .push((e.source.clone(), e.kind(), e.retrying))
        }
    };
    let bus = h
        .builder()
        .await
        .on_error(hook(&heard))
        .build()
        .await
        .unwrap();
    bus.start().await.unwrap();
    // The database goes away under a running bus: its worker's claims fail and are retried.
    bus.store().close().await.unwrap();
    eventually("the hook to hear the failed claim", || {
        let heard = heard.clone();
        async move {
            heard
                .lock()
                .unwrap()
                .contains(&(
                    durabus::ErrorSource::Claim,
                    durabus::ErrorKind::Closed,
                    true,
                ))
                .then_some(())
        }
    })
    .await;
    let _ = bus.shutdown().await;

    // Recovery at start fails: the caller gets the error, and so does the hook.
    let heard: Heard = Arc::default();
    let bus = h
        .builder()
        .await
        .on_error(hook(&heard))
        .build()
        .await
        .unwrap();
    bus.store().close().await.unwrap();
    assert!(bus.start().await.is_err());
    assert_eq!(
        heard.lock().unwrap().as_slice(),
        &[(
            durabus::ErrorSource::Recovery,
            durabus::ErrorKind::Closed,
            false
        )]
    );
    let _ = bus.shutdown().await;

    // Without a hook nothing changes: errors reach only the log.
    let quiet = h.bus().await;
    quiet.start().await.unwrap();
    quiet.store().close().await.unwrap();
    let _ = quiet.shutdown().await;
}

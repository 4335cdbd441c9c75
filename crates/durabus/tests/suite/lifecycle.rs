//! Start, crash recovery and shutdown.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use durabus::{Error, Event, EventStatus, InsertMode, NewEvent, SubscribeOptions};

use crate::support::*;

pub async fn publish_subscribe_and_enqueue_after_shutdown_fail(h: &Harness) {
    let bus = h.bus().await;
    bus.start().await.unwrap();
    bus.shutdown().await.unwrap();
    assert!(bus.is_shutdown());
    assert!(matches!(bus.publish("a.b", &1).await, Err(Error::Shutdown)));
    assert!(matches!(bus.enqueue("a.b", &1).await, Err(Error::Shutdown)));
    assert!(matches!(
        bus.subscribe(
            "a.*",
            |_e: Event| async { Ok(()) },
            SubscribeOptions::default()
        )
        .await,
        Err(Error::Shutdown)
    ));
    assert!(matches!(bus.start().await, Err(Error::Shutdown)));
    // A second shutdown is harmless.
    bus.shutdown().await.unwrap();
}

pub async fn shutdown_waits_for_in_flight_dispatches(h: &Harness) {
    let bus = h.bus().await;
    let finished = Arc::new(AtomicU32::new(0));
    let f = finished.clone();
    bus.subscribe(
        "w.*",
        move |_e: Event| {
            let f = f.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(150)).await;
                f.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.enqueue("w.x", &1).await.unwrap();
    eventually("the handler to start", || {
        let bus = bus.clone();
        async move { (bus.in_flight() > 0).then_some(()) }
    })
    .await;
    bus.shutdown().await.unwrap();
    assert_eq!(
        finished.load(Ordering::SeqCst),
        1,
        "shutdown returned before the handler finished"
    );
    // The outcome was recorded before the store closed.
    let store = h.backend.open().await;
    assert_eq!(
        store.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    store.close().await.unwrap();
}

pub async fn drain_timeout_abandons_handlers_and_recovery_finishes_them(h: &Harness) {
    let bus = h
        .builder()
        .await
        .shutdown_timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "stuck.*",
        |_e: Event| async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            Ok(())
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus.enqueue("stuck.x", &1).await.unwrap();
    eventually("the handler to start", || {
        let bus = bus.clone();
        async move { (bus.in_flight() > 0).then_some(()) }
    })
    .await;
    let started = Instant::now();
    bus.shutdown().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "shutdown ignored its timeout"
    );

    // Next start: the event left in processing is recovered and delivered.
    let bus = h.bus().await;
    let done = Arc::new(AtomicU32::new(0));
    let d = done.clone();
    bus.subscribe(
        "stuck.*",
        move |_e: Event| {
            let d = d.clone();
            async move {
                d.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(get(&bus, id).await.status, EventStatus::Processing);
    assert_eq!(bus.start().await.unwrap(), 1);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert_eq!(e.retry_count, 1, "the interrupted attempt counts");
    assert!(e.errors[0].contains("interrupted"), "{:?}", e.errors);
    bus.shutdown().await.unwrap();
}

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

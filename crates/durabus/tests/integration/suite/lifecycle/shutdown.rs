//! Shutdown: what it refuses, waits for, abandons and releases; subscription rows.

use super::*;

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

    // Next start, after the abandoned handler's lease (if any) ran out: the event left in
    // processing is recovered and delivered.
    h.advance(PAST_ANY_LEASE);
    let bus = h.bus().await;
    let done = count_calls(&bus, "stuck.*").await;
    assert_eq!(get(&bus, id).await.status, EventStatus::Processing);
    assert_eq!(bus.start().await.unwrap(), 1);
    let e = wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert_eq!(e.retry_count, 1, "the interrupted attempt counts");
    assert!(e.errors[0].contains("interrupted"), "{:?}", e.errors);
    bus.shutdown().await.unwrap();
}

pub async fn shutdown_removes_unnamed_subscription_rows_and_keeps_named_ones(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "a.*",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.subscribe(
        "a.*",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default().name("kept"),
    )
    .await
    .unwrap();
    bus.shutdown().await.unwrap();
    let store = h.backend.open().await;
    let rows = store.subscriptions().await.unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].name.as_deref(), Some("kept"));
    store.close().await.unwrap();
}

pub async fn concurrent_subscribes_with_one_name_let_exactly_one_through(h: &Harness) {
    let bus = h.bus().await;
    let tries: Vec<_> = (0..8)
        .map(|_| {
            let bus = bus.clone();
            tokio::spawn(async move {
                bus.subscribe(
                    "n.*",
                    |_e: Event| async { Ok(()) },
                    SubscribeOptions::default().name("same"),
                )
                .await
            })
        })
        .collect();
    let mut ok = 0;
    for t in tries {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::Invalid(_)) => {}
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!(ok, 1);
    assert_eq!(bus.subscriptions().len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn events_claimed_but_not_started_are_released_at_shutdown(h: &Harness) {
    let bus = h
        .builder()
        .await
        .concurrency(1)
        .claim_batch(10)
        .shutdown_timeout(Duration::from_millis(50))
        .build()
        .await
        .unwrap();
    let started = count_calls_and_hang(&bus, "q.*").await;
    let batch: Vec<_> = (0..5).map(|i| NewEvent::new("q.x", &i).unwrap()).collect();
    let ids = bus.enqueue_batch(batch).await.unwrap();
    bus.start().await.unwrap();
    eventually("the first handler to start", || {
        let s = started.clone();
        async move { (s.load(Ordering::SeqCst) == 1).then_some(()) }
    })
    .await;
    bus.shutdown().await.unwrap();
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "one slot: one handler ran"
    );
    let store = h.backend.open().await;
    let mut processing = 0;
    for id in ids {
        let e = store.get_event(id).await.unwrap().unwrap();
        match e.status {
            EventStatus::Processing => processing += 1,
            EventStatus::Pending => {
                assert_eq!(e.retry_count, 0, "a released event was not attempted")
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!(
        processing, 1,
        "only the abandoned handler's event stays processing"
    );
    store.close().await.unwrap();
}

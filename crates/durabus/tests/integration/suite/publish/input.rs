//! What a publish refuses, batches all or nothing, the hand-over to an idle worker, enqueues racing a shutdown.

use super::*;

pub async fn bad_input_is_rejected_and_nothing_is_stored(h: &Harness) {
    let bus = h
        .builder()
        .await
        .max_payload_bytes(64)
        .build()
        .await
        .unwrap();
    let mut not_json = std::collections::HashMap::new();
    not_json.insert((1, 2), "tuple keys do not serialise to JSON");
    assert!(matches!(
        bus.publish("a.b", &not_json).await,
        Err(Error::InvalidPayload(_))
    ));
    assert!(matches!(
        bus.enqueue("a.b", &not_json).await,
        Err(Error::InvalidPayload(_))
    ));
    assert!(matches!(
        bus.publish("", &1).await,
        Err(Error::InvalidEventType(..))
    ));
    assert!(matches!(
        bus.enqueue("bad type", &1).await,
        Err(Error::InvalidEventType(..))
    ));
    let big = "x".repeat(100);
    match bus.publish("a.b", &big).await {
        Err(Error::PayloadTooLarge { size, limit }) => {
            assert_eq!(size, 102);
            assert_eq!(limit, 64);
        }
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert!(matches!(
        bus.enqueue("a.b", &big).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    let mut ev = NewEvent::new("a.b", &1).unwrap();
    ev.event_type = "bad..type".into();
    assert!(matches!(
        bus.enqueue_event(ev).await,
        Err(Error::InvalidEventType(..))
    ));
    assert!(matches!(
        bus.subscribe(
            "",
            |_e: Event| async { Ok(()) },
            SubscribeOptions::default()
        )
        .await,
        Err(Error::InvalidPattern(..))
    ));
    assert!(matches!(
        bus.subscribe(
            "a.*",
            |_e: Event| async { Ok(()) },
            SubscribeOptions::default().timeout(Duration::ZERO)
        )
        .await,
        Err(Error::Invalid(_))
    ));
    bus.subscribe(
        "a.*",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default().name("n"),
    )
    .await
    .unwrap();
    assert!(matches!(
        bus.subscribe(
            "b.*",
            |_e: Event| async { Ok(()) },
            SubscribeOptions::default().name("n")
        )
        .await,
        Err(Error::Invalid(_))
    ));
    let all = bus
        .store()
        .list_events(EventQuery::default())
        .await
        .unwrap();
    assert!(all.is_empty(), "nothing may be stored: {all:?}");
    // At the limit exactly is fine.
    bus.publish("a.b", &"y".repeat(62)).await.unwrap();
    bus.shutdown().await.unwrap();
}

pub async fn a_batch_is_stored_all_or_nothing_and_delivered(h: &Harness) {
    let bus = h
        .builder()
        .await
        .max_payload_bytes(32)
        .build()
        .await
        .unwrap();
    let count = count_calls(&bus, "batch.*").await;
    // One oversized event spoils the batch: nothing is stored.
    let mut bad: Vec<_> = (0..10)
        .map(|i| NewEvent::new("batch.x", &i).unwrap())
        .collect();
    bad.push(NewEvent::new("batch.x", &"z".repeat(100)).unwrap());
    assert!(matches!(
        bus.enqueue_batch(bad).await,
        Err(Error::PayloadTooLarge { .. })
    ));
    assert!(
        bus.store()
            .list_events(EventQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(bus.enqueue_batch(Vec::new()).await.unwrap().is_empty());
    let good: Vec<_> = (0..500)
        .map(|i| NewEvent::new("batch.x", &i).unwrap())
        .collect();
    let want: Vec<_> = good.iter().map(|e| e.id).collect();
    let ids = bus.enqueue_batch(good).await.unwrap();
    assert_eq!(ids, want);
    bus.start().await.unwrap();
    for id in &ids {
        wait_status(&bus, *id, EventStatus::Done).await;
    }
    assert_eq!(count.load(Ordering::SeqCst), 500);
    bus.shutdown().await.unwrap();
    assert!(matches!(
        bus.enqueue_batch(vec![NewEvent::new("batch.x", &1).unwrap()])
            .await,
        Err(Error::Shutdown)
    ));
}

pub async fn system_types_are_reserved_for_the_bus(h: &Harness) {
    let bus = h.bus().await;
    // Subscribing to the bus's own events is allowed.
    bus.subscribe(
        "system.*",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let refused = |r: durabus::Result<durabus::EventId>| match r {
        Err(e @ Error::InvalidEventType(..)) => {
            assert_eq!(e.kind(), durabus::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("reserved"), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    refused(bus.publish("system.dead_letter", &1).await);
    refused(bus.enqueue("system.replay.started", &1).await);
    assert!(matches!(
        NewEvent::new("system.x", &1),
        Err(Error::InvalidEventType(..))
    ));
    let mut sneaky = NewEvent::new("a.b", &1).unwrap();
    sneaky.event_type = "system.dead_letter".into();
    refused(bus.publish_event(sneaky.clone()).await);
    refused(bus.enqueue_event(sneaky.clone()).await);
    assert!(matches!(
        bus.enqueue_batch(vec![NewEvent::new("a.ok", &1).unwrap(), sneaky])
            .await,
        Err(Error::InvalidEventType(..))
    ));
    // Types that merely contain the word are fine.
    bus.publish("my.system.event", &1).await.unwrap();
    let stored = bus.history().list(EventQuery::default()).await.unwrap();
    assert_eq!(stored.len(), 1, "nothing reserved was stored: {stored:?}");
    bus.shutdown().await.unwrap();
}

pub async fn an_idle_worker_is_handed_an_enqueued_event_without_a_claim(h: &Harness) {
    // No polling, and one delivery slot: an idle loop claims only when woken, and while the
    // handler holds the slot it cannot claim at all, so a claim between the two counts below
    // is the one that fetched the event.
    let bus = h
        .builder()
        .await
        .poll_interval(Duration::from_secs(3600))
        .concurrency(1)
        .build()
        .await
        .unwrap();
    // The handler says when it starts and holds on until the test has looked.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<durabus::EventId>();
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let calls = Arc::new(AtomicUsize::new(0));
    let (g, c) = (go.clone(), calls.clone());
    bus.subscribe(
        "handed.*",
        move |e: Event| {
            let (tx, g, c) = (started_tx.clone(), g.clone(), c.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(e.id);
                g.acquire().await?.forget();
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    // An enqueue that finds the loop asleep after an empty claim is handed over: its handler
    // starts with no claim in between. One that lands while the loop is between claims goes
    // the pending way (a claim), so try until the loop was caught waiting.
    let mut handed = None;
    for i in 0..50u32 {
        let before = claims(&bus).await;
        let id = bus.enqueue("handed.x", &i).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .expect("the handler starts")
            .unwrap();
        assert_eq!(got, id);
        let after = claims(&bus).await;
        go.add_permits(1);
        let e = wait_status(&bus, id, EventStatus::Done).await;
        assert_eq!(e.retry_count, 0);
        assert!(e.errors.is_empty());
        if after == before {
            handed = Some(id);
            break;
        }
        // Let the loop finish its next claim and fall asleep again.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let id = handed.expect("an enqueue onto an idle worker is delivered without a claim");
    // Delivered once, and nothing else was delivered on the way.
    assert_eq!(started.try_recv().ok(), None);
    let n = calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(calls.load(Ordering::SeqCst), n, "{id} delivered again");
    bus.shutdown().await.unwrap();
}

pub async fn enqueues_racing_a_shutdown_lose_nothing(h: &Harness) {
    // An enqueue may take the idle loop's turn just as the bus stops; its event then goes back
    // to pending (or, failing that, is recovered), never lost and never delivered twice.
    let mut acknowledged = Vec::new();
    let calls = Arc::new(std::sync::Mutex::new(Vec::<durabus::EventId>::new()));
    for round in 0..20u32 {
        let bus = Arc::new(recording_bus(h, &calls).await);
        let b = bus.clone();
        let enqueues = tokio::spawn(async move {
            let mut ok = Vec::new();
            for i in 0..3u32 {
                match b.enqueue("race.x", &(round * 10 + i)).await {
                    Ok(id) => ok.push(id),
                    Err(Error::Shutdown) => break,
                    Err(e) => panic!("enqueue failed with {e}"),
                }
            }
            ok
        });
        tokio::time::sleep(Duration::from_micros(u64::from(round) * 100)).await;
        bus.shutdown().await.unwrap();
        acknowledged.extend(enqueues.await.unwrap());
    }
    // A last bus delivers whatever the stops left behind.
    h.advance(Duration::from_secs(3600));
    let bus = recording_bus(h, &calls).await;
    for id in &acknowledged {
        wait_status(&bus, *id, EventStatus::Done).await;
    }
    let calls = calls.lock().unwrap().clone();
    for id in &acknowledged {
        let n = calls.iter().filter(|c| *c == id).count();
        assert_eq!(n, 1, "{id} was acknowledged and delivered {n} times");
    }
    bus.shutdown().await.unwrap();
}

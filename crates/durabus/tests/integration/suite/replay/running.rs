//! How a replay runs: paced, cancelled, resumed after a kill, handed to a handler, run by a started bus.

use super::*;

pub async fn the_rate_limit_paces_on_the_injected_clock(h: &Harness) {
    let (bus, _seen) = order_bus(h).await;
    let start = bus.clock().now();
    let events: Vec<_> = (0..60u64)
        .map(|i| durabus::NewEvent::new("order.created", &i).unwrap())
        .collect();
    bus.enqueue_batch(events).await.unwrap();
    let replays = bus.replays();
    // 100 events/s: a burst of 5 (50 ms), then 5 per 50 ms of the clock.
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)).rate_limit(100),
            &ann(),
        )
        .await
        .unwrap();
    let processed = Arc::new(AtomicU64::new(0));
    let p = processed.clone();
    let run = {
        let replays = replays.clone();
        let id = op.id.clone();
        tokio::spawn(async move {
            replays
                .run(&id, &options("paced", 50), &ReplayHooks::new(), move |o| {
                    p.store(o.processed, Ordering::SeqCst)
                })
                .await
        })
    };
    let reach = |n: u64| {
        let processed = processed.clone();
        async move {
            eventually(&format!("{n} events replayed"), || {
                let processed = processed.clone();
                async move { (processed.load(Ordering::SeqCst) >= n).then_some(()) }
            })
            .await;
        }
    };
    reach(5).await;
    // Without the clock moving, nothing more goes (real time passes; the clock does not).
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(processed.load(Ordering::SeqCst), 5);
    for step in 1..=11u64 {
        h.advance(Duration::from_millis(50));
        let want = (5 + 5 * step).min(60);
        reach(want).await;
        assert_eq!(
            processed.load(Ordering::SeqCst),
            want,
            "after {} ms of the clock: never more than the rate allows",
            50 * step
        );
    }
    let done = run.await.unwrap().unwrap();
    assert_eq!(
        (done.processed, done.status),
        (60, OperationStatus::Completed)
    );
    // 60 events at 100/s on the clock: 550 ms after the burst.
    assert_eq!(done.duration_ms(h.clock.now()), 550);
    bus.shutdown().await.unwrap();
}

pub async fn a_replay_is_cancelled_between_chunks(h: &Harness) {
    let (bus, _seen) = order_bus(h).await;
    let start = bus.clock().now();
    let events: Vec<_> = (0..40u64)
        .map(|i| durabus::NewEvent::new("order.created", &i).unwrap())
        .collect();
    bus.enqueue_batch(events).await.unwrap();
    let replays = bus.replays();
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)).rate_limit(100),
            &ann(),
        )
        .await
        .unwrap();
    let processed = Arc::new(AtomicU64::new(0));
    let p = processed.clone();
    let run = {
        let replays = replays.clone();
        let id = op.id.clone();
        tokio::spawn(async move {
            replays
                .run(&id, &options("r", 50), &ReplayHooks::new(), move |o| {
                    p.store(o.processed, Ordering::SeqCst)
                })
                .await
        })
    };
    eventually("the first chunk", || {
        let processed = processed.clone();
        async move { (processed.load(Ordering::SeqCst) == 5).then_some(()) }
    })
    .await;
    let asked = replays.cancel(&op.id).await.unwrap();
    assert_eq!(
        asked.status,
        OperationStatus::Running,
        "a live runner stops at its next chunk"
    );
    assert!(asked.cancel_requested);
    h.advance(Duration::from_millis(50));
    let done = run.await.unwrap().unwrap();
    assert_eq!(done.status, OperationStatus::Cancelled);
    assert!(done.processed < 40, "stopped early: {}", done.processed);
    assert_eq!(replays_of(&bus).await.len() as u64, done.processed);
    let completed = of_type(&bus, COMPLETED).await;
    assert_eq!(completed.len(), 1);
    assert_eq!(completed[0].payload_value()["status"], "cancelled");
    // A finished replay cannot be cancelled; a pending one is cancelled at once, unannounced.
    assert_eq!(
        replays.cancel(&op.id).await.unwrap_err().kind(),
        ErrorKind::Conflict
    );
    let pending = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)),
            &ann(),
        )
        .await
        .unwrap();
    assert_eq!(
        replays.cancel(&pending.id).await.unwrap().status,
        OperationStatus::Cancelled
    );
    assert_eq!(of_type(&bus, STARTED).await.len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn a_replay_killed_mid_way_resumes_exactly_once(h: &Harness) {
    let (bus, _seen) = order_bus(h).await;
    let start = bus.clock().now();
    let events: Vec<_> = (0..300u64)
        .map(|i| durabus::NewEvent::new("order.created", &i).unwrap())
        .collect();
    let originals = bus.enqueue_batch(events).await.unwrap();
    let replays = bus.replays();
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)),
            &ann(),
        )
        .await
        .unwrap();
    // Runner A is killed (its task dropped at whatever await it is on) after a few chunks.
    let chunks = Arc::new(AtomicU64::new(0));
    let c = chunks.clone();
    let a = {
        let replays = replays.clone();
        let id = op.id.clone();
        tokio::spawn(async move {
            replays
                .run(
                    &id,
                    &options("runner-a", 7),
                    &ReplayHooks::new(),
                    move |_| {
                        c.fetch_add(1, Ordering::SeqCst);
                    },
                )
                .await
        })
    };
    eventually("runner A to write a few chunks", || {
        let chunks = chunks.clone();
        async move { (chunks.load(Ordering::SeqCst) >= 4).then_some(()) }
    })
    .await;
    a.abort();
    let _ = a.await;
    let left = replays.get(&op.id).await.unwrap();
    assert_eq!(left.status, OperationStatus::Running);
    assert!(
        left.processed > 0 && left.processed < 300,
        "{}",
        left.processed
    );
    // Runner B takes over once A's lease has run out, and finishes.
    let busy = replays
        .run(&op.id, &options("runner-b", 7), &ReplayHooks::new(), |_| {})
        .await
        .unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Conflict);
    h.advance(Duration::from_secs(31));
    let done = replays
        .run(&op.id, &options("runner-b", 7), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped, done.errors), (300, 0, 0));
    let made = replays_of(&bus).await;
    assert_eq!(made.len(), 300, "none skipped");
    for id in &originals {
        assert_eq!(made[id].len(), 1, "{id} replayed exactly once");
    }
    assert_eq!(of_type(&bus, STARTED).await.len(), 1, "announced once");
    assert_eq!(of_type(&bus, COMPLETED).await.len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn a_handler_replay_hands_events_over_and_counts_failures(h: &Harness) {
    let bus = h.bus().await;
    let start = bus.clock().now();
    let mut ids = Vec::new();
    for i in 0..6u64 {
        ids.push(bus.publish("order.created", &i).await.unwrap());
    }
    let seen = Seen::default();
    let s = seen.clone();
    let hooks = ReplayHooks::new()
        .handler(move |e: Event| {
            let s = s.clone();
            async move {
                let n: u64 = e.payload().unwrap();
                assert!(!e.metadata.contains_key(REPLAY_OF), "the original itself");
                if n == 3 {
                    return Err("cannot redo 3".into());
                }
                if n == 4 {
                    panic!("four");
                }
                s.push(n.to_string());
                Ok(())
            }
        })
        .filter(|e| e.payload != "5");
    let replays = bus.replays();
    let request = ReplayRequest::new(ReplaySelection::range(start, None));
    let op = replays.submit_with(&request, &ann(), &hooks).await.unwrap();
    assert_eq!(op.params["mode"], "handler");
    assert_eq!(op.params["attached"], true);
    // Attached: runners without the hooks leave it alone.
    assert!(bus.operations().claimable().await.unwrap().is_empty());
    let refused = bus
        .operations()
        .run(&op.id, &options("other", 10), |_| {})
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict);
    assert!(refused.to_string().contains("handler"), "{refused}");
    let done = replays
        .run(&op.id, &options("here", 10), &hooks, |_| {})
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped, done.errors), (3, 1, 2));
    assert_eq!(seen.all(), vec!["0", "1", "2"]);
    let failures = done.summary.as_ref().unwrap()["failures"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(failures.len(), 2);
    assert_eq!(failures[0]["event_id"], ids[3].to_string());
    assert!(
        failures[0]["error"]
            .as_str()
            .unwrap()
            .contains("cannot redo 3")
    );
    assert!(
        failures[1]["error"]
            .as_str()
            .unwrap()
            .contains("panicked: four")
    );
    assert!(replays_of(&bus).await.is_empty(), "nothing re-published");
    // The convenience call: submit and run, the specification's result.
    let result = replays
        .replay(
            &ReplayRequest::new(ReplaySelection::ids([ids[0]])),
            &ann(),
            &hooks,
        )
        .await
        .unwrap();
    assert_eq!((result.processed, result.status.as_str()), (1, "completed"));
    bus.shutdown().await.unwrap();
}

pub async fn a_started_bus_runs_submitted_replays(h: &Harness) {
    let bus = h
        .builder()
        .await
        .config(durabus::BusConfig {
            operations_poll: Duration::from_millis(5),
            ..durabus::BusConfig::default()
        })
        .build()
        .await
        .unwrap();
    let calls = count_calls(&bus, "order.*").await;
    let start = bus.clock().now();
    for i in 0..3u64 {
        bus.publish("order.created", &i).await.unwrap();
    }
    let op = bus
        .replays()
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)),
            &ann(),
        )
        .await
        .unwrap();
    bus.start().await.unwrap();
    eventually("the bus to run the replay and deliver it", || {
        let (replays, id, calls) = (bus.replays(), op.id.clone(), calls.clone());
        async move {
            let op = replays.get(&id).await.ok()?;
            (op.status == OperationStatus::Completed && calls.load(Ordering::SeqCst) == 6)
                .then_some(())
        }
    })
    .await;
    let listed = bus.replays().list(None, 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, op.id);
    bus.shutdown().await.unwrap();
}

pub async fn an_operations_only_bus_runs_operations_and_claims_nothing(h: &Harness) {
    // Another process's event in processing, and due events: an operations-only bus (as
    // `durabus serve` runs one) must leave them all alone.
    let store = h.backend.open().await;
    let claimed = durabus::NewEvent::new("order.created", &1u64).unwrap();
    let pending = durabus::NewEvent::new("order.created", &2u64).unwrap();
    let (claimed_id, pending_id) = (claimed.id, pending.id);
    store
        .insert(vec![claimed], durabus::InsertMode::Claimed, h.clock.now())
        .await
        .unwrap();
    store
        .insert(vec![pending], durabus::InsertMode::Pending, h.clock.now())
        .await
        .unwrap();
    store.close().await.unwrap();
    let bus = h
        .builder()
        .await
        .config(durabus::BusConfig {
            operations_poll: Duration::from_millis(5),
            deliver: false,
            ..durabus::BusConfig::default()
        })
        .build()
        .await
        .unwrap();
    let op = bus
        .replays()
        .submit(
            &ReplayRequest::new(ReplaySelection::ids([pending_id])),
            &ann(),
        )
        .await
        .unwrap();
    assert_eq!(
        bus.start().await.unwrap(),
        0,
        "no recovery without delivery"
    );
    eventually("the operations-only bus to run the replay", || {
        let (replays, id) = (bus.replays(), op.id.clone());
        async move {
            let op = replays.get(&id).await.ok()?;
            (op.status == OperationStatus::Completed).then_some(())
        }
    })
    .await;
    let store = bus.store();
    let get = |id| {
        let store = store.clone();
        async move { store.get_event(id).await.unwrap().unwrap().status }
    };
    assert_eq!(get(claimed_id).await, EventStatus::Processing);
    assert_eq!(get(pending_id).await, EventStatus::Pending);
    let copies = of_type(&bus, "order.created").await;
    assert_eq!(copies.len(), 3, "the original two and the replayed copy");
    assert!(
        copies.iter().all(|e| e.status != EventStatus::Done),
        "nothing delivered: {copies:?}"
    );
    bus.shutdown().await.unwrap();
}

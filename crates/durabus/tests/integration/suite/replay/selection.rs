//! What a replay selects and publishes: time ranges, ids, types and statuses, dry runs, a selection frozen at submit, bad requests.

use super::*;

pub async fn a_time_range_replay_republishes_new_events_that_reach_handlers(h: &Harness) {
    let (bus, seen) = order_bus(h).await;
    let system = Seen::default();
    let sys = system.clone();
    bus.subscribe(
        "system.replay.*",
        move |e: Event| {
            let sys = sys.clone();
            async move {
                sys.push(format!("{} {}", e.event_type, e.payload));
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    h.advance(Duration::from_secs(60));
    let from = bus.clock().now();
    let mut originals = Vec::new();
    for i in 0..5u64 {
        originals.push(bus.publish("order.created", &i).await.unwrap());
        h.advance(MS);
    }
    let to = bus.clock().now();
    h.advance(Duration::from_secs(60));
    let later = bus.publish("order.created", &99u64).await.unwrap();
    let before: Vec<Event> = {
        let mut v = Vec::new();
        for id in &originals {
            v.push(get(&bus, *id).await);
        }
        v
    };

    let replays = bus.replays();
    let selection = ReplaySelection::range(from, Some(to));
    let preview = replays.preview(&selection).await.unwrap();
    assert_eq!(preview.count, 5);
    assert_eq!(preview.by_type.get("order.created"), Some(&5));
    assert_eq!(preview.samples.len(), 5);
    assert_eq!(preview.samples[0].id, originals[0], "oldest first");

    let op = replays
        .submit(&ReplayRequest::new(selection), &ann())
        .await
        .unwrap();
    assert_eq!(
        (op.kind.as_str(), op.status, op.total),
        ("replay", OperationStatus::Pending, 5)
    );
    let done = replays
        .run(&op.id, &options("runner", 2), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped, done.errors), (5, 0, 0));
    let result = replays.status(&op.id).await.unwrap();
    assert_eq!((result.processed, result.status.as_str()), (5, "completed"));

    // New events, one per original, carrying replayOf and the operation.
    let made = replays_of(&bus).await;
    assert_eq!(made.len(), 5);
    assert!(!made.contains_key(&later), "outside the range");
    for (i, id) in originals.iter().enumerate() {
        let copies = &made[id];
        assert_eq!(copies.len(), 1, "replayed once");
        let copy = &copies[0];
        assert_ne!(copy.id, *id);
        assert_eq!(copy.event_type, "order.created");
        assert_eq!(copy.payload, i.to_string());
        assert_eq!(copy.metadata[REPLAY_OPERATION], op.id);
    }
    // The originals are untouched.
    for (b, id) in before.iter().zip(&originals) {
        assert_eq!(&get(&bus, *id).await, b);
    }
    // Delivered through normal delivery.
    bus.start().await.unwrap();
    eventually("the replayed events to reach the handler", || {
        let seen = seen.clone();
        async move {
            (seen
                .all()
                .iter()
                .filter(|s| s.starts_with("replay"))
                .count()
                == 5)
                .then_some(())
        }
    })
    .await;
    for i in 0..5u64 {
        assert_eq!(seen.count(&format!("replay {i}")), 1);
    }
    // Announced: started, then completed with the counts.
    let started = of_type(&bus, STARTED).await;
    let completed = of_type(&bus, COMPLETED).await;
    assert_eq!((started.len(), completed.len()), (1, 1));
    let s = started[0].payload_value();
    assert_eq!(
        (s["operation"].as_str(), s["total"].as_u64()),
        (Some(op.id.as_str()), Some(5))
    );
    assert_eq!(s["actor"]["name"], "ann");
    let c = completed[0].payload_value();
    assert_eq!(c["status"], "completed");
    assert_eq!(c["processed"], 5);
    assert!(started[0].created_at <= completed[0].created_at);
    eventually("the announcements to reach their subscriber", || {
        let system = system.clone();
        async move { (system.len() == 2).then_some(()) }
    })
    .await;
    bus.shutdown().await.unwrap();
}

pub async fn replays_select_by_ids_types_and_statuses(h: &Harness) {
    let bus = h.bus().await;
    bus.subscribe(
        "pay.*",
        |_e: Event| async { Err("declined".into()) },
        SubscribeOptions::default().retry(durabus::RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let start = bus.clock().now();
    let a = bus.publish("order.created", &1u64).await.unwrap();
    let b = bus.publish("order.shipped", &2u64).await.unwrap();
    let c = bus.publish("user.created", &3u64).await.unwrap();
    let dead = bus.publish("pay.charge", &4u64).await.unwrap();
    wait_status(&bus, dead, EventStatus::Dlq).await;
    let replays = bus.replays();
    let count = |sel: ReplaySelection| {
        let replays = replays.clone();
        async move { replays.preview(&sel).await.unwrap() }
    };

    let by_ids = count(ReplaySelection::ids([a, c])).await;
    assert_eq!(by_ids.count, 2);
    let ids: Vec<EventId> = by_ids.samples.iter().map(|e| e.id).collect();
    assert_eq!(ids, vec![a, c]);

    let by_type = count(ReplaySelection::range(start, None).types(["order.*"])).await;
    assert_eq!(by_type.count, 2);
    assert_eq!(by_type.by_type.len(), 2);

    let exact =
        count(ReplaySelection::range(start, None).types(["user.created", "pay.charge"])).await;
    assert_eq!(exact.count, 2);

    let dead_only = count(ReplaySelection::range(start, None).statuses([EventStatus::Dlq])).await;
    assert_eq!(dead_only.count, 1);
    assert_eq!(dead_only.samples[0].id, dead);

    // Both criteria must hold.
    let none = count(ReplaySelection::ids([a, b]).types(["user.*"])).await;
    assert_eq!(none.count, 0);

    // Everything an application published, and not the bus's own system events (the dead
    // letter's announcement, and its failure group's: the first of its kind).
    let all = count(ReplaySelection::range(start, None)).await;
    assert_eq!(all.count, 4, "{:?}", all.by_type);
    let system = count(ReplaySelection::range(start, None).types(["system.*"])).await;
    assert_eq!(system.count, 2, "{:?}", system.by_type);

    // A replay of the dead one re-publishes it; the dead letter itself stays as it was.
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None).statuses([EventStatus::Dlq])),
            &ann(),
        )
        .await
        .unwrap();
    let done = replays
        .run(&op.id, &options("r", 10), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(done.processed, 1);
    assert_eq!(replays_of(&bus).await[&dead].len(), 1);
    assert_eq!(get(&bus, dead).await.status, EventStatus::Dlq);
    bus.shutdown().await.unwrap();
}

pub async fn a_dry_run_reports_and_changes_nothing(h: &Harness) {
    let (bus, _seen) = order_bus(h).await;
    let start = bus.clock().now();
    for i in 0..7u64 {
        bus.publish("order.created", &i).await.unwrap();
    }
    for i in 0..3u64 {
        bus.publish("order.paid", &i).await.unwrap();
    }
    let before = all_events(&bus).await;
    let ops_before = bus.operations().list(None, None, 100).await.unwrap();
    let replays = bus.replays();
    let mut pages = Vec::new();
    let report = replays
        .dry_run(
            &ReplayRequest::new(ReplaySelection::range(start, None)),
            &ReplayHooks::new().filter(|e| e.payload != "0"),
            |read| pages.push(read),
        )
        .await
        .unwrap();
    assert_eq!(report.count, 8);
    assert_eq!(
        report.skipped, 2,
        "the filter refused payload 0 of each type"
    );
    assert_eq!(report.by_type["order.created"], 6);
    assert_eq!(report.by_type["order.paid"], 2);
    assert_eq!(report.samples.len(), 8);
    assert_eq!(pages.last(), Some(&10));
    assert_eq!(
        all_events(&bus).await,
        before,
        "no event written or changed"
    );
    assert_eq!(
        bus.operations().list(None, None, 100).await.unwrap(),
        ops_before
    );
    bus.shutdown().await.unwrap();
}

pub async fn the_selection_is_frozen_at_submit(h: &Harness) {
    let (bus, _seen) = order_bus(h).await;
    let start = bus.clock().now();
    for i in 0..4u64 {
        bus.publish("order.created", &i).await.unwrap();
    }
    let replays = bus.replays();
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(start, None)),
            &ann(),
        )
        .await
        .unwrap();
    assert_eq!(op.total, 4);
    // Published after the submit, within the range's open end: not in the selection.
    h.advance(MS);
    let late = bus.publish("order.created", &50u64).await.unwrap();
    let done = replays
        .run(&op.id, &options("r", 1), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(
        (done.processed, done.status),
        (4, OperationStatus::Completed)
    );
    let made = replays_of(&bus).await;
    assert_eq!(made.len(), 4);
    assert!(!made.contains_key(&late));
    // Nor were the replay's own events swept in (replays of replays).
    assert!(made.values().flatten().all(|e| !made.contains_key(&e.id)));
    bus.shutdown().await.unwrap();
}

pub async fn bad_replay_requests_are_refused(h: &Harness) {
    let bus = h.bus().await;
    let replays = bus.replays();
    let cases = [
        ReplayRequest::new(ReplaySelection::default()),
        ReplayRequest::new(ReplaySelection::range(Timestamp(0), None).types(["bad type"])),
        ReplayRequest::new(ReplaySelection::range(Timestamp(0), None)).rate_limit(0),
    ];
    for request in &cases {
        let e = replays.submit(request, &ann()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{request:?}: {e}");
    }
    let e = replays
        .preview(&ReplaySelection::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(
        bus.operations()
            .list(None, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let missing = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        replays.get(&missing).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        replays.cancel(&missing).await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // An empty selection completes at once, announced, with nothing replayed.
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(bus.clock().now(), None)),
            &ann(),
        )
        .await
        .unwrap();
    let done = replays
        .run(&op.id, &options("r", 10), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!(
        (done.status, done.processed, done.total),
        (OperationStatus::Completed, 0, 0)
    );
    assert_eq!(of_type(&bus, COMPLETED).await.len(), 1);
    // An empty range (`from` at or after `to`) is a selection of nothing, not an error.
    bus.publish("order.placed", &serde_json::json!({}))
        .await
        .unwrap();
    let now = bus.clock().now();
    let empty = ReplaySelection::range(now, Some(Timestamp(now.0 - 1)));
    assert_eq!(replays.preview(&empty).await.unwrap().count, 0);
    let op = replays
        .submit(&ReplayRequest::new(empty), &ann())
        .await
        .unwrap();
    let done = replays
        .run(&op.id, &options("r", 10), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    assert_eq!((done.status, done.total), (OperationStatus::Completed, 0));
    bus.shutdown().await.unwrap();
}

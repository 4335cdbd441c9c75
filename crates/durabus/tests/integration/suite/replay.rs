//! Replay: selections (time range, ids, types, statuses), re-published events carrying
//! `replayOf`, dry runs, the frozen selection, the rate limit on the injected clock, cancel,
//! a kill mid-replay resumed exactly once, handler replays, the started/completed events.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use durabus::replay::{COMPLETED, REPLAY_OF, REPLAY_OPERATION, STARTED};
use durabus::{
    ErrorKind, Event, EventBus, EventId, EventStatus, OperationStatus, ReplayHooks, ReplayRequest,
    ReplaySelection, RunOptions, SubscribeOptions, Timestamp,
};

use super::dead_letters::ann;
use crate::support::*;

/// Every stored event, system ones included, oldest first.
async fn all_events(bus: &EventBus) -> Vec<Event> {
    let store = bus.store();
    let every = ReplaySelection {
        all: true,
        types: vec!["*".into(), "system.*".into()],
        ..ReplaySelection::default()
    };
    let bound = store.walk_bound(bus.clock().now()).await.unwrap();
    store
        .walk(&every, &bound, &Default::default(), 100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

/// The re-published events, by the id of the event they replay.
async fn replays_of(bus: &EventBus) -> HashMap<EventId, Vec<Event>> {
    let mut out: HashMap<EventId, Vec<Event>> = HashMap::new();
    for e in all_events(bus).await {
        if let Some(of) = e.metadata.get(REPLAY_OF) {
            out.entry(of.parse().unwrap()).or_default().push(e);
        }
    }
    out
}

/// Events of `event_type`, oldest first.
async fn of_type(bus: &EventBus, event_type: &str) -> Vec<Event> {
    all_events(bus)
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

fn options(holder: &str, chunk: usize) -> RunOptions {
    RunOptions {
        chunk: Some(chunk),
        holder: holder.into(),
        ..RunOptions::default()
    }
}

/// A bus whose `order.*` handler records the payloads it sees.
async fn order_bus(h: &Harness) -> (EventBus, Seen) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "order.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                let tag = match e.metadata.get(REPLAY_OF) {
                    Some(_) => format!("replay {}", e.payload),
                    None => format!("live {}", e.payload),
                };
                s.push(tag);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    (bus, seen)
}

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

    // Everything an application published, and not the bus's own system.dead_letter event.
    let all = count(ReplaySelection::range(start, None)).await;
    assert_eq!(all.count, 4, "{:?}", all.by_type);
    let system = count(ReplaySelection::range(start, None).types(["system.*"])).await;
    assert_eq!(system.count, 1);

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

pub async fn bad_replay_requests_are_refused(h: &Harness) {
    let bus = h.bus().await;
    let replays = bus.replays();
    let cases = [
        ReplayRequest::new(ReplaySelection::default()),
        ReplayRequest::new(ReplaySelection::range(Timestamp(5), Some(Timestamp(5)))),
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

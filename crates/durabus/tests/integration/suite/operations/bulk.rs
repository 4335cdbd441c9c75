//! Bulk dead-letter actions as operations: frozen selections, chunks done once across a kill, cancel between chunks.

use super::*;

pub async fn a_bulk_action_previews_freezes_its_selection_and_finishes(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    let mut before = Vec::new();
    for i in 0..5u64 {
        before.push(bus.publish("pay.charge", &i).await.unwrap());
    }
    let request = BulkRequest {
        filter: pay(Some(DeadLetterStatus::Pending)),
        action: Action::Retry,
        all: false,
    };
    let preview = dl.preview(&request.filter).await.unwrap();
    assert_eq!(preview.count, 5);
    assert_eq!(preview.samples.len(), 5);
    assert_eq!(preview.samples[0].event_id, before[4], "newest first");
    let op = dl.submit(&request, &ann()).await.unwrap();
    assert_eq!(op.status, OperationStatus::Pending);
    assert_eq!(op.total, 5);
    assert_eq!(op.kind.as_str(), "dead_letters.retry");
    assert_eq!(op.actor, ann());
    // Dead letters that arrive after the submit are not in the selection.
    let after = bus.publish("pay.charge", &99u64).await.unwrap();
    let ops = bus.operations();
    let mut seen = Vec::new();
    let done = ops
        .run(&op.id, &options("runner-a", 2), |o| seen.push(o.processed))
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped, done.errors), (5, 0, 0));
    assert!(done.finished_at.is_some());
    assert_eq!(seen.first(), Some(&0));
    assert!(
        seen.windows(2).all(|w| w[0] <= w[1]),
        "progress grows: {seen:?}"
    );
    for id in &before {
        let d = dl.get(*id).await.unwrap();
        assert_eq!(
            (d.status, d.manual_retry_count),
            (DeadLetterStatus::Retrying, 1)
        );
    }
    assert_eq!(
        dl.get(after).await.unwrap().status,
        DeadLetterStatus::Pending,
        "created after the submit"
    );
    // Running a finished operation again changes nothing.
    let again = ops
        .run(&op.id, &options("runner-b", 2), |_| {})
        .await
        .unwrap();
    assert_eq!(again.processed, 5);
    // An empty filter needs `all`; a resolve needs a note.
    let everything = BulkRequest {
        filter: DeadLetterFilter::default(),
        action: Action::Abandon { note: None },
        all: false,
    };
    assert_eq!(
        dl.submit(&everything, &ann()).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    // A worker picks up the five retried events: their rounds are under way.
    let held: Vec<durabus::EventId> = bus
        .store()
        .claim_due(h.clock.now(), 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.id)
        .collect();
    assert!(before.iter().all(|id| held.contains(id)), "{held:?}");
    let all = dl
        .submit(
            &BulkRequest {
                all: true,
                ..everything
            },
            &ann(),
        )
        .await
        .unwrap();
    let all = ops
        .run(&all.id, &options("runner-a", 10), |_| {})
        .await
        .unwrap();
    // The five being retried are skipped (their rounds are under way), the sixth abandoned.
    assert_eq!((all.processed, all.skipped), (1, 5));
    bus.store().release(held, h.clock.now()).await.unwrap();
    assert_eq!(
        dl.get(after).await.unwrap().status,
        DeadLetterStatus::Abandoned
    );
    let no_note = BulkRequest {
        filter: pay(None),
        action: Action::Resolve { note: "".into() },
        all: false,
    };
    assert_eq!(
        dl.submit(&no_note, &ann()).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    let listed = ops.list(None, None, 10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, all.id, "newest first");
    bus.shutdown().await.unwrap();
}

pub async fn a_bulk_run_killed_mid_way_resumes_without_doing_a_chunk_twice(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    let mut ids = Vec::new();
    for i in 0..7u64 {
        ids.push(bus.publish("pay.charge", &i).await.unwrap());
    }
    let op = dl
        .submit(
            &BulkRequest {
                filter: pay(None),
                action: Action::Retry,
                all: false,
            },
            &ann(),
        )
        .await
        .unwrap();
    // Runner A takes it, does one chunk of 3, and dies (no release, its lease stays).
    let store = bus.store();
    let lease = Duration::from_secs(30);
    store
        .operation_claim(&op.id, "runner-a", lease, h.clock.now())
        .await
        .unwrap()
        .expect("claimed");
    let first = chunk(&store, &op.id, "runner-a", 3, h.clock.now())
        .await
        .unwrap();
    let written = first.operation.expect("the chunk's progress");
    assert_eq!(
        (first.applied, written.processed, written.status),
        (3, 3, OperationStatus::Running)
    );
    // Runner B cannot take it while A's lease runs.
    let ops = bus.operations();
    let busy = ops
        .run(&op.id, &options("runner-b", 3), |_| {})
        .await
        .unwrap_err();
    assert_eq!(busy.kind(), ErrorKind::Conflict);
    // A's chunks are refused once B has taken over.
    h.advance(lease + Duration::from_secs(1));
    let done = ops
        .run(&op.id, &options("runner-b", 3), |_| {})
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped, done.errors), (7, 0, 0));
    for id in &ids {
        assert_eq!(
            dl.get(*id).await.unwrap().manual_retry_count,
            1,
            "each retried exactly once"
        );
    }
    let stale = chunk(&store, &op.id, "runner-a", 3, h.clock.now())
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::Conflict);
    let after = store.operation_get(&op.id).await.unwrap().unwrap();
    assert_eq!(
        (after.processed, after.status),
        (7, OperationStatus::Completed),
        "a refused chunk writes nothing"
    );
    bus.shutdown().await.unwrap();
}

pub async fn an_operation_is_cancelled_between_chunks(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    for i in 0..6u64 {
        bus.publish("pay.charge", &i).await.unwrap();
    }
    let request = BulkRequest {
        filter: pay(None),
        action: Action::Abandon { note: None },
        all: false,
    };
    let ops = bus.operations();
    // Not started: cancelled at once.
    let waiting = dl.submit(&request, &ann()).await.unwrap();
    let cancelled = ops.cancel(&waiting.id).await.unwrap();
    assert_eq!(cancelled.status, OperationStatus::Cancelled);
    assert_eq!(
        ops.cancel(&waiting.id).await.unwrap_err().kind(),
        ErrorKind::Conflict,
        "a finished operation cannot be cancelled"
    );
    assert_eq!(
        ops.cancel("0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70")
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    // Running: it stops at the next chunk, the first chunk's work done.
    let op = dl.submit(&request, &ann()).await.unwrap();
    let store = bus.store();
    let lease = Duration::from_secs(30);
    store
        .operation_claim(&op.id, "runner", lease, h.clock.now())
        .await
        .unwrap();
    chunk(&store, &op.id, "runner", 2, h.clock.now())
        .await
        .unwrap();
    assert_eq!(
        ops.cancel(&op.id).await.unwrap().status,
        OperationStatus::Running
    );
    let ended = ops
        .run(&op.id, &options("runner", 2), |_| {})
        .await
        .unwrap();
    assert_eq!(ended.status, OperationStatus::Cancelled);
    assert_eq!(ended.processed, 2);
    let abandoned = dl
        .list(
            DeadLetterFilter {
                status: vec![DeadLetterStatus::Abandoned],
                ..DeadLetterFilter::default()
            },
            durabus::Keyset::default(),
        )
        .await
        .unwrap();
    assert_eq!(abandoned.items.len(), 2);
    bus.shutdown().await.unwrap();
}

pub async fn a_started_bus_runs_submitted_operations_itself(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "pay.*",
        |_e: durabus::Event| async { Err("no".into()) },
        durabus::SubscribeOptions::default()
            .retry(durabus::RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    for i in 0..3u64 {
        bus.publish("pay.charge", &i).await.unwrap();
    }
    let op = bus
        .dead_letters()
        .submit(
            &BulkRequest {
                filter: pay(None),
                action: Action::Resolve {
                    note: "known outage".into(),
                },
                all: false,
            },
            &ann(),
        )
        .await
        .unwrap();
    bus.start().await.unwrap();
    let done = eventually("the bus to run the operation", || {
        let ops = bus.operations();
        let id = op.id.clone();
        async move {
            ops.get(&id)
                .await
                .ok()
                .filter(|o| o.status == OperationStatus::Completed)
        }
    })
    .await;
    assert_eq!(done.processed, 3);
    bus.shutdown().await.unwrap();
}

/// Dead letters from `n` failing payments.
async fn dead_letters(bus: &durabus::EventBus, n: u64) {
    for i in 0..n {
        bus.publish("pay.charge", &i).await.unwrap();
    }
    let count = bus.dead_letters().preview(&pay(None)).await.unwrap().count;
    assert_eq!(count, n);
}

/// Runs a bulk retry of every payment's dead letter with chunks sized by `pace`; returns the
/// rows of each chunk as the progress showed them, after checking each record was retried once.
async fn paced_retry(h: &Harness, n: u64, pace: durabus::PaceConfig) -> Vec<u64> {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    dead_letters(&bus, n).await;
    let request = BulkRequest {
        filter: pay(None),
        action: Action::Retry,
        all: false,
    };
    let op = bus.dead_letters().submit(&request, &ann()).await.unwrap();
    let options = RunOptions {
        pace: Some(pace),
        holder: "runner".into(),
        ..RunOptions::default()
    };
    let mut seen = vec![0];
    let done = bus
        .operations()
        .run(&op.id, &options, |o| seen.push(o.processed))
        .await
        .unwrap();
    assert_eq!(done.status, OperationStatus::Completed);
    assert_eq!((done.processed, done.skipped), (n, 0));
    let retried = bus
        .dead_letters()
        .list(pay(None), Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(retried.len() as u64, n);
    assert!(
        retried.iter().all(|d| d.manual_retry_count == 1),
        "each record retried once, whatever the chunk sizes"
    );
    bus.shutdown().await.unwrap();
    seen.windows(2)
        .map(|w| w[1] - w[0])
        .filter(|d| *d > 0)
        .collect()
}

pub async fn a_bulk_runs_chunks_grow_while_each_is_quick(h: &Harness) {
    // A target no chunk reaches: each doubles its size, up to the ceiling.
    let pace = durabus::PaceConfig {
        start: 2,
        min: 1,
        max: 8,
        target: Duration::from_secs(3_600),
    };
    assert_eq!(paced_retry(h, 30, pace).await, [2, 4, 8, 8, 8]);
}

pub async fn a_bulk_runs_chunks_shrink_to_the_floor_while_each_is_slow(h: &Harness) {
    // A target every chunk misses: the next is as small as the floor allows.
    let pace = durabus::PaceConfig {
        start: 9,
        min: 4,
        max: 100,
        target: Duration::ZERO,
    };
    assert_eq!(paced_retry(h, 25, pace).await, [9, 4, 4, 4, 4]);
}

//! The store's calls under the runner: a batch that passes over what left its selection, a refused chunk that writes nothing, open operations taken by the rules; jobs once per tick.

use super::*;

pub async fn a_batch_passes_over_records_that_left_its_selection(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    let (a, b) = (
        bus.publish("pay.charge", &1u64).await.unwrap(),
        bus.publish("pay.charge", &2u64).await.unwrap(),
    );
    // Both were selected as pending; then an operator abandons one before the batch runs.
    dl.abandon(b, Some("gave up"), &ann()).await.unwrap();
    let store = bus.store();
    let batch = durabus::ActBatch {
        still_matching: Some(pay(Some(DeadLetterStatus::Pending))),
        ..durabus::ActBatch::new(vec![a, b, durabus::EventId::new()], Action::Retry, ann())
    };
    let report = store.dlq_act(batch, h.clock.now()).await.unwrap();
    assert_eq!(report.applied, 1);
    let skipped: Vec<_> = report
        .skipped
        .iter()
        .map(|(id, e)| (*id, e.kind()))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped.contains(&(b, ErrorKind::Conflict)), "{skipped:?}");
    assert!(
        skipped.iter().any(|(_, k)| *k == ErrorKind::NotFound),
        "{skipped:?}"
    );
    let abandoned = dl.get(b).await.unwrap();
    assert_eq!(
        (abandoned.status, abandoned.manual_retry_count),
        (DeadLetterStatus::Abandoned, 0),
        "passed over, not retried"
    );
    assert_eq!(dl.get(a).await.unwrap().manual_retry_count, 1);
    bus.shutdown().await.unwrap();
}

pub async fn a_chunk_refused_by_its_operation_writes_none_of_its_actions(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    for i in 0..4u64 {
        bus.publish("pay.charge", &i).await.unwrap();
    }
    let request = BulkRequest {
        filter: pay(None),
        action: Action::Abandon { note: None },
        all: false,
    };
    let op = dl.submit(&request, &ann()).await.unwrap();
    let store = bus.store();
    // Not claimed by "nobody": its chunk is refused and its actions rolled back.
    let refused = chunk(&store, &op.id, "nobody", 2, h.clock.now())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Conflict);
    // Claimed, but a chunk read at a cursor another write has moved past is refused too.
    store
        .operation_claim(&op.id, "runner", Duration::from_secs(30), h.clock.now())
        .await
        .unwrap()
        .expect("claimed");
    let params: durabus::dlq::BulkParams = serde_json::from_value(op.params.clone()).unwrap();
    let rows = store
        .dlq_select(&params.filter, 0, op.bound, 2)
        .await
        .unwrap();
    chunk(&store, &op.id, "runner", 2, h.clock.now())
        .await
        .unwrap();
    let stale = durabus::ActBatch {
        chunk: Some(durabus::ChunkWrite {
            operation: op.id.clone(),
            holder: "runner".into(),
            lease: Duration::from_secs(30),
            advance: durabus::operation::Advance {
                cursor: rows[1].1,
                expect_cursor: Some((0, String::new())),
                ..Default::default()
            },
        }),
        ..durabus::ActBatch::new(
            rows.iter().map(|r| r.0).collect(),
            Action::Resolve {
                note: "twice".into(),
            },
            ann(),
        )
    };
    let e = store.dlq_act(stale, h.clock.now()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Conflict);
    for (id, _) in &rows {
        assert_eq!(
            dl.get(*id).await.unwrap().status,
            DeadLetterStatus::Abandoned,
            "the refused chunk's resolves were rolled back"
        );
    }
    let after = store.operation_get(&op.id).await.unwrap().unwrap();
    assert_eq!((after.processed, after.cursor), (2, rows[1].1));
    bus.shutdown().await.unwrap();
}

pub async fn open_operations_are_listed_and_taken_by_the_rules(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let dl = bus.dead_letters();
    bus.publish("pay.charge", &1u64).await.unwrap();
    let request = BulkRequest {
        filter: pay(None),
        action: Action::Retry,
        all: false,
    };
    let (first, second) = (
        dl.submit(&request, &ann()).await.unwrap(),
        dl.submit(&request, &ann()).await.unwrap(),
    );
    let ops = bus.operations();
    ops.cancel(&second.id).await.unwrap();
    let store = bus.store();
    let open = store.operation_open(10).await.unwrap();
    assert_eq!(
        open.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(),
        vec![first.id.as_str()],
        "a cancelled one is not open"
    );
    let lease = Duration::from_secs(30);
    let held = store
        .operation_claim(&first.id, "a", lease, h.clock.now())
        .await
        .unwrap()
        .expect("claimed");
    assert_eq!(held.holder.as_deref(), Some("a"));
    assert_eq!(held.lease_expires_at, Some(h.clock.now().plus(lease)));
    assert!(
        ops.claimable().await.unwrap().is_empty(),
        "held by a live runner"
    );
    assert!(
        store
            .operation_claim(&first.id, "b", lease, h.clock.now())
            .await
            .unwrap()
            .is_none()
    );
    h.advance(lease);
    assert_eq!(ops.claimable().await.unwrap().len(), 1, "its lease ran out");
    let taken = store
        .operation_claim(&first.id, "b", lease, h.clock.now())
        .await
        .unwrap()
        .expect("taken over");
    assert_eq!(taken.holder.as_deref(), Some("b"));
    bus.shutdown().await.unwrap();
}

pub async fn jobs_run_once_per_tick_and_are_skipped_while_running(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let tick = now;
    let ttl = Duration::from_secs(600);
    let job = "cleanup-history";
    assert_eq!(
        store
            .job_begin(job, Some(tick), "a", ttl, now)
            .await
            .unwrap(),
        JobStart::Started
    );
    assert_eq!(
        store
            .job_begin(job, Some(tick), "b", ttl, now)
            .await
            .unwrap(),
        JobStart::AlreadyRan,
        "one run per tick"
    );
    let next = tick.plus(Duration::from_secs(60));
    assert_eq!(
        store
            .job_begin(job, Some(next), "b", ttl, next)
            .await
            .unwrap(),
        JobStart::Busy,
        "the previous run is still going: skipped, not stacked"
    );
    assert_eq!(
        store
            .job_begin(job, Some(next), "c", ttl, next)
            .await
            .unwrap(),
        JobStart::AlreadyRan,
        "the skipped tick is not run later either"
    );
    assert_eq!(
        store.job_begin(job, None, "b", ttl, next).await.unwrap(),
        JobStart::Busy,
        "nor by hand"
    );
    store.job_end(job, "a", "ok", "done", next).await.unwrap();
    let later = next.plus(Duration::from_secs(60));
    assert_eq!(
        store
            .job_begin(job, Some(later), "b", ttl, later)
            .await
            .unwrap(),
        JobStart::Started
    );
    // A run whose process died is taken over once its lock has run out.
    let much_later = later.plus(ttl).plus(Duration::from_secs(60));
    assert_eq!(
        store
            .job_begin(job, Some(much_later), "c", ttl, much_later)
            .await
            .unwrap(),
        JobStart::Started
    );
    let rows = store.job_list().await.unwrap();
    let row = rows.iter().find(|r| r.name == job).unwrap();
    assert_eq!((row.runs, row.skipped), (3, 1));
    assert_eq!(row.running_by.as_deref(), Some("c"));
    assert_eq!(row.last_status.as_deref(), Some("ok"));
    store.close().await.unwrap();
    // Through the scheduler: a run by hand while one is going elsewhere is skipped.
    let bus = h.bus().await;
    let busy = bus.scheduler().unwrap().run_now(job).await.unwrap();
    assert_eq!(busy.status, "skipped");
    let unknown = bus.scheduler().unwrap().run_now("nope").await.unwrap_err();
    assert_eq!(unknown.kind(), ErrorKind::NotFound);
    let listed = bus.scheduler().unwrap().jobs().await.unwrap();
    assert_eq!(listed.len(), durabus::JOBS.len());
    assert!(listed.iter().all(|j| j.next_run.is_some()));
    bus.shutdown().await.unwrap();
}

//! Bulk dead-letter operations (a frozen selection, chunks, resume, cancel) and scheduled jobs
//! (once per tick, skipped while running).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use durabus::{
    Action, BulkRequest, DeadLetterFilter, DeadLetterStatus, ErrorKind, JobStart, OperationStatus,
    RunOptions,
};

use super::dead_letters::{ann, paying_bus};
use crate::support::*;

fn pay(status: Option<DeadLetterStatus>) -> DeadLetterFilter {
    DeadLetterFilter {
        event_type: Some("pay.*".into()),
        status: status.into_iter().collect(),
        ..DeadLetterFilter::default()
    }
}

/// One chunk of bulk operation `op` as runner `holder` would write it, by the store's calls
/// alone: the next `n` records of its selection, acted on with its progress in one
/// transaction. A runner that does this and dies holds the operation until its lease runs out.
async fn chunk(
    store: &Arc<dyn durabus::Store>,
    op_id: &str,
    holder: &str,
    n: usize,
    now: durabus::Timestamp,
) -> durabus::Result<durabus::ActReport> {
    let op = store.operation_get(op_id).await?.expect("the operation");
    let params: durabus::dlq::BulkParams = serde_json::from_value(op.params.clone()).unwrap();
    let rows = store
        .dlq_select(&params.filter, op.cursor, op.bound, n)
        .await?;
    let finished = rows.len() < n;
    let cursor = if finished {
        op.bound
    } else {
        rows.last().map_or(op.cursor, |r| r.1)
    };
    let batch = durabus::ActBatch {
        ids: rows.iter().map(|r| r.0).collect(),
        action: params.action,
        actor: op.actor.clone(),
        still_matching: Some(params.filter),
        read_back: false,
        chunk: Some(durabus::ChunkWrite {
            operation: op.id.clone(),
            holder: holder.into(),
            lease: Duration::from_secs(30),
            advance: durabus::operation::Advance {
                cursor,
                finish: finished.then_some(OperationStatus::Completed),
                expect_cursor: Some((op.cursor, op.cursor_key.clone())),
                ..Default::default()
            },
        }),
    };
    store.dlq_act(batch, now).await
}

fn options(holder: &str, chunk: usize) -> RunOptions {
    RunOptions {
        chunk: Some(chunk),
        holder: holder.into(),
        ..RunOptions::default()
    }
}

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
    // The five being retried are skipped (their status does not allow it), the sixth abandoned.
    assert_eq!((all.processed, all.skipped), (1, 5));
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
    assert_eq!(listed.len(), 4);
    assert!(listed.iter().all(|j| j.next_run.is_some()));
    bus.shutdown().await.unwrap();
}

//! Leases, fencing and heartbeats.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_reclaimed_and_the_stale_holder_is_fenced_off() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    // A lease of 20 s: a claim that waits a quarter of its lease for a connection counts the
    // lease from when it got one, and 5 s of waiting is beyond any loaded test machine.
    let a = leasing(&schema, Duration::from_secs(20)).await;
    let b = leasing(&schema, Duration::from_secs(20)).await;
    let id = claimed(&a, &clock, "x.slow").await;
    // Within the lease nobody else gets it.
    clock.advance(Duration::from_millis(19_900));
    assert!(b.claim_due(clock.now(), 10).await.unwrap().is_empty());
    // A stops renewing (stalled or dead): after the lease, B takes it over, the interrupted
    // attempt counted.
    clock.advance(Duration::from_millis(200));
    assert_eq!(
        b.next_due().await.unwrap(),
        Some(clock.now().minus(Duration::from_millis(100)))
    );
    let taken = b.claim_due(clock.now(), 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, id);
    assert_eq!(taken[0].retry_count, 1);
    assert!(
        taken[0].errors[0].contains("interrupted"),
        "{:?}",
        taken[0].errors
    );
    assert!(
        taken[0].errors[0].contains(a.worker_id()),
        "{:?}",
        taken[0].errors
    );
    // A wakes up and reports success: refused, the row is B's.
    let done = |id| Outcome::Done {
        id,
        delivered: vec![],
    };
    assert!(!a.record(done(id), clock.now()).await.unwrap());
    assert_eq!(
        a.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Processing
    );
    assert!(b.record(done(id), clock.now()).await.unwrap());
    let stored = a.get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.status, EventStatus::Done);
    assert_eq!(stored.retry_count, 1);
    // In the event log, it is history like any completed event.
    let history = durabus::History::new(Arc::new(b));
    let listed = history
        .list(durabus::EventQuery {
            status: Some(EventStatus::Done),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    a.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_running_event_with_its_worker() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    let a = short_lease(&schema).await;
    let b = short_lease(&schema).await;
    assert_eq!(a.heartbeat_interval(), Duration::from_secs(1) / 3);
    let id = claimed(&a, &clock, "x.long").await;
    for _ in 0..5 {
        clock.advance(Duration::from_millis(800));
        a.heartbeat(clock.now()).await.unwrap();
        assert!(
            b.claim_due(clock.now(), 10).await.unwrap().is_empty(),
            "a renewed lease is not taken over"
        );
    }
    assert!(
        a.record(
            Outcome::Done {
                id,
                delivered: vec![]
            },
            clock.now()
        )
        .await
        .unwrap()
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_never_takes_back_an_event_it_is_still_delivering() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    let a = short_lease(&schema).await;
    let id = claimed(&a, &clock, "x.slow").await;
    // Its heartbeats failed and the lease ran out, but the delivery is still running here:
    // this process neither claims it again nor resets it at a start-up recovery...
    clock.advance(Duration::from_secs(5));
    assert!(a.claim_due(clock.now(), 10).await.unwrap().is_empty());
    assert_eq!(a.recover_processing(clock.now()).await.unwrap(), 0);
    // ...and its outcome counts, since nobody else took the event over.
    assert!(
        a.record(
            Outcome::Done {
                id,
                delivered: vec![]
            },
            clock.now()
        )
        .await
        .unwrap()
    );
    assert_eq!(
        a.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    a.close().await.unwrap();
    drop_schema(&schema).await;
}

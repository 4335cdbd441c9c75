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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_answered_late_counts_its_leases_from_when_it_returns() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    // A 40 ms lease: a claim that takes 10 ms or more to answer is late.
    let store = leasing(&schema, Duration::from_millis(40)).await;
    let e = NewEvent::new("x.late", &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    // Another session holds the table for 60 ms: the claim waits for it on the server, as a
    // claim held up in the network would, and its leases would be over when it returns.
    let admin = admin().await;
    let mut locker = admin.begin().await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "LOCK TABLE \"{schema}\".events IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *locker)
    .await
    .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        locker.commit().await.unwrap();
    });
    let claimed = store.claim_due(clock.now(), 10).await.unwrap();
    release.await.unwrap();
    assert_eq!(claimed.len(), 1, "the event is still this worker's");
    assert_eq!(claimed[0].id, id);
    let (expires,): (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT lease_expires_at FROM \"{schema}\".events WHERE id = $1"
    )))
    .bind(id.0)
    .fetch_one(&admin)
    .await
    .unwrap();
    // Renewed from when the answer came (60 ms or more after the claim's time), not from
    // the claim's time.
    let from_claim = expires - clock.now().as_millis();
    assert!(
        from_claim >= 40 + 60,
        "lease ends {from_claim} ms after the claim's time"
    );
    store.close().await.unwrap();
    admin.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_client_s_session_ends_after_a_lease() {
    if !pg_available().await {
        return;
    }
    // The server ends a session of the store's whose transaction idles, or whose client stops
    // acknowledging data, after a lease (within 2 s and 60 s), so a worker cut off inside a
    // transaction does not keep its events locked from the others.
    for (lease, idle, tcp) in [
        (1, "2s", "2000"),
        (30, "30s", "30000"),
        (300, "1min", "60000"),
    ] {
        let schema = unique_schema();
        let store = leasing(&schema, Duration::from_secs(lease)).await;
        for (setting, want) in [
            ("idle_in_transaction_session_timeout", idle),
            ("tcp_user_timeout", tcp),
        ] {
            let (value,): (String,) = sqlx::query_as("SELECT current_setting($1)")
                .bind(setting)
                .fetch_one(store.pool())
                .await
                .unwrap();
            assert_eq!(value, want, "{setting} with a {lease} s lease");
        }
        store.close().await.unwrap();
        drop_schema(&schema).await;
    }
}

/// A claimed row that does not decode (its JSON written by hand, say) is left out of the
/// claim and not held: the others are delivered, and once the row is mended it is claimed
/// again when its lease runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_leaves_out_a_row_it_cannot_read_and_returns_the_others() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    let a = leasing(&schema, Duration::from_secs(20)).await;
    let events: Vec<NewEvent> = (0..3)
        .map(|i| NewEvent::new("x.mixed", &i).unwrap())
        .collect();
    let ids: Vec<_> = events.iter().map(|e| e.id).collect();
    a.insert(events, InsertMode::Pending, clock.now())
        .await
        .unwrap();
    let admin = admin().await;
    let changed = sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE \"{schema}\".events SET metadata = 'not json' WHERE id = $1"
    )))
    .bind(ids[1].0)
    .execute(&admin)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(changed, 1);
    let claimed = a
        .claim_due(clock.now(), 10)
        .await
        .expect("one unreadable row does not fail the claim");
    let mut got: Vec<_> = claimed.iter().map(|e| e.id).collect();
    got.sort();
    assert_eq!(got, vec![ids[0], ids[2]]);
    // The others finish (the claim's lease token goes with them: until then the heartbeat
    // renews it for the whole claim). Mended, the left-out event comes back when its lease
    // runs out, the lost attempt counted.
    for id in [ids[0], ids[2]] {
        let done = Outcome::Done {
            id,
            delivered: vec![],
        };
        assert!(a.record(done, clock.now()).await.unwrap());
    }
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE \"{schema}\".events SET metadata = NULL WHERE id = $1"
    )))
    .bind(ids[1].0)
    .execute(&admin)
    .await
    .unwrap();
    clock.advance(Duration::from_millis(20_100));
    let again = a.claim_due(clock.now(), 10).await.unwrap();
    let back: Vec<_> = again.iter().map(|e| e.id).collect();
    assert_eq!(back, vec![ids[1]]);
    assert_eq!(again[0].retry_count, 1);
    a.close().await.unwrap();
    admin.close().await;
    drop_schema(&schema).await;
}

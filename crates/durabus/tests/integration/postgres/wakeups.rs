//! Wake-ups across processes (NOTIFY), claims that skip their flush, the outbox in the caller's transaction.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_elsewhere_wakes_an_idle_worker_through_notify() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let worker = listening_bus(&schema, &seen).await;
    // Another "process": its own store, pool and listener.
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    for i in 0..20 {
        let id = publisher.enqueue("x.ping", &i).await.unwrap();
        eventually("the idle worker to get the event", async || {
            seen.all().contains(&id.to_string())
        })
        .await;
    }
    assert_eq!(seen.len(), 20);
    publisher.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_in_the_same_process_wakes_its_own_idle_worker() {
    if !pg_available().await {
        return;
    }
    // The listener ignores the NOTIFY echo of its own store's inserts: the insert itself must
    // wake the dispatcher (its fallback poll is an hour), for lone publishes written on the
    // caller's task, for publishes gathered by the group-commit task and for large batches.
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = Arc::new(listening_bus(&schema, &seen).await);
    for i in 0..20 {
        let id = bus.enqueue("x.lone", &i).await.unwrap();
        eventually("the event published in this process", async || {
            seen.all().contains(&id.to_string())
        })
        .await;
    }
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let bus = bus.clone();
            tokio::spawn(async move { bus.enqueue("x.together", &i).await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    eventually("the concurrent publishes", async || seen.len() == 52).await;
    let batch: Vec<NewEvent> = (0..150)
        .map(|i| NewEvent::new("x.batch", &i).unwrap())
        .collect();
    bus.enqueue_batch(batch).await.unwrap();
    eventually("the batch", async || seen.len() == 202).await;
    bus.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_and_a_renewal_skip_their_flush_without_changing_the_sessions_setting() {
    if !pg_available().await {
        return;
    }
    // The application's pool, one connection: the claim runs on the very connection that is
    // asked afterwards.
    let schema = unique_schema();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg_url())
        .await
        .unwrap();
    let no_listener = PgOptions {
        listen: false,
        ..options(&schema)
    };
    let store = PgStore::from_pool(pool.clone(), no_listener).await.unwrap();
    let clock = ManualClock::new(durabus::Timestamp(1_000_000));
    let e = NewEvent::new("x.claimed", &1).unwrap();
    store
        .insert(vec![e.clone()], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    let claimed = store.claim_due(clock.now(), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, e.id);
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(setting, "on", "the claim's setting leaked into the session");
    // The claim committed: another connection sees the event held.
    let status: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT status FROM \"{schema}\".events WHERE id = $1"
    )))
    .bind(e.id.0)
    .fetch_one(&admin().await)
    .await
    .unwrap();
    assert_eq!(status, "processing");
    // A renewal skips its flush the same way: the lease moves, visibly to other connections,
    // and the session keeps its setting.
    let expiry = async || -> i64 {
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT lease_expires_at FROM \"{schema}\".events WHERE id = $1"
        )))
        .bind(e.id.0)
        .fetch_one(&admin().await)
        .await
        .unwrap()
    };
    let before = expiry().await;
    clock.advance(std::time::Duration::from_secs(5));
    store.heartbeat(clock.now()).await.unwrap();
    assert_eq!(
        expiry().await,
        before + 5_000,
        "the renewal moved the lease"
    );
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        setting, "on",
        "the renewal's setting leaked into the session"
    );
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_outbox_publish_commits_or_rolls_back_with_the_callers_transaction() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = listening_bus(&schema, &seen).await;
    let outbox = bus.pg_outbox().unwrap();
    let pool = admin().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".orders (id int PRIMARY KEY)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let insert_order = format!("INSERT INTO \"{schema}\".orders (id) VALUES ($1)");

    let mut tx = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert_order.clone()))
        .bind(1)
        .execute(&mut *tx)
        .await
        .unwrap();
    let lost = outbox
        .publish(&mut tx, "x.order", &1, durabus::Timestamp::now())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert_order))
        .bind(2)
        .execute(&mut *tx)
        .await
        .unwrap();
    let event = NewEvent::new("x.order", &2).unwrap();
    let kept = event.id;
    let ids = outbox
        .publish_batch(&mut tx, vec![event.clone()], durabus::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(ids, vec![kept]);
    assert!(
        bus.store().get_event(kept).await.unwrap().is_none(),
        "not before commit"
    );
    tx.commit().await.unwrap();
    eventually("the committed event", async || {
        seen.all().contains(&kept.to_string())
    })
    .await;
    // The same id again, in a later transaction: stored and delivered once.
    let mut tx = pool.begin().await.unwrap();
    outbox
        .publish_batch(&mut tx, vec![event], durabus::Timestamp::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Bad input is refused before anything is written.
    let mut tx = pool.begin().await.unwrap();
    assert!(matches!(
        outbox
            .publish(&mut tx, "bad type!", &1, durabus::Timestamp::now())
            .await,
        Err(Error::InvalidEventType(..))
    ));
    tx.rollback().await.unwrap();
    bus.shutdown().await.unwrap();
    assert_eq!(seen.all(), vec![kept.to_string()]);
    let store = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    assert!(store.get_event(lost).await.unwrap().is_none());
    assert_eq!(
        store.get_event(kept).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_outbox_publishes_are_counted_and_snapshotted_like_every_other_publish() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let bus = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .payload_snapshots(true)
        .build()
        .await
        .unwrap();
    let outbox = bus.pg_outbox().unwrap();
    let pool = admin().await;
    let mut tx = pool.begin().await.unwrap();
    let id = outbox
        .publish(
            &mut tx,
            "x.order",
            &serde_json::json!({"order": 1}),
            durabus::Timestamp::now(),
        )
        .await
        .unwrap();
    let more = vec![
        NewEvent::new("x.order", &2).unwrap(),
        NewEvent::new("x.paid", &3).unwrap(),
    ];
    let paid = more[1].id;
    outbox
        .publish_batch(&mut tx, more, durabus::Timestamp::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let s = crate::suite::telemetry::scrape(&bus).await;
    let published =
        |t| crate::suite::telemetry::num(&s, "durabus_events_published_total", &[("type", t)]);
    assert_eq!((published("x.order"), published("x.paid")), (2.0, 1.0));
    for id in [id, paid] {
        let snap = bus.payloads().get(id, "published").await.unwrap();
        assert!(snap.payload.is_some(), "{snap:?}");
    }
    bus.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

/// Publish options travel through the PostgreSQL outbox: scheduled with its priority in the
/// caller's transaction; a bad option fails the call and the transaction goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_outbox_event_can_be_delayed_and_prioritised() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = listening_bus(&schema, &seen).await;
    let outbox = bus.pg_outbox().unwrap();
    let pool = admin().await;
    let now = durabus::Timestamp::now();
    let mut tx = pool.begin().await.unwrap();
    let event = NewEvent::new("x.order", &1)
        .unwrap()
        .delay(Duration::from_secs(3600))
        .priority(-4);
    let id = event.id;
    outbox
        .publish_batch(&mut tx, vec![event], now)
        .await
        .unwrap();
    let bad = NewEvent::new("x.order", &2).unwrap().priority(101);
    let err = outbox
        .publish_batch(&mut tx, vec![bad], now)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), durabus::ErrorKind::InvalidInput);
    tx.commit().await.unwrap();
    let stored = bus.store().get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.status, durabus::EventStatus::Scheduled);
    assert_eq!(stored.priority, -4);
    assert_eq!(stored.deliver_at, Some(now.plus(Duration::from_secs(3600))));
    assert_eq!(stored.next_attempt_at, stored.deliver_at);
    // Not claimed before its time, claimed after it.
    assert!(bus.store().claim_due(now, 10).await.unwrap().is_empty());
    let later = now.plus(Duration::from_secs(3601));
    let mut got = bus.store().claim_due(later, 10).await.unwrap();
    if got.is_empty() {
        got = bus.store().claim_due(later, 10).await.unwrap();
    }
    assert_eq!(got.iter().map(|e| e.id).collect::<Vec<_>>(), vec![id]);
    bus.shutdown().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

/// A scheduled event published by another process reaches an idle worker whose fallback poll
/// is an hour: the publish's notification wakes it, it finds the event not yet due, and it
/// sleeps until the due time (a timer, not a poll). Never delivered before that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_event_from_another_process_is_delivered_at_its_time_without_polling() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let worker = listening_bus(&schema, &seen).await;
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .deliver(false)
        .build()
        .await
        .unwrap();
    let event = NewEvent::new("x.later", &1)
        .unwrap()
        .delay(Duration::from_millis(20));
    let id = event.id;
    publisher.enqueue_event(event).await.unwrap();
    let due = publisher
        .store()
        .get_event(id)
        .await
        .unwrap()
        .and_then(|e| e.deliver_at)
        .unwrap();
    eventually("the scheduled event", async || {
        seen.all().contains(&id.to_string())
    })
    .await;
    eventually("its outcome", async || {
        worker
            .store()
            .get_event(id)
            .await
            .unwrap()
            .map(|e| e.status)
            == Some(durabus::EventStatus::Done)
    })
    .await;
    let done = worker.store().get_event(id).await.unwrap().unwrap();
    assert!(done.updated_at >= due, "delivered before its time");
    publisher.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

/// A dedup key travels through the PostgreSQL outbox: taken in the caller's transaction,
/// given back when it rolls back; a second publish of the key in its window answers the
/// first id and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_outbox_dedup_key_is_taken_in_the_callers_transaction() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = listening_bus(&schema, &seen).await;
    let outbox = bus.pg_outbox().unwrap();
    let pool = admin().await;
    let now = durabus::Timestamp::now();
    let keyed = |n: i32| {
        NewEvent::new("x.order", &n)
            .unwrap()
            .dedup("order-1", Duration::from_secs(60))
    };
    let mut tx = pool.begin().await.unwrap();
    let dropped = outbox
        .publish_batch(&mut tx, vec![keyed(1)], now)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let first = outbox
        .publish_batch(&mut tx, vec![keyed(2), keyed(3)], now)
        .await
        .unwrap();
    assert_ne!(first[0], dropped[0], "a rolled-back publish holds no key");
    assert_eq!(
        first[1], first[0],
        "a key twice in one batch is stored once"
    );
    tx.commit().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let again = outbox
        .publish_batch(&mut tx, vec![keyed(4)], now)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(again, vec![first[0]]);
    let stored = bus
        .history()
        .list(durabus::EventQuery::default())
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, "2");
    // Ordering keys too: the second event of a key waits behind the first. Read on a bus that
    // delivers nothing: the listening one would handle the head and move the key on before
    // the rows are read.
    bus.shutdown().await.unwrap();
    let bus = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    let outbox = bus.pg_outbox().unwrap();
    let mut tx = pool.begin().await.unwrap();
    let steps = outbox
        .publish_batch(
            &mut tx,
            (0..2)
                .map(|n| NewEvent::new("x.step", &n).unwrap().ordering_key("p-1"))
                .collect(),
            now,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let first = bus.store().get_event(steps[0]).await.unwrap().unwrap();
    let second = bus.store().get_event(steps[1]).await.unwrap().unwrap();
    assert!(first.next_attempt_at.is_some(), "the head is due");
    assert_eq!(second.next_attempt_at, None, "the second waits for its key");
    bus.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

//! When the store writes outcomes slowly, a worker stops claiming instead of holding ever more
//! events (on PostgreSQL, each a lease its heartbeat rewrites). Here outcome writes are held
//! back by row locks each handler takes, for the test, in one transaction the test keeps open.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::{drop_schema, eventually, pg_available, pg_url, unique_schema};
use durabus::sqlx::{self, AssertSqlSafe};
use durabus::{Event, EventBus, NewEvent, PgOptions, SubscribeOptions};

/// Finished deliveries that may wait for their outcome write (`UNRECORDED_MAX` in
/// `dispatch/worker.rs`).
const UNRECORDED_MAX: usize = 1024;
const CONCURRENCY: usize = 16;
const CLAIM_BATCH: usize = 256;
const EVENTS: usize = 3000;

async fn count(pool: &sqlx::PgPool, sql: &str) -> usize {
    let n: i64 = sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap();
    usize::try_from(n).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stops_claiming_while_its_outcome_writes_wait() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&pg_url())
        .await
        .unwrap();
    let bus = EventBus::builder()
        .postgres_with(
            pg_url(),
            PgOptions {
                schema: schema.clone(),
                max_connections: 4,
                ..PgOptions::default()
            },
        )
        .concurrency(CONCURRENCY)
        .claim_batch(CLAIM_BATCH)
        .build()
        .await
        .unwrap();
    let locks = Arc::new(tokio::sync::Mutex::new(Some(admin.begin().await.unwrap())));
    let calls = Arc::new(AtomicUsize::new(0));
    let lock_row = format!("SELECT 1 FROM \"{schema}\".events WHERE id = $1 FOR UPDATE");
    {
        let (locks, calls) = (locks.clone(), calls.clone());
        bus.subscribe(
            "bp.*",
            move |e: Event| {
                let (locks, calls, lock_row) = (locks.clone(), calls.clone(), lock_row.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    if let Some(tx) = locks.lock().await.as_mut() {
                        sqlx::query(AssertSqlSafe(lock_row))
                            .bind(e.id.0)
                            .execute(&mut **tx)
                            .await?;
                    }
                    Ok(())
                }
            },
            SubscribeOptions::default(),
        )
        .await
        .unwrap();
    }
    for start in (0..EVENTS).step_by(1000) {
        let batch = (start..start + 1000)
            .map(|i| NewEvent::new("bp.x", &i).unwrap())
            .collect();
        bus.enqueue_batch(batch).await.unwrap();
    }
    bus.start().await.unwrap();

    // Every outcome write waits for a lock: the worker runs handlers until as many outcomes
    // wait as it allows, then claims nothing more.
    eventually("the handlers to reach the bound", || {
        let calls = calls.clone();
        async move { (calls.load(Ordering::SeqCst) >= UNRECORDED_MAX).then_some(()) }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(calls.load(Ordering::SeqCst), UNRECORDED_MAX);
    let held = count(
        &admin,
        &format!("SELECT count(*) FROM \"{schema}\".events WHERE status = 'processing'"),
    )
    .await;
    assert!(
        held <= UNRECORDED_MAX + CLAIM_BATCH + CONCURRENCY,
        "{held} events held while outcome writes waited"
    );

    // The locks go: every outcome is written, every event handled once.
    if let Some(tx) = locks.lock().await.take() {
        tx.rollback().await.unwrap();
    }
    let log = format!("SELECT count(*) FROM \"{schema}\".event_log");
    eventually("every event to be done", || {
        let (admin, log) = (admin.clone(), log.clone());
        async move { (count(&admin, &log).await == EVENTS).then_some(()) }
    })
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), EVENTS);
    bus.shutdown().await.unwrap();
    admin.close().await;
    drop_schema(&schema).await;
}

//! The events table's planner statistics kept fresh while a backlog builds.

use super::*;

/// How often `ANALYZE` has run on `schema`'s events table by hand (not by autovacuum).
async fn analyses(admin: &sqlx::PgPool, schema: &str) -> i64 {
    sqlx::query(
        "SELECT coalesce(analyze_count, 0) FROM pg_stat_user_tables
         WHERE schemaname = $1 AND relname = 'events'",
    )
    .bind(schema)
    .fetch_optional(admin)
    .await
    .unwrap()
    .map_or(0, |r| r.get::<i64, _>(0))
}

/// Waits up to 10 s for `schema`'s events table to have been analysed by hand.
async fn analysed(admin: &sqlx::PgPool, schema: &str) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if analyses(admin, schema).await > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_claim_analyses_the_events_table_and_one_short_of_full_does_not() {
    if !pg_available().await {
        return;
    }
    let admin = admin().await;
    let clock = ManualClock::default();
    // A claim that takes fewer events than it may: no backlog, no analysis.
    let quiet = unique_schema();
    let store = leasing(&quiet, Duration::from_secs(20)).await;
    let events: Vec<NewEvent> = (0..5)
        .map(|i| NewEvent::new("x.quiet", &i).unwrap())
        .collect();
    store
        .insert(events, InsertMode::Pending, clock.now())
        .await
        .unwrap();
    assert_eq!(store.claim_due(clock.now(), 10).await.unwrap().len(), 5);
    // A backlog: the claim comes back full, and the table is analysed.
    let busy = unique_schema();
    let store_b = leasing(&busy, Duration::from_secs(20)).await;
    let events: Vec<NewEvent> = (0..50)
        .map(|i| NewEvent::new("x.busy", &i).unwrap())
        .collect();
    store_b
        .insert(events, InsertMode::Pending, clock.now())
        .await
        .unwrap();
    assert_eq!(store_b.claim_due(clock.now(), 10).await.unwrap().len(), 10);
    assert!(
        analysed(&admin, &busy).await,
        "a full claim analysed the table"
    );
    // Once per interval: a second full claim right after starts no second analysis (given
    // 100 ms in which a task it started would have run).
    assert_eq!(store_b.claim_due(clock.now(), 10).await.unwrap().len(), 10);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(analyses(&admin, &busy).await, 1);
    assert_eq!(analyses(&admin, &quiet).await, 0, "no backlog, no analysis");
    store.close().await.unwrap();
    store_b.close().await.unwrap();
    drop_schema(&quiet).await;
    drop_schema(&busy).await;
}

/// Whether an `ANALYZE` of `schema`'s events table waits for a lock right now.
async fn analysis_waits(admin: &sqlx::PgPool, schema: &str) -> bool {
    sqlx::query_scalar::<_, bool>(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
         WHERE query LIKE 'ANALYZE ' || $1 || '.events%' AND wait_event_type = 'Lock')",
    )
    .bind(schema)
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_analysis_that_cannot_get_its_lock_gives_up_instead_of_waiting() {
    if !pg_available().await {
        return;
    }
    let admin = admin().await;
    let clock = ManualClock::default();
    let schema = unique_schema();
    let store = leasing(&schema, Duration::from_secs(20)).await;
    let events: Vec<NewEvent> = (0..50)
        .map(|i| NewEvent::new("x.locked", &i).unwrap())
        .collect();
    store
        .insert(events, InsertMode::Pending, clock.now())
        .await
        .unwrap();
    // Another session holds the lock an analysis needs (as autovacuum would).
    let mut holder = admin.begin().await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "LOCK TABLE {schema}.events IN SHARE UPDATE EXCLUSIVE MODE"
    )))
    .execute(&mut *holder)
    .await
    .unwrap();
    assert_eq!(store.claim_due(clock.now(), 10).await.unwrap().len(), 10);
    // The analysis starts, waits for the lock for its timeout at most, and gives up. Waiting
    // without a timeout, it would still wait when the 5 s below are up.
    let start = Instant::now();
    let mut seen_waiting = false;
    loop {
        let waits = analysis_waits(&admin, &schema).await;
        seen_waiting |= waits;
        if !waits && (seen_waiting || start.elapsed() > Duration::from_millis(500)) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the analysis still waits for the lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    holder.rollback().await.unwrap();
    // Given up, it does not run once the lock is free (nor does the claim path retry it within
    // the interval), and the store goes on claiming.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(analyses(&admin, &schema).await, 0);
    assert_eq!(store.claim_due(clock.now(), 10).await.unwrap().len(), 10);
    store.close().await.unwrap();
    drop_schema(&schema).await;
}

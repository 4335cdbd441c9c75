//! The server's clock: a bus on PostgreSQL reads the database server's time (its host's clock
//! corrected by the offset the store measures), so processes whose hosts' clocks disagree
//! still agree on leases, back-off and schedules. The server's clock is shifted here for one
//! pool by a `clock_timestamp()` of the test's own, found first on that pool's search path.

use super::*;

use durabus::SystemClock;

/// A pool whose `clock_timestamp()` reads `offset_s` seconds ahead of the real one, and the
/// schema holding that function (dropped by the caller).
async fn shifted_pool(offset_s: i64) -> (sqlx::PgPool, String) {
    let shift = unique_schema();
    let admin = sqlx::PgPool::connect(&pg_url()).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA \"{shift}\";
         CREATE FUNCTION \"{shift}\".clock_timestamp() RETURNS timestamptz LANGUAGE sql
             AS $$ SELECT pg_catalog.clock_timestamp() + interval '{offset_s} seconds' $$;"
    )))
    .execute(&admin)
    .await
    .unwrap();
    admin.close().await;
    let options: sqlx::postgres::PgConnectOptions = pg_url().parse().unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options.options([("search_path", format!("\"{shift}\",pg_catalog,public"))]))
        .await
        .unwrap();
    (pool, shift)
}

/// Milliseconds from the system clock to `clock`.
fn ahead_ms(clock: &dyn Clock) -> i64 {
    clock.now().as_millis() - SystemClock.now().as_millis()
}

/// Whether `ms` is `s` seconds, give or take one (the measurement, the test's own reads).
fn about(ms: i64, s: i64) -> bool {
    (ms - s * 1_000).abs() < 1_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_reads_the_servers_clock_unless_given_one() {
    if !pg_available().await {
        return;
    }
    // Same host as the server: no offset to speak of.
    let schema = unique_schema();
    let store = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    assert!(store.server_clock().offset_ms().abs() < 1_000);
    store.close().await.unwrap();
    drop_schema(&schema).await;

    // The server reads five minutes ahead of this host: so does the bus, and what it stores.
    let (pool, shift) = shifted_pool(300).await;
    let schema = unique_schema();
    let bus = EventBus::builder()
        .postgres_pool(pool.clone(), options(&schema))
        .build()
        .await
        .unwrap();
    let ahead = ahead_ms(bus.clock().as_ref());
    assert!(
        about(ahead, 300),
        "the bus reads the server's time: {ahead} ms"
    );
    let id = bus.enqueue("clock.stamped", &1).await.unwrap();
    let created = bus.store().get_event(id).await.unwrap().unwrap().created_at;
    let stamped = created.as_millis() - SystemClock.now().as_millis();
    assert!(
        about(stamped, 300),
        "stored on the server's time: {stamped} ms"
    );
    // The services built on the store alone read it too.
    let clock = durabus::store::clock_of(&bus.store());
    assert!(about(ahead_ms(clock.as_ref()), 300));
    bus.shutdown().await.unwrap();

    // A clock given to the builder is used as it reads.
    let manual = ManualClock::default();
    let bus = EventBus::builder()
        .postgres_pool(pool.clone(), options(&schema))
        .clock(Arc::new(manual.clone()))
        .build()
        .await
        .unwrap();
    assert_eq!(bus.clock().now(), manual.now());
    bus.shutdown().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
    drop_schema(&shift).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_heartbeat_follows_a_server_clock_that_moves() {
    if !pg_available().await {
        return;
    }
    let (pool, shift) = shifted_pool(-120).await;
    let schema = unique_schema();
    let store = PgStore::from_pool(
        pool.clone(),
        PgOptions {
            lease: Duration::from_millis(90),
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let clock = store.server_clock();
    assert!(about(clock.offset_ms(), -120), "{}", clock.offset_ms());
    // The server's clock is set forward (an NTP step on its host, say): the next beats see it.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE OR REPLACE FUNCTION \"{shift}\".clock_timestamp() RETURNS timestamptz LANGUAGE sql
             AS $$ SELECT pg_catalog.clock_timestamp() + interval '60 seconds' $$;"
    )))
    .execute(&pool)
    .await
    .unwrap();
    store.start_background(Arc::new(clock.clone()));
    crate::support::eventually("the heartbeat to measure the new offset", async || {
        about(clock.offset_ms(), 60).then_some(())
    })
    .await;
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
    drop_schema(&shift).await;
}

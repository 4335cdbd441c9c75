//! The pool's waiters: the bus's statements waiting for a connection, read from the pool and
//! scraped as `durabus_db_pool_waiters`.

use super::*;

/// The `durabus_db_pool_waiters` sample of a scrape's text.
fn waiters_in(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("durabus_db_pool_waiters "))
        .map(str::to_owned)
}

fn waiting(bus: &EventBus) -> u64 {
    match bus.store().backend() {
        durabus::store::Backend::Postgres(pg) => pg.pool_gauges().waiting,
        _ => unreachable!("a PostgreSQL bus"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_waiting_for_a_connection_are_counted_and_scraped() {
    if !pg_available().await {
        return;
    }
    // The application's pool, one connection, which the test holds.
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
    let clock = ManualClock::default();
    let bus = Arc::new(
        EventBus::builder()
            .postgres_pool(pool.clone(), no_listener)
            .clock(Arc::new(clock.clone()))
            .build()
            .await
            .unwrap(),
    );
    assert_eq!(waiting(&bus), 0);
    assert_eq!(
        waiters_in(&bus.metrics_text().await.unwrap()).as_deref(),
        Some("0")
    );

    let held = pool.acquire().await.unwrap();
    let publisher = bus.clone();
    let publish = tokio::spawn(async move { publisher.enqueue("x.waits", &1).await });
    crate::support::eventually("the publish to wait", async || {
        (waiting(&bus) == 1).then_some(())
    })
    .await;
    // A scrape past the gauges' refresh interval reads the store: it reads the pool before
    // its own statement, which then waits too.
    clock.advance(Duration::from_secs(3600));
    let scraper = bus.clone();
    let scrape = tokio::spawn(async move { scraper.metrics_text().await });
    crate::support::eventually("the scrape to wait", async || {
        (waiting(&bus) == 2).then_some(())
    })
    .await;
    // A waiter that gives up stops being counted.
    let querier = bus.clone();
    let gives_up =
        tokio::spawn(async move { querier.store().get_event(durabus::EventId::new()).await });
    crate::support::eventually("the query to wait", async || {
        (waiting(&bus) == 3).then_some(())
    })
    .await;
    gives_up.abort();
    crate::support::eventually("the aborted query to leave", async || {
        (waiting(&bus) == 2).then_some(())
    })
    .await;

    drop(held);
    let id = publish.await.unwrap().unwrap();
    let text = scrape.await.unwrap().unwrap();
    assert_eq!(waiters_in(&text).as_deref(), Some("1"), "{text}");
    assert_eq!(waiting(&bus), 0);
    assert!(bus.store().get_event(id).await.unwrap().is_some());
    Arc::try_unwrap(bus).ok().unwrap().shutdown().await.unwrap();
    drop_schema(&schema).await;
}

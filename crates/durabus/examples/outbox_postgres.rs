//! The transactional outbox on PostgreSQL: the application writes its order and the event in
//! one `sqlx` transaction on its own pool; a worker delivers only what was committed.
//!
//! Run with `cargo run -p durabus --features postgres --example outbox_postgres`; it uses
//! `DURABUS_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and a schema of
//! its own, dropped at the end.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use durabus::sqlx::{self, Row};
use durabus::{EventBus, EventStatus, PgOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DURABUS_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let schema = format!("outbox_example_{}", durabus::EventId::new().0.simple());
    let app = sqlx::postgres::PgPoolOptions::new().connect(&url).await?; // the application's pool
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id bigint PRIMARY KEY, item text NOT NULL)"
    )))
    .execute(&app)
    .await?;

    let bus = EventBus::builder()
        .postgres_with(
            &url,
            PgOptions {
                schema: schema.clone(),
                ..PgOptions::default()
            },
        )
        .build()
        .await?;
    bus.subscribe(
        "order.placed",
        |e: durabus::Event| async move {
            println!("handler: {}", e.payload);
            Ok(())
        },
        durabus::SubscribeOptions::default().name("shipping"),
    )
    .await?;
    bus.start().await?;
    let outbox = bus.pg_outbox()?;

    // Committed: the order and its event.
    let mut tx = app.begin().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.orders VALUES (1, 'teapot')"
    )))
    .execute(&mut *tx)
    .await?;
    let kept = outbox
        .publish(
            &mut tx,
            "order.placed",
            &serde_json::json!({ "order": 1 }),
            durabus::Timestamp::now(),
        )
        .await?;
    tx.commit().await?;
    // Rolled back: neither exists.
    let mut tx = app.begin().await?;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.orders VALUES (2, 'kettle')"
    )))
    .execute(&mut *tx)
    .await?;
    let dropped = outbox
        .publish(
            &mut tx,
            "order.placed",
            &serde_json::json!({ "order": 2 }),
            durabus::Timestamp::now(),
        )
        .await?;
    tx.rollback().await?;

    for _ in 0..100 {
        if bus.history().get(kept).await?.status == EventStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let orders: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.orders"
    )))
    .fetch_one(&app)
    .await?
    .try_get(0)?;
    let delivered = bus.history().get(kept).await?.status == EventStatus::Done;
    let rolled_back_stored = bus.history().get(dropped).await.is_ok();
    println!(
        "orders stored: {orders}; committed event delivered: {delivered}; rolled-back event stored: {rolled_back_stored}"
    );
    assert!(orders == 1 && delivered && !rolled_back_stored);

    bus.shutdown().await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&app)
        .await?;
    Ok(())
}

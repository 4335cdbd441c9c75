//! The transactional outbox: an application writes its business row and an event in one
//! SQLite transaction, through its own connection. One transaction commits, one rolls back;
//! only the committed event is delivered.
//!
//! Run with `cargo run -p durabus --example outbox` (it works in a temporary directory).
#![allow(clippy::print_stdout)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durabus::rusqlite::{Connection, TransactionBehavior};
use durabus::{Event, EventBus, EventStatus, SqliteOptions, SubscribeOptions};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.db");

    // The application's own database, with its own table.
    let mut conn = Connection::open(&path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.execute_batch(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL, cents INTEGER NOT NULL)",
    )?;

    // The bus opens the same file and adds its tables beside the application's, named with a
    // prefix (`shop_bus_events`, ...). It notices commits made on other connections within
    // `watch_interval` (50 ms unless set).
    let bus = EventBus::builder()
        .sqlite_with(
            &path,
            SqliteOptions {
                table_prefix: "shop_bus_".into(),
                ..SqliteOptions::default()
            },
        )
        .build()
        .await?;
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let d = delivered.clone();
    bus.subscribe(
        "order.placed",
        move |e: Event| {
            let d = d.clone();
            async move {
                println!("handler: {} {}", e.event_type, e.payload);
                d.lock().map_err(|e| e.to_string())?.push(e.id);
                Ok(())
            }
        },
        SubscribeOptions::default().name("mailer"),
    )
    .await?;
    bus.start().await?;
    let outbox = bus.outbox()?;

    // 1. Committed: the order row and its event, together.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO orders (id, item, cents) VALUES (1, 'teapot', 2500)",
        [],
    )?;
    let committed = outbox.publish(
        &tx,
        "order.placed",
        &serde_json::json!({"order": 1, "item": "teapot"}),
    )?;
    tx.commit()?;
    println!("committed order 1 with event {committed}");

    // 2. Rolled back (say, the payment failed): neither the row nor the event exists.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.execute(
        "INSERT INTO orders (id, item, cents) VALUES (2, 'kettle', 4000)",
        [],
    )?;
    let rolled_back = outbox.publish(
        &tx,
        "order.placed",
        &serde_json::json!({"order": 2, "item": "kettle"}),
    )?;
    tx.rollback()?;
    println!("rolled back order 2 with event {rolled_back}");

    // The committed event is delivered; wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let status = bus.store().get_event(committed).await?.map(|e| e.status);
        if status == Some(EventStatus::Done) {
            break;
        }
        if Instant::now() > deadline {
            return Err("the committed event was not delivered within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let orders: i64 = conn.query_row("SELECT count(*) FROM orders", [], |r| r.get(0))?;
    let stored = bus.store().get_event(rolled_back).await?;
    let seen = delivered.lock().map_err(|e| e.to_string())?.clone();
    println!(
        "orders stored: {orders}; events delivered: {}; rolled-back event stored: {}",
        seen.len(),
        stored.is_some()
    );
    bus.shutdown().await?;
    if orders != 1 || seen != vec![committed] || stored.is_some() {
        return Err("expected exactly the committed order and its event".into());
    }
    println!("only the committed event was delivered");
    Ok(())
}

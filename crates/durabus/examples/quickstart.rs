//! The smallest useful bus: an SQLite file, two handlers, a publish that is delivered at once,
//! an enqueue the background workers deliver, and a failure retried on its schedule.
//!
//! Run with `cargo run -p durabus --example quickstart` (it works in a temporary directory).
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::{Event, EventBus, EventStatus, RetryPolicy, SubscribeOptions};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let bus = EventBus::builder()
        .sqlite(dir.path().join("app.db"))
        .retry_policy(RetryPolicy {
            base_delay: Duration::from_millis(50), // quick retries for the example
            ..RetryPolicy::default()
        })
        .build()
        .await?;

    bus.subscribe(
        "user.*",
        |e: Event| async move {
            println!("welcome mail for {}", e.payload);
            Ok(())
        },
        SubscribeOptions::default().name("mailer"),
    )
    .await?;
    // A flaky handler: fails once, then succeeds on the retry.
    let calls = Arc::new(AtomicU32::new(0));
    let c = calls.clone();
    bus.subscribe(
        "order.placed",
        move |e: Event| {
            let c = c.clone();
            async move {
                if c.fetch_add(1, Ordering::SeqCst) == 0 {
                    return Err("the warehouse API timed out".into());
                }
                println!(
                    "order {} reserved (attempt {})",
                    e.payload,
                    e.retry_count + 1
                );
                Ok(())
            }
        },
        SubscribeOptions::default().name("warehouse"),
    )
    .await?;
    bus.start().await?; // background workers: enqueued events and retries

    bus.publish("user.signed_up", &json!({ "user": "ann" }))
        .await?; // stored, then delivered
    let order = bus.enqueue("order.placed", &json!({ "order": 42 })).await?; // stored; workers deliver

    // Wait for the retry to land.
    for _ in 0..100 {
        if bus.history().get(order).await?.status == EventStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let e = bus.history().get(order).await?;
    println!(
        "order event: {} after {} failed attempt(s)",
        e.status, e.retry_count
    );
    assert_eq!(e.status, EventStatus::Done);
    bus.shutdown().await?;
    Ok(())
}

//! Your own worker loop instead of the bus's: take one due event with `poll`, do the work, and
//! report it with `finalize`. A failure is retried on the schedule and dead-lettered when its
//! attempts run out, exactly as with handlers.
//!
//! Run with `cargo run -p durabus --example own_worker_loop`.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use durabus::{EventBus, EventStatus, RetryPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let bus = EventBus::builder()
        .sqlite(dir.path().join("jobs.db"))
        .retry_policy(RetryPolicy {
            max_retries: 1,
            base_delay: Duration::from_millis(10),
            ..RetryPolicy::default()
        })
        .build()
        .await?;
    bus.recover().await?; // once at start-up: events a crash left in processing are due again

    let ok = bus.enqueue("report.render", &"monthly").await?;
    let bad = bus.enqueue("report.render", &"broken").await?;

    let mut idle = 0;
    while idle < 20 {
        match bus.poll().await? {
            Some(event) if event.event_type != "report.render" => {
                // The bus's own announcements (`system.dead_letter`) come through the loop too.
                println!("(announcement {})", event.event_type);
                bus.finalize(event.id, true).await?;
            }
            Some(event) => {
                idle = 0;
                let kind: String = event.payload()?;
                let success = kind != "broken";
                println!(
                    "rendering {kind}: {}",
                    if success { "ok" } else { "failed" }
                );
                bus.finalize(event.id, success).await?;
            }
            None => {
                idle += 1;
                tokio::time::sleep(Duration::from_millis(10)).await; // retries become due
            }
        }
    }
    assert_eq!(bus.history().get(ok).await?.status, EventStatus::Done);
    let dead = bus.history().get(bad).await?;
    println!(
        "the broken report: {} after {} attempts",
        dead.status, dead.retry_count
    );
    assert_eq!(dead.status, EventStatus::Dlq);
    bus.shutdown().await?;
    Ok(())
}

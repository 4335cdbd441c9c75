//! An application's test of its own handler with `durabus::testing` (feature `test-util`): a
//! bus on a manual clock, delivery drained through the back-off in milliseconds, assertions.
//!
//! Run its tests with `cargo test -p durabus --features test-util --example testing`; run it
//! as a program to see the same steps printed.
#![allow(clippy::print_stdout, clippy::unwrap_used)]

use durabus::testing::TestBus;
use durabus::{Event, SubscribeOptions};
use serde_json::json;

/// The application's handler under test: charges an order, refusing amounts over 1,000.
async fn charge(e: Event) -> durabus::HandlerResult {
    let amount = e.payload_value()["cents"].as_u64().unwrap_or(0);
    if amount > 100_000 {
        return Err(format!("amount {amount} over the limit").into());
    }
    Ok(())
}

async fn scenario() -> durabus::Result<()> {
    let bus = TestBus::sqlite().await?;
    bus.subscribe(
        "order.paid",
        charge,
        SubscribeOptions::default().name("billing"),
    )
    .await?;
    let ok = bus
        .enqueue("order.paid", &json!({ "order": 1, "cents": 1_999 }))
        .await?;
    let too_big = bus
        .enqueue("order.paid", &json!({ "order": 2, "cents": 500_000 }))
        .await?;

    let drained = bus.drain_through_backoff().await?; // 3 retries, minutes of back-off: instant
    println!("drained: {drained:?}");
    assert_eq!((drained.done, drained.dead), (1, 1));
    bus.assert_status(ok, durabus::EventStatus::Done).await;
    bus.assert_dead_letter(too_big, "over the limit").await;
    bus.assert_published("order.paid", |p| p["order"] == 2)
        .await;
    assert_eq!(bus.handled_by("billing").await, 1);
    bus.close().await;
    Ok(())
}

#[tokio::main]
async fn main() -> durabus::Result<()> {
    scenario().await
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn billing_charges_small_orders_and_dead_letters_large_ones() {
        super::scenario().await.unwrap();
    }
}

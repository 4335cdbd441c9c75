//! Retry overrides per subscription, and the circuit breaker: a payment handler allowed more
//! retries than the default, and a breaker that opens when a downstream keeps failing, defers
//! events while open, and closes after a successful probe.
//!
//! Run with `cargo run -p durabus --example custom_retry`.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durabus::{
    BreakerConfig, BreakerState, Event, EventBus, RetryOverride, RetryPolicy, SubscribeOptions,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let bus = EventBus::builder()
        .sqlite(dir.path().join("app.db"))
        // The default for every subscription: 3 retries from 1 s, doubling, at most 30 s.
        .retry_policy(RetryPolicy::default())
        // Open a subscription's breaker when more than half of at least 4 outcomes in a
        // minute failed; after 200 ms let one probe through.
        .breaker(BreakerConfig {
            min_samples: 4,
            open_for: Duration::from_millis(200),
            ..BreakerConfig::default()
        })
        .build()
        .await?;

    let gateway_up = Arc::new(AtomicBool::new(false));
    let up = gateway_up.clone();
    bus.subscribe(
        "payment.*",
        move |e: Event| {
            let up = up.clone();
            async move {
                if !up.load(Ordering::SeqCst) {
                    return Err(format!("gateway down for {}", e.payload).into());
                }
                Ok(())
            }
        },
        SubscribeOptions::default()
            .name("gateway")
            // Payments may wait longer than other events: 8 retries from 50 ms, up to 2 s.
            .retry(
                RetryOverride::default()
                    .max_retries(8)
                    .base_delay(Duration::from_millis(50))
                    .max_delay(Duration::from_secs(2)),
            ),
    )
    .await?;
    bus.start().await?;

    for order in 0..6 {
        bus.publish("payment.capture", &order).await?; // each first attempt fails
    }
    let breaker = &bus.breakers()[0];
    println!("breaker after 6 failures: {:?}", breaker.breaker.state);
    assert_eq!(breaker.breaker.state, BreakerState::Open);

    gateway_up.store(true, Ordering::SeqCst); // the downstream recovers
    for _ in 0..200 {
        let m = bus.metrics();
        if m.events_succeeded_total == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = bus.metrics();
    println!(
        "succeeded {} (after retry {}), deferred by the open breaker {}, breaker now {:?}",
        m.events_succeeded_total,
        m.events_succeeded_after_retry_total,
        m.events_deferred_total,
        bus.breakers()[0].breaker.state
    );
    assert_eq!(m.events_succeeded_total, 6);
    bus.shutdown().await?;
    Ok(())
}

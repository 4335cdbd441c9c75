//! Publishing, subscribing and routing.

mod delivery;
mod input;
pub use delivery::*;
pub use input::*;

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Duration;

use durabus::{Error, Event, EventQuery, EventStatus, NewEvent, SubscribeOptions};

use crate::support::*;

/// Claims made so far, from the bus's own metrics.
async fn claims(bus: &durabus::EventBus) -> f64 {
    let s = crate::suite::telemetry::scrape(bus).await;
    crate::suite::telemetry::num(
        &s,
        "durabus_db_query_duration_seconds_count",
        &[("operation", "claim")],
    )
}

/// A started bus whose handler for `race.*` writes down each event it is given.
async fn recording_bus(
    h: &Harness,
    calls: &Arc<std::sync::Mutex<Vec<durabus::EventId>>>,
) -> durabus::EventBus {
    let bus = h.bus().await;
    let c = calls.clone();
    bus.subscribe(
        "race.*",
        move |e: Event| {
            c.lock().unwrap().push(e.id);
            async { Ok(()) }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    bus
}

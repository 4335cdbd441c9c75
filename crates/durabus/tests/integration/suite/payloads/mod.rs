//! The payload store: snapshots round trip, configuration per type, automatic snapshots,
//! soft delete, redaction in every read path, retention.

mod lifecycle;
mod snapshots;
pub use lifecycle::*;
pub use snapshots::*;

use std::time::Duration;

use durabus::payload::{STAGE_ERROR, STAGE_PUBLISHED, compress};

use durabus::{
    Actor, ActorKind, ConfigInput, ErrorKind, Event, EventId, EventQuery, RetryOverride,
    SubscribeOptions,
};

use serde_json::json;

use crate::support::*;

fn ann() -> Actor {
    Actor::new("ann", ActorKind::Library)
}

/// A bus with automatic snapshots whose breaker never opens.
async fn snapshotting_bus(h: &Harness) -> durabus::EventBus {
    h.builder()
        .await
        .payload_snapshots(true)
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap()
}

fn config(stages: &[&str], days: i64, redact: &[&str]) -> ConfigInput {
    ConfigInput {
        stages: stages.iter().map(|s| (*s).to_owned()).collect(),
        retention_days: days,
        redact: redact.iter().map(|s| (*s).to_owned()).collect(),
        redact_before_store: false,
    }
}

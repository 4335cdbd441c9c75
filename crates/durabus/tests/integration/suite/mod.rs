//! The contract suite: every test here runs against every store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod breaker;
pub mod cancel;
pub mod claims;
pub mod dead_letters;
pub mod dedup;
pub mod dlq;
pub mod group_metrics;
pub mod history;
pub mod lifecycle;
pub mod operations;
pub mod ordering;
pub mod pauses;
pub mod payloads;
pub mod periodic;
pub mod publish;
pub mod replay;
pub mod retry;
pub mod schedule;
pub mod shared_breakers;
pub mod snooze;
pub mod stats;
pub mod store;
pub mod telemetry;
pub mod type_metrics;
pub mod typed;

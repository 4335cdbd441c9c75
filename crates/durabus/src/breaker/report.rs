//! Breakers seen and shared across processes. Every started bus reports its subscriptions'
//! breakers to the store (on every change and every [`REPORT_EVERY`]), so the API, the
//! dashboard and the metrics show each subscription's breaker in each process; a
//! [`shared`](super::BreakerConfig::shared) breaker also keeps a row of its own while it is
//! open: every process opens its breaker from it, and half-open, one process at a time takes
//! the probe ([`ProbeTake`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::BreakerState;
use crate::clock::Timestamp;

/// How often a started bus reports its breakers when none changed.
pub const REPORT_EVERY: Duration = Duration::from_secs(10);

/// Reports older than this are from processes that stopped: they are not shown.
pub const REPORT_FRESH: Duration = Duration::from_secs(60);

/// One process's breaker of one subscription, as reported to the store.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerReport {
    /// The subscription's delivery key: its name (or, for an unnamed one, its id).
    pub subscription: String,
    /// The reporting process (host, process id and a random part).
    pub process: String,
    /// Its state when reported.
    pub state: BreakerState,
    /// Share of failed outcomes in its window.
    pub failure_rate: f64,
    /// Outcomes in its window.
    pub samples: u32,
    /// When it last opened, while open or half-open.
    pub opened_at: Option<Timestamp>,
    /// When it was reported.
    pub reported_at: Timestamp,
}

/// A shared breaker that is open (or half-open) across the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBreaker {
    /// The subscription's name.
    pub subscription: String,
    /// When it last opened (every process's breaker is open until this plus `open_for`).
    pub opened_at: Timestamp,
    /// The process whose breaker opened it.
    pub opened_by: String,
    /// The process running the cluster's half-open probe, and until when it holds it.
    pub probe: Option<(String, Timestamp)>,
}

/// The answer to a process asking for the cluster's half-open probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeTake {
    /// This process runs the probe.
    Granted,
    /// Another process runs it: skip, look again later.
    Busy,
    /// The shared breaker was closed meanwhile (another process's probe succeeded): run.
    Closed,
}

//! The scenarios, each returning one row of the suite's table.

pub mod cluster;
pub mod common;
pub mod failpoints;
pub mod handlers;
pub mod hostile;
pub mod load;
pub mod netns;
pub mod pg_failover;
pub mod pg_full;
pub mod pg_kill;
pub mod pg_partition;
pub mod pg_skew;
pub mod pg_stall;
pub mod soak;
pub mod sqlite_kill;
pub mod storage;

use std::time::Duration;

/// One row of the table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    /// Scenario name.
    pub scenario: String,
    /// Cycles (lives, kills, restarts, or cases) run.
    pub cycles: u64,
    /// Events acknowledged.
    pub acknowledged: u64,
    /// Acknowledged events lost: must be 0.
    pub lost: u64,
    /// Duplicate deliveries.
    pub duplicates: u64,
    /// Faults injected (kills, aborts, storage faults…).
    pub faults: u64,
    /// What else is worth saying.
    pub notes: String,
    /// Broken promises; empty when the scenario passed.
    pub violations: Vec<String>,
    /// Time taken.
    pub took: Duration,
    /// Where the scenario measures it: how long after its fault the system was whole again.
    pub recovered: Option<Duration>,
}

impl Row {
    /// Whether the scenario passed.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// Settings every scenario gets.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The long form (documented runs) instead of the short one (CI).
    pub long: bool,
    /// Cycles, overriding the scenario's default.
    pub cycles: Option<u64>,
    /// PostgreSQL URL (PostgreSQL scenarios are skipped without one).
    pub pg_url: Option<String>,
    /// Work directory (temporary unless kept).
    pub dir: std::path::PathBuf,
    /// Whether databases and schemas are kept after the run.
    pub keep: bool,
}

impl Settings {
    /// `short` or `long` cycles unless overridden.
    pub fn cycles(&self, short: u64, long: u64) -> u64 {
        self.cycles.unwrap_or(if self.long { long } else { short })
    }
}

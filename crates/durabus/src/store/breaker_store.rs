//! The breaker store's trait: breakers reported by every process, and the rows of shared
//! breakers (see [`crate::breaker::report`]).

use async_trait::async_trait;

use crate::breaker::report::{BreakerReport, ProbeTake, SharedBreaker};
use crate::clock::Timestamp;
use crate::error::Result;

use super::sealed;

/// Breakers across processes (see [`crate::breaker::report`]).
#[async_trait]
pub trait BreakerStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores `reports`, replacing each (subscription, process)'s previous report, and
    /// deletes reports older than `stale_before` (processes that stopped).
    async fn breaker_report(
        &self,
        reports: Vec<BreakerReport>,
        stale_before: Timestamp,
    ) -> Result<()>;

    /// The reports made at or after `since`, by subscription and process.
    async fn breaker_reports(&self, since: Timestamp) -> Result<Vec<BreakerReport>>;

    /// The shared breakers that are open or half-open, by subscription.
    async fn breaker_shared(&self) -> Result<Vec<SharedBreaker>>;

    /// Opens the shared breaker of `subscription` since `opened_at`, by `process` (a later
    /// opening wins over an earlier one); any probe is over.
    async fn breaker_share_open(
        &self,
        subscription: &str,
        process: &str,
        opened_at: Timestamp,
    ) -> Result<()>;

    /// Asks for the half-open probe of `subscription` for `process` until `until`: granted
    /// when nobody holds it (or its holder's time ran out, `now`), busy when another process
    /// holds it, closed when the shared breaker has no row (it was closed).
    async fn breaker_share_probe(
        &self,
        subscription: &str,
        process: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<ProbeTake>;

    /// Closes the shared breaker of `subscription` (its probe succeeded).
    async fn breaker_share_close(&self, subscription: &str) -> Result<()>;
}

//! The periodic-event store's trait: definitions of periodic events and where each is in its
//! schedule (see [`crate::periodic`]).

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::periodic::PeriodicRow;

use super::sealed;

/// Periodic-event definitions (see [`crate::periodic`]).
#[async_trait]
pub trait PeriodicStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores `row`; for a name already stored, replaces what it publishes and its schedule
    /// and keeps its paused flag, its place in the schedule and its creation time. Returns
    /// the row as stored.
    async fn periodic_save(&self, row: PeriodicRow) -> Result<PeriodicRow>;

    /// Every definition, by name.
    async fn periodic_list(&self) -> Result<Vec<PeriodicRow>>;

    /// Pauses (`true`) or resumes definition `name` at `now`; resuming moves its place in the
    /// schedule to `now`, so the ticks that came while it was paused are skipped. `None` for
    /// an unknown name.
    async fn periodic_pause(
        &self,
        name: &str,
        paused: bool,
        now: Timestamp,
    ) -> Result<Option<PeriodicRow>>;

    /// Deletes definition `name` and returns it; `None` if there was none.
    async fn periodic_remove(&self, name: &str) -> Result<Option<PeriodicRow>>;

    /// Records that `tick` of `name` was published as `event_id`: its place in the schedule
    /// moves to `tick` (never back).
    async fn periodic_advance(&self, name: &str, tick: Timestamp, event_id: EventId) -> Result<()>;
}

//! The pause store's trait: pauses on record, and the events they park (see [`crate::pause`]).

use async_trait::async_trait;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::pause::{Pause, PauseRequest, ResumeRequest};

use super::sealed;

/// Pauses (see [`crate::pause`]). A pause parks an event through the ordinary outcome of its
/// attempt (pending again, due at the pause's mark [`parked_at`](crate::pause::parked_at));
/// ending a pause makes the events it parked due, in the same transaction.
#[async_trait]
pub trait PauseStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores a new pause, started at `now` (the caller has checked `request`), and returns it.
    async fn pause_create(&self, request: PauseRequest, now: Timestamp) -> Result<Pause>;

    /// One pause by id, active or ended, with the events it parks now.
    async fn pause_get(&self, id: i64) -> Result<Option<Pause>>;

    /// The active pauses, oldest first, with the events each parks now; with `ended_since`
    /// also those that ended at or after it (newest first after the active ones). `limit`
    /// bounds the ended ones.
    async fn pause_list(&self, ended_since: Option<Timestamp>, limit: usize) -> Result<Vec<Pause>>;

    /// What every process reads at each refresh: the active pauses, oldest first, then those
    /// that ended at or after `ended_since`, without counting what they park.
    async fn pause_active(&self, ended_since: Timestamp) -> Result<Vec<Pause>>;

    /// Ends the active pauses `request` names at `now` and makes the events they parked due
    /// at `now`, in one transaction. Returns them as ended; empty when none was active.
    async fn pause_end(&self, request: ResumeRequest, now: Timestamp) -> Result<Vec<Pause>>;

    /// Ends every active pause whose `until` has come by `now` (ended at its `until`, kind
    /// `expired`, by the bus) and makes the events it parked due at `now`, in one
    /// transaction. Returns them.
    async fn pause_expire(&self, now: Timestamp) -> Result<Vec<Pause>>;

    /// Makes due at `now` the events still parked by the pauses `ids` (which have ended): an
    /// attempt that parked an event as its pause ended. Returns how many.
    async fn pause_wake(&self, ids: Vec<i64>, now: Timestamp) -> Result<u64>;
}

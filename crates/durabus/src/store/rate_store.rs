//! The rate-limit store's trait: limits per subscription and the slots they hand out (see
//! [`crate::rate`]).

use async_trait::async_trait;

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::rate::{RateLimit, RateTake};

use super::sealed;

/// Rate limits (see [`crate::rate`]).
#[async_trait]
pub trait RateStore: sealed::Sealed + Send + Sync + 'static {
    /// Sets `subscription`'s limit to `per` runs per `interval_ms` (checked by the caller), by
    /// `actor` at `now`; a limit already set keeps its next free slot. Returns it.
    async fn rate_set(
        &self,
        subscription: &str,
        per: u32,
        interval_ms: u64,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<RateLimit>;

    /// Removes `subscription`'s limit and the slots it reserved; returns it, `None` if it had
    /// none. Events put off for a reserved slot run at their time, without a slot.
    async fn rate_remove(&self, subscription: &str) -> Result<Option<RateLimit>>;

    /// Every limit, by subscription.
    async fn rate_list(&self) -> Result<Vec<RateLimit>>;

    /// Takes a slot of `subscription`'s limit for event `id` at `now`, in one atomic step: the
    /// slot reserved for the event earlier if it has one (run when its time has come), else
    /// the next free slot (run now if it is due, else reserved for the event). `None` when the
    /// subscription has no limit.
    async fn rate_take(
        &self,
        id: EventId,
        subscription: &str,
        now: Timestamp,
    ) -> Result<Option<RateTake>>;
}

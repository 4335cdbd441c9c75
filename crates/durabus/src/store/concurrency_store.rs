//! The concurrency-limit store's trait: limits per subscription, the slots runs hold and the
//! line of events waiting for one (see [`crate::concurrency`]).

use async_trait::async_trait;

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::concurrency::{ConcurrencyLimit, PartitionLimit, SlotAsk, SlotTake};
use crate::error::Result;
use crate::event::EventId;

use super::sealed;

/// Concurrency limits (see [`crate::concurrency`]).
#[async_trait]
pub trait ConcurrencyStore: sealed::Sealed + Send + Sync + 'static {
    /// Sets `subscription`'s limit (checked by the caller), with `partition` if given, by
    /// `actor` at `now`, and wakes as many waiting events as a raised limit frees slots.
    /// Returns it.
    async fn concurrency_set(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        partition: Option<&PartitionLimit>,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<ConcurrencyLimit>;

    /// Removes `subscription`'s limit and its slots, and makes every event waiting for one
    /// due at `now`. Returns it, `None` if it had none.
    async fn concurrency_remove(
        &self,
        subscription: &str,
        now: Timestamp,
    ) -> Result<Option<ConcurrencyLimit>>;

    /// Every limit, by subscription, with the slots held and the events waiting at `now`.
    async fn concurrency_list(&self, now: Timestamp) -> Result<Vec<ConcurrencyLimit>>;

    /// The partitions of `subscription` (`""` for a limit without partitions) with an event
    /// waiting in its line and not woken yet, at most `most` of them, in no given order.
    async fn concurrency_waiting(&self, subscription: &str, most: u32) -> Result<Vec<String>>;

    /// Asks for a slot of `subscription` for the run `ask` describes by `holder`, in one
    /// atomic step: granted (held until `lease_until` unless released) while the limit and
    /// the run's partition have room at `now` (see [`crate::concurrency::line::Room`]), else
    /// the event joins the waiting line.
    async fn concurrency_take(
        &self,
        subscription: &str,
        ask: &SlotAsk,
        holder: &str,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<SlotTake>;

    /// Gives back the slot of the run of event `id`, and makes the first waiting event of its
    /// partition due at `now` if a slot is free (or, with none of its partition waiting, the
    /// first of a partition with room).
    async fn concurrency_release(
        &self,
        subscription: &str,
        id: EventId,
        now: Timestamp,
    ) -> Result<()>;

    /// Events `ids` were just parked in a line: for each one's partition, wakes as many of
    /// its first waiting events at `now` as it has room for. A slot freed while they were
    /// still running the attempt that found none wakes no one (they were not parked yet);
    /// this closes that gap without waiting for the next sweep. Returns how many woke.
    async fn concurrency_parked(&self, ids: &[EventId], now: Timestamp) -> Result<u64>;

    /// For every limit: drops slots whose lease ran out and waiting entries of events that
    /// are no longer waiting, and makes as many waiting events due at `now` as slots are
    /// free. Returns how many it woke.
    async fn concurrency_sweep(&self, now: Timestamp) -> Result<u64>;
}

//! Concurrency limits per subscription: at most `max_in_flight` handler runs of a subscription
//! at once across every process of the bus, and optionally at most `per_process` in each.
//!
//! How: a run holds a *slot* in the store from before its handler starts until it ends; a
//! slot carries a lease (the handler's timeout and a margin), so the slots of a process that
//! died come back when their lease runs out. A delivery that finds every slot taken puts its
//! event in the subscription's waiting line and parks it (pending, due at [`WAIT_MARK`], no
//! attempt counted); a run that ends makes the first waiting event due, and every refresh of
//! every process wakes as many waiting events as there are free slots (after a crash, or a
//! raised limit). The per-process limit is a semaphore in the process: a run waits for it
//! while holding its delivery slot.
//!
//! Taking a slot and giving it back are two writes; a process saves them while it runs a
//! stream of a subscription's events. A run that ended well leaves its slot with the process
//! (still held in the store, with its lease) for the next run of the same subscription and
//! partition, while the worker has events to run and no event of that partition waits in the
//! line; and a run whose partition's room is held by the process's own runs waits briefly in
//! the process for one of their slots before it asks the store. The slots a process keeps go
//! back when it runs out of events, when an event of their partition waits in line, when the
//! limit changes, and at shutdown.
//!
//! A limit may also have partitions ([`PartitionLimit`]): the subscription's events split by
//! their ordering key or a metadata field (a tenant), at most so many runs of each partition
//! at once. A freed slot wakes the first waiting event of its own partition, or the first one
//! of a partition with room; an event woken is due at that moment, so it comes after every
//! event already due: a tenant with a deep backlog takes turns with a tenant that publishes a
//! few, instead of running its whole backlog first.

use serde::{Deserialize, Serialize};

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

pub mod line;
mod partition;
mod service;

pub use partition::{MAX_FIELD_LEN, PARTITION_BY_REGEX, PartitionBy, PartitionLimit, SlotAsk};
pub use service::ConcurrencyLimits;

/// The most runs in flight a limit may allow.
pub const MAX_IN_FLIGHT: u32 = 100_000;

/// The due time of an event waiting for a slot: later than any clock, earlier than any
/// pause's parking mark.
pub const WAIT_MARK: Timestamp = Timestamp(crate::pause::PARK_BASE - 1);

/// How long past the handler's timeout a slot's lease lasts.
pub const LEASE_MARGIN: std::time::Duration = std::time::Duration::from_secs(30);

/// A subscription's concurrency limit.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcurrencyLimit {
    /// The subscription's name (or, for an unnamed one, its id).
    pub subscription: String,
    /// Handler runs in flight at most, across every process.
    pub max_in_flight: u32,
    /// Handler runs in flight at most in each process, if limited.
    pub per_process: Option<u32>,
    /// The limit on each partition of the subscription's events, if it has partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<PartitionLimit>,
    /// Slots held now (their lease not run out): by runs, or kept by a process for its next
    /// run of the subscription (see the module's documentation).
    pub in_flight: u64,
    /// Events waiting for a slot now.
    pub waiting: u64,
    /// Who set it.
    pub set_by: Actor,
    /// When.
    pub set_at: Timestamp,
}

impl ConcurrencyLimit {
    /// Refuses values out of range: 1 to [`MAX_IN_FLIGHT`] for both (a per-process limit above
    /// `max_in_flight` is allowed and never binds).
    pub fn check(max_in_flight: u32, per_process: Option<u32>) -> Result<()> {
        if !(1..=MAX_IN_FLIGHT).contains(&max_in_flight) {
            return Err(Error::invalid(
                "max_in_flight",
                max_in_flight.to_string(),
                format!("1 to {MAX_IN_FLIGHT}"),
            ));
        }
        if let Some(p) = per_process
            && !(1..=MAX_IN_FLIGHT).contains(&p)
        {
            return Err(Error::invalid(
                "per_process",
                p.to_string(),
                format!("1 to {MAX_IN_FLIGHT}"),
            ));
        }
        Ok(())
    }
}

/// What asking for a slot answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotTake {
    /// The subscription has no limit.
    Unlimited,
    /// A slot is held for the run: release it when the handler ends.
    Granted,
    /// Every slot is taken: the event is in the waiting line; park it at [`WAIT_MARK`].
    Wait,
}

/// How many waiting events to wake when `live` slots are held under `max`.
pub fn to_wake(live: u64, max: u32) -> u64 {
    u64::from(max).saturating_sub(live)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_follow_the_limit() {
        assert_eq!(to_wake(0, 3), 3);
        assert_eq!(to_wake(5, 3), 0);
        assert!(WAIT_MARK < crate::pause::parked_at(0));
        assert_eq!(crate::pause::parked_by(WAIT_MARK), None);
    }

    #[test]
    fn limits_are_checked() {
        assert!(ConcurrencyLimit::check(64, Some(8)).is_ok());
        assert!(ConcurrencyLimit::check(0, None).is_err());
        assert!(ConcurrencyLimit::check(MAX_IN_FLIGHT + 1, None).is_err());
        assert!(ConcurrencyLimit::check(4, Some(0)).is_err());
        assert!(ConcurrencyLimit::check(4, Some(MAX_IN_FLIGHT + 1)).is_err());
        assert!(
            ConcurrencyLimit::check(4, Some(5)).is_ok(),
            "it never binds"
        );
    }
}

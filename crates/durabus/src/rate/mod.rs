//! Rate limits per subscription, across every process of the bus: at most `per` handler runs
//! per `interval` for a subscription, however many worker processes run it. Events past the
//! limit wait; they are not failed.
//!
//! How: each subscription with a limit keeps, in the store, the time of its next free slot
//! (virtual scheduling: slots are `interval / per` apart, and up to `per` may be taken at once
//! after an idle spell). A delivery takes the next slot in one atomic step: a slot due now
//! runs now; a later slot is *reserved* for the event, which is put off to that time (its
//! attempt not counted) and runs when it comes back. So a backlog is spread over distinct
//! future times, never re-claimed in a herd, and the rate holds across processes because
//! every slot is taken in the store. Changing a limit takes effect at the next slot taken;
//! every process learns which subscriptions have one within its
//! [`pause_refresh`](crate::BusConfig::pause_refresh).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

mod service;

pub use service::RateLimits;

/// The most runs a limit may allow per interval.
pub const MAX_PER: u32 = 1_000_000;

/// The longest interval a limit may have (a day).
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// A subscription's rate limit.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateLimit {
    /// The subscription's name (or, for an unnamed one, its id).
    pub subscription: String,
    /// Handler runs allowed per interval.
    pub per: u32,
    /// The interval, in milliseconds.
    pub interval_ms: u64,
    /// Who set it.
    pub set_by: Actor,
    /// When.
    pub set_at: Timestamp,
}

impl RateLimit {
    /// Refuses a `per` or an interval out of range: 1 to [`MAX_PER`] runs per 1 ms to
    /// [`MAX_INTERVAL`].
    pub fn check(per: u32, interval: Duration) -> Result<()> {
        if !(1..=MAX_PER).contains(&per) {
            return Err(Error::invalid(
                "per",
                per.to_string(),
                format!("1 to {MAX_PER} runs per interval"),
            ));
        }
        if interval < Duration::from_millis(1) || interval > MAX_INTERVAL {
            return Err(Error::invalid(
                "interval",
                format!("{interval:?}"),
                "1 ms to 1 day",
            ));
        }
        Ok(())
    }

    /// How far apart slots are, in microseconds (at least 1).
    pub fn spacing_us(per: u32, interval_ms: u64) -> i64 {
        let us = interval_ms.saturating_mul(1000) / u64::from(per.max(1));
        i64::try_from(us.max(1)).unwrap_or(i64::MAX)
    }
}

/// What taking a slot answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateTake {
    /// Run the handler now.
    Run,
    /// A slot is reserved for the event at this time: put it off until then.
    WaitUntil(Timestamp),
}

/// The slot a delivery takes at `now` (in µs since the epoch) when the next free one is at
/// `next` (µs), slots `spacing` apart and `per` allowed at once: the slot's time and the next
/// free one after it.
pub fn take_slot(next: i64, now: i64, spacing: i64, per: u32) -> (i64, i64) {
    // After an idle spell up to `per` slots are free at once: the earliest slot is `per - 1`
    // spacings in the past.
    let burst = spacing.saturating_mul(i64::from(per.max(1)) - 1);
    let slot = next.max(now.saturating_sub(burst));
    (slot, slot.saturating_add(spacing))
}

/// Microseconds `us` as the timestamp of the millisecond it falls in, rounded up (a slot is
/// never run before its time).
pub fn slot_time(us: i64) -> Timestamp {
    Timestamp(us.saturating_add(999).div_euclid(1000))
}

/// What a store does to take a slot for an event, decided from what it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakePlan {
    /// The subscription has no limit: run.
    Unlimited,
    /// The event's reserved slot has come: delete the reservation and run.
    RunReserved,
    /// The event's reserved slot is still ahead: wait for it.
    WaitReserved(Timestamp),
    /// Take the next free slot: store `next` as the next free one; run now if `run`, else
    /// reserve `slot` (µs) for the event and wait for it.
    Take {
        /// The next free slot after this one, µs.
        next: i64,
        /// The slot is due now.
        run: bool,
        /// The slot, µs.
        slot: i64,
    },
}

impl TakePlan {
    /// What the delivery does.
    pub fn answer(self) -> Option<RateTake> {
        match self {
            TakePlan::Unlimited => None,
            TakePlan::RunReserved | TakePlan::Take { run: true, .. } => Some(RateTake::Run),
            TakePlan::WaitReserved(t) => Some(RateTake::WaitUntil(t)),
            TakePlan::Take { slot, .. } => Some(RateTake::WaitUntil(slot_time(slot))),
        }
    }
}

/// Decides how to take a slot at `now` for an event whose reserved slot is `reserved` (µs),
/// under `limit` (`per`, `interval_ms`, the next free slot in µs; `None`: no limit).
pub fn plan_take(
    reserved: Option<i64>,
    limit: Option<(u32, u64, i64)>,
    now: Timestamp,
) -> TakePlan {
    let now_us = now.as_millis().saturating_mul(1000);
    if let Some(slot) = reserved {
        return if slot <= now_us {
            TakePlan::RunReserved
        } else {
            TakePlan::WaitReserved(slot_time(slot))
        };
    }
    let Some((per, interval_ms, next)) = limit else {
        return TakePlan::Unlimited;
    };
    let (slot, next) = take_slot(next, now_us, RateLimit::spacing_us(per, interval_ms), per);
    TakePlan::Take {
        next,
        run: slot <= now_us,
        slot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_of_per_runs_at_once_then_slots_are_spaced() {
        // 2 per second: slots 500 ms apart.
        let spacing = RateLimit::spacing_us(2, 1000);
        assert_eq!(spacing, 500_000);
        let now = 10_000_000;
        let mut next = 0;
        let mut slots = Vec::new();
        for _ in 0..5 {
            let (slot, after) = take_slot(next, now, spacing, 2);
            slots.push(slot - now);
            next = after;
        }
        assert_eq!(slots, vec![-500_000, 0, 500_000, 1_000_000, 1_500_000]);
        // Over any long saturated run the rate is per / interval.
        let (mut next, mut t, mut ran) = (0, 0i64, 0);
        while t < 60_000_000 {
            let (slot, after) = take_slot(next, t, spacing, 2);
            if slot <= t {
                ran += 1;
                next = after;
            }
            t += 1_000;
        }
        assert!((120..=122).contains(&ran), "{ran}");
    }

    #[test]
    fn a_reserved_slot_is_kept_and_run_when_it_comes() {
        let now = Timestamp(10_000);
        assert_eq!(plan_take(None, None, now), TakePlan::Unlimited);
        assert_eq!(
            plan_take(Some(10_500_500), Some((1, 1000, 0)), now).answer(),
            Some(RateTake::WaitUntil(Timestamp(10_501)))
        );
        assert_eq!(
            plan_take(Some(10_000_000), None, now),
            TakePlan::RunReserved
        );
        // One per second, the slot taken a moment ago: the next is reserved 1 s on.
        assert_eq!(
            plan_take(None, Some((1, 1000, 10_000_000)), now),
            TakePlan::Take {
                next: 11_000_000,
                run: true,
                slot: 10_000_000
            }
        );
        assert_eq!(
            plan_take(None, Some((1, 1000, 11_000_000)), now).answer(),
            Some(RateTake::WaitUntil(Timestamp(11_000)))
        );
    }

    #[test]
    fn limits_are_checked() {
        assert!(RateLimit::check(100, Duration::from_secs(1)).is_ok());
        for (per, interval) in [
            (0, Duration::from_secs(1)),
            (MAX_PER + 1, Duration::from_secs(1)),
            (1, Duration::ZERO),
            (1, MAX_INTERVAL + Duration::from_millis(1)),
        ] {
            assert!(
                RateLimit::check(per, interval).is_err(),
                "{per} {interval:?}"
            );
        }
    }
}

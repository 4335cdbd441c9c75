//! What an interrupted attempt costs, and what a dead letter sent back gets: decided here, once,
//! for every store. The stores bind these values into their statements; no store writes its
//! own numbers or texts.
//!
//! An attempt is *interrupted* when the process running it stopped (a crash, a kill, a drain
//! timeout) or, on PostgreSQL, when its worker stopped renewing the lease. The attempt counts
//! as a failed one (`retry_count + 1`) so that a handler that kills its process ends in the
//! dead-letter queue after `max_retries + 1` crashes instead of looping forever, and a note is
//! appended to the event's errors.

/// Why an attempt was interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub enum Interruption {
    /// The process stopped during the attempt; found by crash recovery at the next start.
    ProcessStopped,
    /// The worker holding the event's lease stopped renewing it (PostgreSQL); found by another
    /// worker's claim.
    LeaseExpired,
}

/// What an interrupted attempt adds to an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// Added to `retry_count`.
    pub retry_increment: u32,
    /// Appended to the event's errors. `{worker}` stands for the lease owner where the store
    /// knows it (it fills it in per row).
    pub note: &'static str,
}

/// The placeholder in [`Interrupted::note`] that a store replaces with the lease owner.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub const WORKER_PLACEHOLDER: &str = "{worker}";

/// The cost of an interrupted attempt.
pub fn interrupted(why: Interruption) -> Interrupted {
    Interrupted {
        retry_increment: 1,
        note: match why {
            Interruption::ProcessStopped => "interrupted: the process stopped during this attempt",
            Interruption::LeaseExpired => {
                "interrupted: the worker {worker} stopped renewing its lease"
            }
        },
    }
}

/// What a dead letter sent back for delivery starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeue {
    /// The event's `retry_count` (a fresh attempt budget: 0).
    pub retry_count: u32,
    /// Whether the event's error list is cleared (the dead-letter record keeps the history).
    pub clear_errors: bool,
}

/// A dead letter sent back for delivery gets a fresh attempt budget: every allowed attempt
/// again, errors of the old round cleared from the event. Handlers that had succeeded for it
/// keep their delivery records and do not run again.
pub fn requeue() -> Requeue {
    Requeue {
        retry_count: 0,
        clear_errors: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_attempt_counts_as_one_failed_attempt_with_a_note() {
        let stopped = interrupted(Interruption::ProcessStopped);
        assert_eq!(stopped.retry_increment, 1);
        assert!(stopped.note.starts_with("interrupted"));
        let lease = interrupted(Interruption::LeaseExpired);
        assert_eq!(lease.retry_increment, 1);
        assert!(lease.note.contains(WORKER_PLACEHOLDER));
        assert!(!stopped.note.contains(WORKER_PLACEHOLDER));
    }

    #[test]
    fn a_requeued_dead_letter_gets_every_attempt_again() {
        assert_eq!(
            requeue(),
            Requeue {
                retry_count: 0,
                clear_errors: true
            }
        );
    }
}

//! The state machine of an operation, as pure functions: who may take it, what a cancel does,
//! and what a runner does next. The stores call [`may_claim`] and [`cancel`] inside the
//! transaction that reads the row they decide on; the runner calls [`next`] between chunks.
//!
//! ```text
//!   pending ── claim ──▶ running ── last chunk ──▶ completed
//!      │                  │  ▲ lease runs out: another runner claims it
//!      │ cancel           │  │
//!      ▼                  │  └── release (pause at shutdown): claimable at once
//!   cancelled ◀── next chunk boundary ── cancel requested
//!                         │
//!                         └── an error it cannot get past ──▶ failed
//! ```

use super::OperationStatus;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

/// Whether runner `me` may take an operation now: a pending one, or a running one nobody
/// holds, whose holder's lease ran out, or that `me` holds already (a runner resuming its own
/// operation after a pause).
pub fn may_claim(
    status: OperationStatus,
    holder: Option<&str>,
    lease_expires_at: Option<Timestamp>,
    me: &str,
    now: Timestamp,
) -> bool {
    match status {
        OperationStatus::Pending => true,
        OperationStatus::Running => match holder {
            None => true,
            Some(h) => h == me || lease_expires_at.is_none_or(|t| t <= now),
        },
        _ => false,
    }
}

/// What a cancel request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelEffect {
    /// The operation had not started: it is cancelled now.
    Now,
    /// It is running: it is asked to stop, and its runner stops at its next chunk boundary
    /// (or the next runner that takes it over does).
    AtNextChunk,
}

impl CancelEffect {
    /// The status the operation has after the request.
    pub fn status(self) -> OperationStatus {
        match self {
            CancelEffect::Now => OperationStatus::Cancelled,
            CancelEffect::AtNextChunk => OperationStatus::Running,
        }
    }
}

/// What cancelling operation `id` in `status` does. Fails with [`Error::Conflict`] when it
/// has finished.
pub fn cancel(id: &str, status: OperationStatus) -> Result<CancelEffect> {
    match status {
        OperationStatus::Pending => Ok(CancelEffect::Now),
        OperationStatus::Running => Ok(CancelEffect::AtNextChunk),
        done => Err(Error::Conflict {
            what: format!("operation {id}"),
            status: done.as_str().to_owned(),
            message: format!("operation {id} is {done} and cannot be cancelled"),
        }),
    }
}

/// What a runner holding an operation does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing: it has finished.
    Finished,
    /// Let go of it (the runner is pausing): it stays running and the next runner resumes it.
    Pause,
    /// End it cancelled: a cancel was asked for.
    Cancel,
    /// Run its next chunk.
    Step,
}

/// The next move of a runner holding an operation in `status`, with a cancel requested or not,
/// while the runner is `pausing` or not. A pause goes before a cancel: the runner that resumes
/// the operation cancels it.
pub fn next(status: OperationStatus, cancel_requested: bool, pausing: bool) -> Next {
    if status.is_finished() {
        Next::Finished
    } else if pausing {
        Next::Pause
    } else if cancel_requested {
        Next::Cancel
    } else {
        Next::Step
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::ErrorKind;
    use OperationStatus::*;

    const NOW: Timestamp = Timestamp(10_000);

    #[test]
    fn a_pending_operation_may_be_taken_by_anyone() {
        assert!(may_claim(Pending, None, None, "a", NOW));
    }

    #[test]
    fn a_running_operation_is_taken_over_only_when_its_lease_ran_out() {
        let live = Some(Timestamp(10_001));
        let expired = Some(Timestamp(10_000));
        assert!(!may_claim(Running, Some("b"), live, "a", NOW));
        assert!(may_claim(Running, Some("b"), expired, "a", NOW));
        assert!(may_claim(Running, None, live, "a", NOW));
        // Its own holder takes it again (resuming after a pause of its own).
        assert!(may_claim(Running, Some("a"), live, "a", NOW));
    }

    #[test]
    fn a_finished_operation_is_never_taken() {
        for status in [Completed, Failed, Cancelled] {
            assert!(!may_claim(status, None, None, "a", NOW), "{status}");
        }
    }

    #[test]
    fn cancelling_stops_a_pending_operation_now_and_a_running_one_at_its_next_chunk() {
        assert_eq!(cancel("x", Pending).unwrap(), CancelEffect::Now);
        assert_eq!(CancelEffect::Now.status(), Cancelled);
        assert_eq!(cancel("x", Running).unwrap(), CancelEffect::AtNextChunk);
        assert_eq!(CancelEffect::AtNextChunk.status(), Running);
    }

    #[test]
    fn a_finished_operation_cannot_be_cancelled() {
        for status in [Completed, Failed, Cancelled] {
            let e = cancel("x", status).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Conflict);
            assert!(e.to_string().contains(status.as_str()), "{e}");
        }
    }

    #[test]
    fn a_runner_pauses_before_it_cancels_and_cancels_before_it_steps() {
        assert_eq!(next(Running, false, false), Next::Step);
        assert_eq!(next(Running, true, false), Next::Cancel);
        assert_eq!(next(Running, true, true), Next::Pause);
        assert_eq!(next(Running, false, true), Next::Pause);
        for status in [Completed, Failed, Cancelled] {
            assert_eq!(next(status, true, true), Next::Finished);
        }
    }
}

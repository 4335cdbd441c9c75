//! Cancelling an event before it is delivered: for every subscription, or for one. Durable and
//! attributable (actor, reason, time: a [`Cancellation`] on record). The rules are here, pure;
//! a store reads the event, asks [`plan`] and applies the answer in one transaction.
//!
//! - A `scheduled` or `pending` event cancelled for every subscription becomes `cancelled`: no
//!   handler ever runs for it.
//! - A `processing` event (an attempt is running) cannot be stopped mid-way: the answer is
//!   [`CancelOutcome::Running`], and the event is marked so that no retry follows the attempt
//!   (a failure, a release at shutdown or a crash ends it `cancelled`; a success ends it
//!   `done`).
//! - Cancelled for one subscription, the event stays where it is and that subscription's
//!   handler is never run for it again (the others run as usual); if its attempt is running,
//!   the answer is [`CancelOutcome::Running`].
//! - A finished event (`done`, `dlq`, `cancelled`), a subscription that has already handled
//!   the event, one already cancelled for it, or a dead letter sent back for delivery (its
//!   dead-letter record decides: resolve or abandon it) is refused with [`Error::Conflict`];
//!   an unknown event with [`Error::EventNotFound`].

use serde::{Deserialize, Serialize};

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus};

/// The longest reason a cancellation may carry, in characters.
pub const REASON_MAX_CHARS: usize = 1000;

/// A cancel to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    /// The event.
    pub event_id: EventId,
    /// Only this subscription (its name, or its id for an unnamed one); `None`: every one.
    pub subscription: Option<String>,
    /// Who cancels.
    pub actor: Actor,
    /// Why (required: 1 to [`REASON_MAX_CHARS`] characters, not blank).
    pub reason: String,
}

impl CancelRequest {
    /// Checks the reason and the subscription: fails with [`Error::Invalid`] for a blank or
    /// over-long reason, or an empty subscription.
    pub fn validate(&self) -> Result<()> {
        self.actor.validate()?;
        crate::text::check(
            "reason",
            &self.reason,
            REASON_MAX_CHARS,
            Some("a cancel needs a reason"),
        )?;
        if let Some(s) = &self.subscription {
            crate::text::check(
                "subscription",
                s,
                255,
                Some("the subscription's name (or id) is empty"),
            )?;
        }
        Ok(())
    }
}

/// What a cancel did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CancelOutcome {
    /// Nothing more will run for what was cancelled.
    Cancelled,
    /// An attempt is running now and finishes; no retry follows it (for a cancel of one
    /// subscription: that subscription's handler is not run again).
    Running,
}

impl CancelOutcome {
    /// The name stored in the database and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            CancelOutcome::Cancelled => "cancelled",
            CancelOutcome::Running => "running",
        }
    }

    /// The outcome stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<CancelOutcome> {
        [CancelOutcome::Cancelled, CancelOutcome::Running]
            .into_iter()
            .find(|o| o.as_str() == text)
    }
}

/// A cancellation on record.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancellation {
    /// The event.
    pub event_id: EventId,
    /// The subscription it was cancelled for; `None`: every one.
    pub subscription: Option<String>,
    /// What the cancel did.
    pub outcome: CancelOutcome,
    /// Who cancelled.
    pub actor: String,
    /// Why.
    pub reason: String,
    /// When.
    pub cancelled_at: Timestamp,
}

/// What a store does for a cancel, as [`plan`] decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Status → `cancelled`.
    CancelEvent,
    /// Mark the running event so that no retry follows its attempt.
    RequestCancel,
    /// Add the subscription to the event's cancelled ones; `running` if its attempt runs now.
    CancelSubscription {
        /// An attempt is running.
        running: bool,
    },
}

impl Plan {
    /// The answer the caller gets.
    pub fn outcome(&self) -> CancelOutcome {
        match self {
            Plan::CancelEvent | Plan::CancelSubscription { running: false } => {
                CancelOutcome::Cancelled
            }
            Plan::RequestCancel | Plan::CancelSubscription { running: true } => {
                CancelOutcome::Running
            }
        }
    }
}

/// The event as a cancel sees it.
#[derive(Debug, Clone, Copy)]
pub struct State<'a> {
    /// Its status.
    pub status: EventStatus,
    /// Subscriptions that have handled it.
    pub delivered: &'a [String],
    /// Subscriptions it is cancelled for.
    pub cancelled: &'a [String],
    /// Whether an earlier cancel asked for no retry after the running attempt.
    pub cancel_requested: bool,
    /// Whether it is a dead letter sent back for delivery (its record decides its fate).
    pub revived: bool,
}

/// Decides what a cancel of `id` (for `subscription`, or every one) does to an event in
/// `state`; refuses what cannot be cancelled with [`Error::Conflict`].
pub fn plan(id: EventId, state: State<'_>, subscription: Option<&str>) -> Result<Plan> {
    let refuse = |why: String| Error::Conflict {
        what: format!("event {id}"),
        status: state.status.to_string(),
        message: why,
    };
    let running = state.status == EventStatus::Processing;
    match state.status {
        EventStatus::Done | EventStatus::Dlq | EventStatus::Cancelled => {
            return Err(refuse(format!(
                "event {id} is {}: there is nothing left to cancel",
                state.status
            )));
        }
        EventStatus::Scheduled | EventStatus::Pending | EventStatus::Processing => {}
    }
    if state.revived {
        return Err(refuse(format!(
            "event {id} is a dead letter sent back for delivery: resolve or abandon its \
             dead-letter record instead"
        )));
    }
    if state.cancel_requested {
        return Err(refuse(format!(
            "event {id} is already cancelled: its running attempt is the last"
        )));
    }
    match subscription {
        None if running => Ok(Plan::RequestCancel),
        None => Ok(Plan::CancelEvent),
        Some(s) if state.delivered.iter().any(|d| d == s) => Err(refuse(format!(
            "subscription {s:?} has already handled event {id}"
        ))),
        Some(s) if state.cancelled.iter().any(|c| c == s) => Err(refuse(format!(
            "event {id} is already cancelled for subscription {s:?}"
        ))),
        Some(_) => Ok(Plan::CancelSubscription { running }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn state(status: EventStatus) -> State<'static> {
        State {
            status,
            delivered: &[],
            cancelled: &[],
            cancel_requested: false,
            revived: false,
        }
    }

    #[test]
    fn waiting_events_are_cancelled_and_running_ones_marked() {
        let id = EventId::new();
        for st in [EventStatus::Scheduled, EventStatus::Pending] {
            assert_eq!(plan(id, state(st), None).unwrap(), Plan::CancelEvent);
            assert_eq!(
                plan(id, state(st), Some("mail")).unwrap(),
                Plan::CancelSubscription { running: false }
            );
        }
        let running = state(EventStatus::Processing);
        assert_eq!(plan(id, running, None).unwrap(), Plan::RequestCancel);
        assert_eq!(Plan::RequestCancel.outcome(), CancelOutcome::Running);
        assert_eq!(
            plan(id, running, Some("mail")).unwrap().outcome(),
            CancelOutcome::Running
        );
        assert_eq!(Plan::CancelEvent.outcome(), CancelOutcome::Cancelled);
    }

    #[test]
    fn what_is_finished_handled_or_already_cancelled_is_a_conflict() {
        let id = EventId::new();
        for st in [EventStatus::Done, EventStatus::Dlq, EventStatus::Cancelled] {
            let e = plan(id, state(st), None).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Conflict);
            assert!(e.to_string().contains("nothing left to cancel"), "{e}");
        }
        let handled = ["mail".to_owned()];
        let s = State {
            delivered: &handled,
            ..state(EventStatus::Pending)
        };
        let e = plan(id, s, Some("mail")).unwrap_err();
        assert!(e.to_string().contains("already handled"), "{e}");
        assert!(plan(id, s, Some("audit")).is_ok());
        let s = State {
            cancelled: &handled,
            ..state(EventStatus::Pending)
        };
        let e = plan(id, s, Some("mail")).unwrap_err();
        assert!(e.to_string().contains("already cancelled"), "{e}");
        let s = State {
            cancel_requested: true,
            ..state(EventStatus::Processing)
        };
        assert_eq!(plan(id, s, None).unwrap_err().kind(), ErrorKind::Conflict);
        let s = State {
            revived: true,
            ..state(EventStatus::Pending)
        };
        let e = plan(id, s, None).unwrap_err();
        assert!(e.to_string().contains("dead-letter record"), "{e}");
    }

    #[test]
    fn outcomes_round_trip_through_their_stored_names() {
        for o in [CancelOutcome::Cancelled, CancelOutcome::Running] {
            assert_eq!(CancelOutcome::parse(o.as_str()), Some(o));
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
        }
        assert_eq!(CancelOutcome::parse("done"), None);
    }

    #[test]
    fn a_request_needs_a_reason() {
        let mut r = CancelRequest {
            event_id: EventId::new(),
            subscription: None,
            actor: Actor::new("ada", crate::actor::ActorKind::Library),
            reason: "customer withdrew".into(),
        };
        assert!(r.validate().is_ok());
        r.reason = "  ".into();
        assert_eq!(r.validate().unwrap_err().kind(), ErrorKind::InvalidInput);
        r.reason = "x".repeat(REASON_MAX_CHARS + 1);
        assert_eq!(r.validate().unwrap_err().kind(), ErrorKind::InvalidInput);
        r.reason = "ok".into();
        r.subscription = Some(String::new());
        assert_eq!(r.validate().unwrap_err().kind(), ErrorKind::InvalidInput);
    }
}

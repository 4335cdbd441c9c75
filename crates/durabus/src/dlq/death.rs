//! A death: what the dispatcher knows about an event that failed its last allowed attempt,
//! the auto-retry schedule in force, and the plan of the record write it makes.

use super::fingerprint;
use super::groups::{GroupDelta, group_delta};
use super::lifecycle::{DeadLetterPolicy, State};
use super::record::ErrorRound;
use crate::clock::Timestamp;
use crate::event::{EventId, NewEvent};
use crate::pattern::is_system_type;

/// What the dispatcher knows about an event that just failed its last allowed attempt: the
/// store turns it into a new record or a new round of an existing one, in the transaction that
/// moves the event to `dlq`.
#[derive(Debug, Clone, PartialEq)]
pub struct Death {
    /// The event's type.
    pub event_type: String,
    /// The failing subscription's key (none when interruptions used up the attempts).
    pub subscription: Option<String>,
    /// The last error.
    pub error: String,
    /// Its chain of sources.
    pub causes: Vec<String>,
    /// The failure group.
    pub fingerprint: String,
    /// The normalised message (shown for the group).
    pub signature: String,
    /// Attempts made in this round.
    pub attempts: u32,
    /// Every error of this round.
    pub errors: Vec<String>,
    /// The `system.dead_letter` event to publish with the record if the record is new (none
    /// for `system.*` events: no cascade). A later round of the same record announces
    /// nothing.
    pub announcement: Option<NewEvent>,
    /// The `system.failure_group.new` event to publish with the group if this death creates
    /// it (its fingerprint is seen for the first time; none for `system.*` events: no
    /// cascade).
    pub new_group: Option<NewEvent>,
    /// The auto-retry schedule in force.
    pub policy: DeadLetterPolicy,
    /// For an event with an ordering key: whether the key stays held by the dead letter (the
    /// failing subscription's `hold_key_on_dead_letter`) instead of moving on.
    pub hold_key: bool,
}

/// The type of the event announcing a new dead letter.
pub const SYSTEM_DEAD_LETTER: &str = "system.dead_letter";

/// The type of the event announcing a failure group seen for the first time (an error never
/// seen before, or seen again after every record of its group was purged).
pub const SYSTEM_FAILURE_GROUP_NEW: &str = "system.failure_group.new";

impl Death {
    /// Describes the death of event `id` of `event_type`, whose last round's errors are
    /// `errors`, the last by `subscription` with `error` (and `causes`).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: EventId,
        event_type: &str,
        subscription: Option<&str>,
        error: &str,
        causes: Vec<String>,
        errors: Vec<String>,
        attempts: u32,
        policy: DeadLetterPolicy,
    ) -> Death {
        let key = subscription.unwrap_or("");
        let fp = fingerprint::fingerprint(key, error);
        // A system event that dies is a dead letter like any other, but announces nothing:
        // a failing `system.dead_letter` handler must not produce more of them.
        let signature = fingerprint::normalise(error);
        let announced = !is_system_type(event_type);
        let new_group = announced
            .then(|| {
                NewEvent::system(
                    SYSTEM_FAILURE_GROUP_NEW,
                    &serde_json::json!({
                        "fingerprint": fp,
                        "subscription": subscription,
                        "signature": signature,
                        "error": error,
                        "type": event_type,
                        "event_id": id,
                    }),
                )
                .ok()
            })
            .flatten();
        let announcement = announced
            .then(|| {
                NewEvent::system(
                    SYSTEM_DEAD_LETTER,
                    &serde_json::json!({
                        "event_id": id,
                        "type": event_type,
                        "error": error,
                        "attempts": attempts,
                        "fingerprint": fp,
                    }),
                )
                .ok()
            })
            .flatten();
        Death {
            event_type: event_type.to_owned(),
            subscription: subscription.map(str::to_owned),
            error: error.to_owned(),
            causes,
            signature,
            fingerprint: fp,
            attempts,
            errors,
            announcement,
            new_group,
            policy,
            hold_key: false,
        }
    }

    /// The same death, keeping an ordering key held (`hold`) or not.
    #[must_use]
    pub fn holding_key(mut self, hold: bool) -> Death {
        self.hold_key = hold;
        self
    }
}

/// What a record already holds when its event dies again.
#[derive(Debug, Clone, PartialEq)]
pub struct Existing {
    /// Its lifecycle.
    pub state: State,
    /// Its failure group.
    pub fingerprint: String,
    /// Its rounds so far.
    pub history: Vec<ErrorRound>,
}

/// What a store writes for a death.
#[derive(Debug, Clone, PartialEq)]
pub struct DeathWrite {
    /// The record's lifecycle after the death.
    pub state: State,
    /// Its rounds, this one appended.
    pub history: Vec<ErrorRound>,
    /// Changes to groups other than the death's own (when the fingerprint changed).
    pub old_group: Option<GroupDelta>,
    /// The change to the death's own group (created if missing).
    pub group: GroupDelta,
}

/// Plans the record write for `death` at `now`: a new record, or a new round of `existing`.
pub fn plan_death(existing: Option<Existing>, death: &Death, now: Timestamp) -> DeathWrite {
    let round = |n: u32, retried_by: Option<String>| ErrorRound {
        round: n,
        failed_at: now,
        errors: death.errors.clone(),
        causes: death.causes.clone(),
        retried_by,
    };
    match existing {
        None => {
            let state = State::created(now, &death.policy);
            DeathWrite {
                group: group_delta(&death.fingerprint, None, Some(state.status)),
                history: vec![round(1, None)],
                state,
                old_group: None,
            }
        }
        Some(old) => {
            let state = old.state.died_again(&death.policy);
            let mut history = old.history;
            history.push(round(state.rounds, old.state.last_retry_by.clone()));
            let (old_group, group) = if old.fingerprint == death.fingerprint {
                (
                    None,
                    group_delta(
                        &death.fingerprint,
                        Some(old.state.status),
                        Some(state.status),
                    ),
                )
            } else {
                (
                    Some(group_delta(&old.fingerprint, Some(old.state.status), None)),
                    group_delta(&death.fingerprint, None, Some(state.status)),
                )
            };
            DeathWrite {
                state,
                history,
                old_group,
                group,
            }
        }
    }
}

/// Splits an error as the dispatcher writes it (`attempt N [key]: message`, or `attempt N:
/// message`) into the subscription key and the message. Other texts are all message.
pub fn split_error(text: &str) -> (Option<&str>, &str) {
    let Some(rest) = text.strip_prefix("attempt ") else {
        return (None, text);
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return (None, text);
    }
    let rest = &rest[digits..];
    if let Some(keyed) = rest.strip_prefix(" [")
        && let Some(end) = keyed.find("]: ")
    {
        return (Some(&keyed[..end]), &keyed[end + 3..]);
    }
    rest.strip_prefix(": ").map_or((None, text), |m| (None, m))
}

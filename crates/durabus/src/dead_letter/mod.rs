//! Dead letters: the record kept for every event whose delivery failed every allowed attempt,
//! its lifecycle, and failure groups. Plain data and pure rules, shared by the dispatcher (which
//! describes a death), the stores (which apply the rules inside their transactions) and the
//! operations layer (which acts on records).
//!
//! ```text
//!              dies                retry (auto or manual)
//!   (event) ─────────▶ pending ───────────────────────────▶ retrying
//!                       │  ▲  ◀──── fails every attempt ────┘   │
//!               abandon │  │ retry                              │ delivered
//!                       ▼  │                                    ▼
//!                     abandoned ───────── resolve ─────────▶ resolved
//!   pending ── resolve (note) ──▶ resolved
//! ```
//!
//! Auto-retry: [`DeadLetterPolicy::auto_retry`] (1 h, 6 h, 24 h by default): the first auto
//! retry is due that long after the record was created, each later one that long after the
//! previous retry; after the last, retries are manual only. Abandoning stops auto-retry.

mod actor;
mod filter;
pub mod fingerprint;
mod groups;
mod lifecycle;

pub use actor::{AUTO_RETRY, Actor, ActorKind};
pub use filter::{DeadLetterFilter, Keyset, MAX_PAGE};
pub use groups::{DeadLetterGroup, GROUP_TYPES_LISTED, GroupDelta, group_delta, sum_deltas};
pub use lifecycle::{Action, Change, State, apply};

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, NewEvent};
use crate::pattern::is_system_type;

/// Where a dead letter is in its lifecycle.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterStatus {
    /// Waiting: for its next auto retry, or for an operator.
    Pending,
    /// Sent back through normal delivery; the outcome of that round is not known yet.
    Retrying,
    /// Done with: delivered by a retry, or closed by an operator with a note.
    Resolved,
    /// Given up on: no more auto retries (a manual retry is still possible).
    Abandoned,
}

impl DeadLetterStatus {
    /// Every status.
    pub const ALL: [DeadLetterStatus; 4] = [
        DeadLetterStatus::Pending,
        DeadLetterStatus::Retrying,
        DeadLetterStatus::Resolved,
        DeadLetterStatus::Abandoned,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterStatus::Pending => "pending",
            DeadLetterStatus::Retrying => "retrying",
            DeadLetterStatus::Resolved => "resolved",
            DeadLetterStatus::Abandoned => "abandoned",
        }
    }

    /// Whether the record is still open (pending or retrying).
    pub fn is_open(self) -> bool {
        matches!(self, DeadLetterStatus::Pending | DeadLetterStatus::Retrying)
    }
}

impl fmt::Display for DeadLetterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for DeadLetterStatus {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DeadLetterStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::InvalidConfig(format!(
                    "unknown dead-letter status {s:?}; expected pending, retrying, resolved or abandoned"
                ))
            })
    }
}

/// One round of delivery attempts that ended in the dead-letter queue.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRound {
    /// 1 for the first death, 2 after the first retry failed again, …
    pub round: u32,
    /// When the round ended.
    pub failed_at: Timestamp,
    /// Every attempt's error in the round, oldest first.
    pub errors: Vec<String>,
    /// The last error's chain of sources (the handler error's `source()`s), outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<String>,
    /// Who sent the dead letter back for this round (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<String>,
}

/// A dead-letter record.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter {
    /// The event's id (one record per event).
    pub event_id: EventId,
    /// Position in the queue: grows with each new record; keyset pagination and the upper
    /// bound of bulk operations use it.
    pub seq: i64,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload as JSON text (redacted where configured, in operator views).
    #[serde(serialize_with = "raw_json")]
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub payload: String,
    /// The key of the subscription whose handler failed last (none when attempts were used up
    /// by interruptions before any handler ran).
    pub subscription: Option<String>,
    /// The last error.
    pub last_error: String,
    /// The last error's chain of sources.
    pub causes: Vec<String>,
    /// Every round's errors, oldest first; a retry never erases them.
    pub error_history: Vec<ErrorRound>,
    /// The failure group (see [`fingerprint`]).
    pub fingerprint: String,
    /// Attempts made in the last round.
    pub attempts: u32,
    /// Where the record is in its lifecycle.
    pub status: DeadLetterStatus,
    /// Auto retries made.
    pub auto_retry_count: u32,
    /// Manual retries made.
    pub manual_retry_count: u32,
    /// When the next auto retry is due; `None`: manual only (or not pending).
    pub next_auto_retry_at: Option<Timestamp>,
    /// When the event first became a dead letter.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// When it was last sent back.
    pub last_retry_at: Option<Timestamp>,
    /// Who sent it back last (an operator, or `auto-retry`).
    pub last_retry_by: Option<String>,
    /// When it was resolved or abandoned.
    pub resolved_at: Option<Timestamp>,
    /// Who resolved or abandoned it (`auto-retry` or the retry's actor when a retry delivered it).
    pub resolved_by: Option<String>,
    /// The operator's note on resolving or abandoning.
    pub resolution_note: Option<String>,
}

/// A dead-letter record as listed: everything but its payload, causes and error history (read
/// one record for those), so a page stays small and quick to read.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterSummary {
    /// The event's id.
    pub event_id: EventId,
    /// Position in the queue (keyset pagination).
    pub seq: i64,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The subscription whose handler failed last.
    pub subscription: Option<String>,
    /// The last error.
    pub last_error: String,
    /// The failure group.
    pub fingerprint: String,
    /// Attempts in the last round.
    pub attempts: u32,
    /// Rounds of delivery that ended in the queue (1 + failed retries).
    pub rounds: u32,
    /// Where the record is in its lifecycle.
    pub status: DeadLetterStatus,
    /// Auto retries made.
    pub auto_retry_count: u32,
    /// Manual retries made.
    pub manual_retry_count: u32,
    /// When the next auto retry is due.
    pub next_auto_retry_at: Option<Timestamp>,
    /// When it first became a dead letter.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// Who sent it back last.
    pub last_retry_by: Option<String>,
    /// Who resolved or abandoned it.
    pub resolved_by: Option<String>,
}

fn raw_json<S: Serializer>(payload: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    match serde_json::value::RawValue::from_string(payload.to_owned()) {
        Ok(raw) => raw.serialize(s),
        Err(_) => s.serialize_str(payload),
    }
}

/// How dead letters are retried automatically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterPolicy {
    /// The wait before each auto retry: the first after the record is created, each later one
    /// after the previous retry. Defaults to 1 h, 6 h, 24 h (then manual only). Empty: no
    /// auto retries.
    pub auto_retry: Vec<Duration>,
}

impl Default for DeadLetterPolicy {
    fn default() -> Self {
        DeadLetterPolicy {
            auto_retry: vec![
                Duration::from_secs(3600),
                Duration::from_secs(6 * 3600),
                Duration::from_secs(24 * 3600),
            ],
        }
    }
}

impl DeadLetterPolicy {
    /// No auto retries: dead letters wait for an operator.
    pub fn manual_only() -> Self {
        DeadLetterPolicy {
            auto_retry: Vec::new(),
        }
    }

    /// When the auto retry after `auto_retry_count` earlier ones is due, counted from `from`
    /// (the creation time for the first, the last retry for the others); `None` when the
    /// schedule is used up.
    pub fn next_auto_retry(&self, auto_retry_count: u32, from: Timestamp) -> Option<Timestamp> {
        self.auto_retry
            .get(usize::try_from(auto_retry_count).ok()?)
            .map(|d| from.plus(*d))
    }
}

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
    /// The auto-retry schedule in force.
    pub policy: DeadLetterPolicy,
}

/// The type of the event announcing a new dead letter.
pub const SYSTEM_DEAD_LETTER: &str = "system.dead_letter";

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
        let announcement = (!is_system_type(event_type))
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
            signature: fingerprint::normalise(error),
            fingerprint: fp,
            attempts,
            errors,
            announcement,
            policy,
        }
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

#[cfg(test)]
mod tests;

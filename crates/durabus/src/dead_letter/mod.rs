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

pub mod fingerprint;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, NewEvent};
use crate::pattern::is_system_type;

/// Where a dead letter is in its lifecycle.
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

/// Who did something: recorded on every operator action, and used by metrics by kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Actor {
    /// A name: an OS user, an API token's name, `auto-retry`.
    pub name: String,
    /// Where the action came from.
    pub kind: ActorKind,
}

/// Where an action came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    /// The bus itself (the auto-retry job, retention).
    Auto,
    /// The command-line tool.
    Cli,
    /// The admin HTTP API.
    Api,
    /// An application calling the library.
    Library,
}

impl ActorKind {
    /// The name used in metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Auto => "auto",
            ActorKind::Cli => "cli",
            ActorKind::Api => "api",
            ActorKind::Library => "library",
        }
    }
}

/// The actor name of the auto-retry job, recorded as `resolved_by` when an auto retry
/// delivers a dead letter.
pub const AUTO_RETRY: &str = "auto-retry";

impl Actor {
    /// An actor of `kind` named `name`.
    pub fn new(name: impl Into<String>, kind: ActorKind) -> Actor {
        Actor {
            name: name.into(),
            kind,
        }
    }

    /// The auto-retry job.
    pub fn auto_retry() -> Actor {
        Actor::new(AUTO_RETRY, ActorKind::Auto)
    }

    /// Refuses an empty name.
    pub fn validate(&self) -> Result<()> {
        if self.name.trim().is_empty() {
            return Err(Error::InvalidConfig(
                "the actor's name must not be empty".into(),
            ));
        }
        if self.name.len() > 200 {
            return Err(Error::InvalidConfig(
                "the actor's name must be at most 200 bytes".into(),
            ));
        }
        Ok(())
    }
}

/// One round of delivery attempts that ended in the dead-letter queue.
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
    /// The `system.dead_letter` event to publish with the record (none for `system.*`
    /// events: no cascade).
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

/// The lifecycle fields of a record, as the rules need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// See [`DeadLetter::status`].
    pub status: DeadLetterStatus,
    /// See [`DeadLetter::auto_retry_count`].
    pub auto_retry_count: u32,
    /// See [`DeadLetter::manual_retry_count`].
    pub manual_retry_count: u32,
    /// See [`DeadLetter::next_auto_retry_at`].
    pub next_auto_retry_at: Option<Timestamp>,
    /// See [`DeadLetter::created_at`].
    pub created_at: Timestamp,
    /// See [`DeadLetter::last_retry_at`].
    pub last_retry_at: Option<Timestamp>,
    /// See [`DeadLetter::last_retry_by`].
    pub last_retry_by: Option<String>,
    /// See [`DeadLetter::resolved_at`].
    pub resolved_at: Option<Timestamp>,
    /// See [`DeadLetter::resolved_by`].
    pub resolved_by: Option<String>,
    /// See [`DeadLetter::resolution_note`].
    pub resolution_note: Option<String>,
    /// Rounds recorded so far.
    pub rounds: u32,
}

impl State {
    /// The state of a record that was just created at `now`.
    pub fn created(now: Timestamp, policy: &DeadLetterPolicy) -> State {
        State {
            status: DeadLetterStatus::Pending,
            auto_retry_count: 0,
            manual_retry_count: 0,
            next_auto_retry_at: policy.next_auto_retry(0, now),
            created_at: now,
            last_retry_at: None,
            last_retry_by: None,
            resolved_at: None,
            resolved_by: None,
            resolution_note: None,
            rounds: 1,
        }
    }

    /// The state after the event died again (a retry round failed): back to `pending` with
    /// the next auto retry per the schedule, or back to `abandoned` if it had been abandoned
    /// before this (manual) retry: abandoning stops auto retries for good.
    pub fn died_again(&self, policy: &DeadLetterPolicy) -> State {
        // Only an abandoned record can be retried with `resolved_at` set.
        let status = if self.resolved_at.is_some() {
            DeadLetterStatus::Abandoned
        } else {
            DeadLetterStatus::Pending
        };
        let next = (status == DeadLetterStatus::Pending)
            .then(|| {
                policy.next_auto_retry(
                    self.auto_retry_count,
                    self.last_retry_at.unwrap_or(self.created_at),
                )
            })
            .flatten();
        State {
            status,
            next_auto_retry_at: next,
            rounds: self.rounds.saturating_add(1),
            ..self.clone()
        }
    }

    /// The state after a retry round delivered the event: resolved by whoever sent it back.
    pub fn delivered(&self, now: Timestamp) -> State {
        State {
            status: DeadLetterStatus::Resolved,
            next_auto_retry_at: None,
            resolved_at: Some(now),
            resolved_by: Some(
                self.last_retry_by
                    .clone()
                    .unwrap_or_else(|| AUTO_RETRY.to_owned()),
            ),
            ..self.clone()
        }
    }
}

/// What an operator (or the auto-retry job) does to a dead letter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    /// Send it back through normal delivery with a fresh attempt budget.
    Retry,
    /// Close it: done with, for the reason in the note.
    Resolve {
        /// Why (required).
        note: String,
    },
    /// Stop auto-retrying it.
    Abandon {
        /// Why (optional).
        #[serde(default)]
        note: Option<String>,
    },
    /// Delete the record and its event.
    Purge,
}

impl Action {
    /// The action's name: `retry`, `resolve`, `abandon`, `purge`.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Retry => "retry",
            Action::Resolve { .. } => "resolve",
            Action::Abandon { .. } => "abandon",
            Action::Purge => "purge",
        }
    }

    /// Refuses a resolve without a note and notes that are too long.
    pub fn validate(&self) -> Result<()> {
        let note = match self {
            Action::Resolve { note } => {
                if note.trim().is_empty() {
                    return Err(Error::InvalidConfig(
                        "resolving a dead letter needs a note that says why".into(),
                    ));
                }
                Some(note)
            }
            Action::Abandon { note } => note.as_ref(),
            _ => None,
        };
        if note.is_some_and(|n| n.len() > 2000) {
            return Err(Error::InvalidConfig(
                "a note must be at most 2000 bytes".into(),
            ));
        }
        Ok(())
    }
}

/// What applying an action changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The record gets a new state.
    Update {
        /// The record's new lifecycle.
        state: State,
        /// Whether the event goes back to `pending` for delivery.
        requeue: bool,
    },
    /// The record and its event are deleted.
    Delete,
}

/// Applies `action` by `actor` at `now` to a record in `state`. Fails with
/// [`Error::Conflict`](crate::Error::Conflict) when its status does not allow the action:
/// nothing is resolved or abandoned twice, a record being retried is neither retried again,
/// resolved, abandoned nor purged until its round ends, and a resolved record is closed.
pub fn apply(
    event_id: EventId,
    state: &State,
    action: &Action,
    actor: &Actor,
    now: Timestamp,
) -> Result<Change> {
    use DeadLetterStatus::*;
    let conflict = |hint: &str| {
        Err(Error::Conflict {
            what: format!("dead letter {event_id}"),
            status: state.status.as_str().to_owned(),
            message: format!(
                "cannot {} dead letter {event_id}: it is {} ({hint})",
                action.name(),
                state.status
            ),
        })
    };
    match (action, state.status) {
        (Action::Retry, Pending | Abandoned) => {
            let auto = actor.kind == ActorKind::Auto;
            Ok(Change::Update {
                state: State {
                    status: Retrying,
                    auto_retry_count: state.auto_retry_count + u32::from(auto),
                    manual_retry_count: state.manual_retry_count + u32::from(!auto),
                    next_auto_retry_at: None,
                    last_retry_at: Some(now),
                    last_retry_by: Some(actor.name.clone()),
                    ..state.clone()
                },
                requeue: true,
            })
        }
        (Action::Retry, Retrying) => conflict("wait for that round to end"),
        (Action::Retry, Resolved) => conflict("a resolved dead letter is closed"),
        (Action::Resolve { note }, Pending | Abandoned) => Ok(Change::Update {
            state: State {
                status: Resolved,
                next_auto_retry_at: None,
                resolved_at: Some(now),
                resolved_by: Some(actor.name.clone()),
                resolution_note: Some(note.clone()),
                ..state.clone()
            },
            requeue: false,
        }),
        (Action::Resolve { .. }, Retrying) => conflict("wait for that round to end"),
        (Action::Resolve { .. }, Resolved) => conflict("it was resolved already"),
        (Action::Abandon { note }, Pending) => Ok(Change::Update {
            state: State {
                status: Abandoned,
                next_auto_retry_at: None,
                resolved_at: Some(now),
                resolved_by: Some(actor.name.clone()),
                resolution_note: note.clone(),
                ..state.clone()
            },
            requeue: false,
        }),
        (Action::Abandon { .. }, Retrying) => conflict("wait for that round to end"),
        (Action::Abandon { .. }, Abandoned) => conflict("it was abandoned already"),
        (Action::Abandon { .. }, Resolved) => conflict("a resolved dead letter is closed"),
        (Action::Purge, Retrying) => conflict("wait for that round to end"),
        (Action::Purge, _) => Ok(Change::Delete),
    }
}

/// Which dead letters a listing or a bulk operation covers. Every field narrows; an empty
/// filter is everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetterFilter {
    /// Only these statuses.
    pub status: Vec<DeadLetterStatus>,
    /// Only these event types: exact, or globs with `*`.
    pub event_type: Option<String>,
    /// Only failures of this subscription (its key).
    pub subscription: Option<String>,
    /// Only this failure group.
    pub group: Option<String>,
    /// Only records created at or after this time.
    pub created_from: Option<Timestamp>,
    /// Only records created before this time.
    pub created_before: Option<Timestamp>,
}

impl DeadLetterFilter {
    /// Whether the filter selects everything.
    pub fn is_empty(&self) -> bool {
        *self == DeadLetterFilter::default()
    }

    /// Checks the filter: a pattern that is not a valid glob, an empty time range.
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = &self.event_type {
            crate::pattern::Pattern::new(t)?;
        }
        if let (Some(from), Some(before)) = (self.created_from, self.created_before)
            && from >= before
        {
            return Err(Error::InvalidConfig(format!(
                "empty time range: from ({from}) must be before to ({before})"
            )));
        }
        if self
            .group
            .as_ref()
            .is_some_and(|g| g.is_empty() || g.len() > 64)
        {
            return Err(Error::InvalidConfig(
                "a group is a fingerprint of 1 to 64 characters".into(),
            ));
        }
        Ok(())
    }
}

/// A page of a keyset listing: records with `seq` below `before` (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keyset {
    /// Start after this position (exclusive): the `seq` of the last record of the previous
    /// page. `None`: the first page.
    pub before: Option<i64>,
    /// Most records to return. Defaults to 50; at most 1000.
    pub limit: u32,
}

/// The most records one page may hold.
pub const MAX_PAGE: u32 = 1000;

impl Default for Keyset {
    fn default() -> Self {
        Keyset {
            before: None,
            limit: 50,
        }
    }
}

impl Keyset {
    /// Refuses a page over [`MAX_PAGE`].
    pub fn validate(&self) -> Result<()> {
        if self.limit > MAX_PAGE {
            return Err(Error::InvalidConfig(format!(
                "a page holds at most {MAX_PAGE} records, not {}",
                self.limit
            )));
        }
        Ok(())
    }
}

/// A failure group: dead letters with one fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroup {
    /// The fingerprint.
    pub fingerprint: String,
    /// The subscription that failed.
    pub subscription: Option<String>,
    /// The normalised message.
    pub signature: String,
    /// One message as it was written.
    pub sample_error: String,
    /// Records in the group, any status.
    pub count: u64,
    /// Of those, pending or retrying.
    pub open: u64,
    /// When the first of them died.
    pub first_seen: Timestamp,
    /// When the last of them died.
    pub last_seen: Timestamp,
    /// The event types involved (at most 20 listed).
    pub event_types: Vec<String>,
}

/// The most event types a group lists.
pub const GROUP_TYPES_LISTED: usize = 20;

/// A change to a failure group's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDelta {
    /// The group.
    pub fingerprint: String,
    /// Added to its record count.
    pub count: i64,
    /// Added to its open count.
    pub open: i64,
}

fn open(status: Option<DeadLetterStatus>) -> i64 {
    i64::from(status.is_some_and(DeadLetterStatus::is_open))
}

/// How a record's move from `before` to `after` (`None`: no record) changes its group.
pub fn group_delta(
    fingerprint: &str,
    before: Option<DeadLetterStatus>,
    after: Option<DeadLetterStatus>,
) -> GroupDelta {
    GroupDelta {
        fingerprint: fingerprint.to_owned(),
        count: i64::from(after.is_some()) - i64::from(before.is_some()),
        open: open(after) - open(before),
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

/// Sums group changes by group, dropping the ones that change nothing: what a store writes
/// once per group after acting on many records.
pub fn sum_deltas(deltas: impl IntoIterator<Item = GroupDelta>) -> Vec<GroupDelta> {
    let mut out: Vec<GroupDelta> = Vec::new();
    for d in deltas {
        match out.iter_mut().find(|o| o.fingerprint == d.fingerprint) {
            Some(o) => {
                o.count += d.count;
                o.open += d.open;
            }
            None => out.push(d),
        }
    }
    out.retain(|d| d.count != 0 || d.open != 0);
    out
}

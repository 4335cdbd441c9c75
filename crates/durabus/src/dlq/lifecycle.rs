//! The lifecycle rules of a record: its state, the operator's actions and what they change.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::record::DeadLetterStatus;
use crate::actor::{AUTO_RETRY, Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;

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

/// The lifecycle fields of a record, as the rules need them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// See [`DeadLetter::status`](super::DeadLetter::status).
    pub status: DeadLetterStatus,
    /// See [`DeadLetter::auto_retry_count`](super::DeadLetter::auto_retry_count).
    pub auto_retry_count: u32,
    /// See [`DeadLetter::manual_retry_count`](super::DeadLetter::manual_retry_count).
    pub manual_retry_count: u32,
    /// See [`DeadLetter::next_auto_retry_at`](super::DeadLetter::next_auto_retry_at).
    pub next_auto_retry_at: Option<Timestamp>,
    /// See [`DeadLetter::created_at`](super::DeadLetter::created_at).
    pub created_at: Timestamp,
    /// See [`DeadLetter::last_retry_at`](super::DeadLetter::last_retry_at).
    pub last_retry_at: Option<Timestamp>,
    /// See [`DeadLetter::last_retry_by`](super::DeadLetter::last_retry_by).
    pub last_retry_by: Option<String>,
    /// See [`DeadLetter::resolved_at`](super::DeadLetter::resolved_at).
    pub resolved_at: Option<Timestamp>,
    /// See [`DeadLetter::resolved_by`](super::DeadLetter::resolved_by).
    pub resolved_by: Option<String>,
    /// See [`DeadLetter::resolution_note`](super::DeadLetter::resolution_note).
    pub resolution_note: Option<String>,
    /// Rounds recorded so far.
    pub rounds: u32,
    /// Whether a worker has picked up the event of a `retrying` record (its round is under
    /// way). Until one has, the retry can be called off: the record can be resolved or
    /// abandoned and its event goes back to the dead-letter queue. Ignored in other statuses.
    pub round_started: bool,
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
            round_started: false,
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
        match self {
            Action::Resolve { note } => crate::text::check(
                "note",
                note,
                MAX_NOTE,
                Some("resolving a dead letter needs a note that says why"),
            ),
            Action::Abandon { note: Some(note) } => {
                crate::text::check("note", note, MAX_NOTE, None)
            }
            _ => Ok(()),
        }
    }
}

impl Action {
    /// The actions a record in `status` takes, by name (`retry`, `resolve`, `abandon`,
    /// `purge`), as [`apply`] decides them: what an operator's screen offers. (A `retrying`
    /// record offers resolve and abandon, which call its retry off; they are refused once a
    /// worker has picked its event up.)
    pub fn allowed(status: DeadLetterStatus) -> Vec<&'static str> {
        let probe = State {
            status,
            ..State::created(Timestamp(0), &DeadLetterPolicy::manual_only())
        };
        let someone = Actor::new("operator", ActorKind::Library);
        [
            Action::Retry,
            Action::Resolve { note: "n".into() },
            Action::Abandon { note: None },
            Action::Purge,
        ]
        .into_iter()
        .filter(|a| {
            apply(
                EventId(uuid::Uuid::nil()),
                &probe,
                a,
                &someone,
                Timestamp(0),
            )
            .is_ok()
        })
        .map(|a| a.name())
        .collect()
    }
}

/// The longest note on resolving or abandoning a dead letter, in characters.
pub const MAX_NOTE: usize = 2000;

/// What applying an action changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The record gets a new state.
    Update {
        /// The record's new lifecycle.
        state: State,
        /// Whether the event goes back to `pending` for delivery.
        requeue: bool,
        /// Whether the event is taken back out of delivery (`pending` → `dlq`): a retry that no
        /// worker has picked up yet, called off by a resolve or an abandon.
        withdraw: bool,
    },
    /// The record and its event are deleted.
    Delete,
}

/// Applies `action` by `actor` at `now` to a record in `state`. Fails with
/// [`Error::Conflict`](crate::Error::Conflict) when its status does not allow the action:
/// nothing is resolved or abandoned twice, a record being retried is neither retried again nor
/// purged until its round ends (and resolved or abandoned only while no worker has picked its
/// event up: that calls the retry off), and a resolved record is closed.
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
                    round_started: false,
                    ..state.clone()
                },
                requeue: true,
                withdraw: false,
            })
        }
        (Action::Retry, Retrying) => conflict("wait for that round to end"),
        (Action::Retry, Resolved) => conflict("a resolved dead letter is closed"),
        (Action::Resolve { note }, Pending | Abandoned | Retrying) => {
            if state.status == Retrying && state.round_started {
                return conflict("a worker is delivering it now: wait for that round to end");
            }
            Ok(Change::Update {
                state: State {
                    status: Resolved,
                    next_auto_retry_at: None,
                    resolved_at: Some(now),
                    resolved_by: Some(actor.name.clone()),
                    resolution_note: Some(note.clone()),
                    ..state.clone()
                },
                requeue: false,
                withdraw: state.status == Retrying,
            })
        }
        (Action::Resolve { .. }, Resolved) => conflict("it was resolved already"),
        (Action::Abandon { note }, Pending | Retrying) => {
            if state.status == Retrying && state.round_started {
                return conflict("a worker is delivering it now: wait for that round to end");
            }
            Ok(Change::Update {
                state: State {
                    status: Abandoned,
                    next_auto_retry_at: None,
                    resolved_at: Some(now),
                    resolved_by: Some(actor.name.clone()),
                    resolution_note: note.clone(),
                    ..state.clone()
                },
                requeue: false,
                withdraw: state.status == Retrying,
            })
        }
        (Action::Abandon { .. }, Abandoned) => conflict("it was abandoned already"),
        (Action::Abandon { .. }, Resolved) => conflict("a resolved dead letter is closed"),
        (Action::Purge, Retrying) => conflict("wait for that round to end"),
        (Action::Purge, _) => Ok(Change::Delete),
    }
}

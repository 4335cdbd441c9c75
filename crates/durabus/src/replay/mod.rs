//! Replay: what a replay selects, how it is asked for, what it publishes and how it is
//! paced. Plain data and pure logic; the service is [`Replays`], the runner `run.rs`.
//!
//! A replay walks stored events (any status, completed ones included) that match a
//! [`ReplaySelection`], frozen at submit: the store's highest position then is the upper bound,
//! and the time range is cut at the submit time, so events published later, the replay's own
//! among them, are never swept in. Each selected event is either **re-published** as a new
//! event (same type, payload and metadata, plus `replayOf` and `replayOperation`) that goes
//! through normal delivery with its own retries and dead letters, or handed to a handler given
//! by the library caller. The original is never changed.

mod hooks;
mod limiter;
mod run;
mod service;

pub use hooks::{ReplayFilter, ReplayHooks};
pub use run::ReplayKind;
pub use service::{Replays, SAMPLES};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::dlq::Actor;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, EventStatus, NewEvent};
use crate::pattern::{Pattern, is_system_type};

pub use limiter::TokenBucket;

/// The metadata key a re-published event carries: the id of the event it replays.
pub const REPLAY_OF: &str = crate::event::REPLAY_OF;
/// The metadata key a re-published event carries: the id of the replay operation.
pub const REPLAY_OPERATION: &str = "replayOperation";
/// The event published when a replay starts.
pub const STARTED: &str = "system.replay.started";
/// The event published when a replay ends (completed, failed or cancelled: the payload says).
pub const COMPLETED: &str = "system.replay.completed";
/// Most ids one selection may list.
pub const MAX_IDS: usize = 10_000;
/// Most type patterns one selection may list.
pub const MAX_TYPES: usize = 100;
/// The rate (events/s) of replays started from the CLI or the HTTP API when none is given.
///
/// At this rate a replay re-publishes 100 events per 50 ms, in transactions of at most 100
/// rows: the one SQLite writer is busy well under a millisecond per chunk, and `durabus bench`
/// shows one live publisher's p99 unchanged while it runs (`docs/BENCHMARKS.md`). It still
/// moves 7.2 million events an hour. Operators who need more say so with `--rate` (or
/// `--unthrottled`); library callers choose their own.
pub const DEFAULT_OPERATOR_RATE: u32 = 2_000;
/// The highest rate accepted (events/s). Above it, say `unthrottled`.
pub const MAX_RATE: u32 = 1_000_000;

/// Which stored events a replay covers. Every criterion given must hold; at least a start time
/// or a list of ids is needed, unless `all` says the whole history is meant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplaySelection {
    /// Events created at or after this time.
    pub from: Option<Timestamp>,
    /// Events created before this time (default: the submit time).
    pub to: Option<Timestamp>,
    /// Only these events.
    pub ids: Vec<EventId>,
    /// Only these types: exact, or globs with `*` (as in subscriptions). The bus's own
    /// `system.*` events are left out unless a pattern here begins with `system.`.
    pub types: Vec<String>,
    /// Only events in these statuses (any, if empty).
    pub statuses: Vec<EventStatus>,
    /// Set to select without a start time or ids: every stored event.
    pub all: bool,
}

impl ReplaySelection {
    /// Events created in `[from, to)` (`to` open: up to the submit time).
    pub fn range(from: Timestamp, to: Option<Timestamp>) -> Self {
        ReplaySelection {
            from: Some(from),
            to,
            ..ReplaySelection::default()
        }
    }

    /// These events.
    pub fn ids(ids: impl IntoIterator<Item = EventId>) -> Self {
        ReplaySelection {
            ids: ids.into_iter().collect(),
            ..ReplaySelection::default()
        }
    }

    /// Also requires one of these types (exact or `*` globs).
    #[must_use]
    pub fn types<S: Into<String>>(mut self, types: impl IntoIterator<Item = S>) -> Self {
        self.types.extend(types.into_iter().map(Into::into));
        self
    }

    /// Also requires one of these statuses.
    #[must_use]
    pub fn statuses(mut self, statuses: impl IntoIterator<Item = EventStatus>) -> Self {
        self.statuses.extend(statuses);
        self
    }

    /// Checks the selection: a start or ids (or `all`), bad patterns, too many ids or
    /// patterns. (A time range that ends before it starts selects nothing.) Fails with [`Error::Invalid`] or
    /// [`Error::InvalidPattern`].
    pub fn validate(&self) -> Result<()> {
        if self.from.is_none() && self.ids.is_empty() && !self.all {
            return Err(Error::invalid(
                "from",
                "a replay without a start time, event ids or all",
                "a start time (from), event ids, or all to replay every stored event",
            ));
        }
        if self.ids.len() > MAX_IDS {
            return Err(Error::invalid(
                "ids",
                format!("{} ids", self.ids.len()),
                format!("at most {MAX_IDS} ids; select by time range and type instead"),
            ));
        }
        if self.types.len() > MAX_TYPES {
            return Err(Error::invalid(
                "types",
                format!("{} type patterns", self.types.len()),
                format!("at most {MAX_TYPES} patterns"),
            ));
        }
        for t in &self.types {
            Pattern::new(t)?;
        }
        Ok(())
    }

    /// Whether the bus's own `system.*` events are in the selection (only when a type pattern
    /// names them).
    pub fn includes_system(&self) -> bool {
        self.types.iter().any(|t| is_system_type(t))
    }

    /// Whether `event` matches every criterion (the stores evaluate the same in SQL; this is
    /// the reference their tests hold them to). `bound_time` is the submit time.
    pub fn matches(&self, event: &Event) -> bool {
        let created = event.created_at;
        self.from.is_none_or(|f| created >= f)
            && self.to.is_none_or(|t| created < t)
            && (self.ids.is_empty() || self.ids.contains(&event.id))
            && (self.statuses.is_empty() || self.statuses.contains(&event.status))
            && (self.types.is_empty()
                || self
                    .types
                    .iter()
                    .any(|t| Pattern::new(t).is_ok_and(|p| p.matches(&event.event_type))))
            && (self.includes_system() || !is_system_type(&event.event_type))
    }

    /// The selection frozen at `now`: its time range cut at `now` (events published later are
    /// never in it).
    pub fn frozen(&self, now: Timestamp) -> ReplaySelection {
        let cut = Timestamp(now.as_millis().saturating_add(1));
        ReplaySelection {
            to: Some(self.to.map_or(cut, |t| t.min(cut))),
            ..self.clone()
        }
    }
}

/// What to replay and how fast.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayRequest {
    /// The events.
    pub selection: ReplaySelection,
    /// Most events replayed per second (`None`: as fast as the store goes). Replays started
    /// from the CLI or the HTTP API get [`DEFAULT_OPERATOR_RATE`] unless they say otherwise.
    pub rate_limit: Option<u32>,
}

impl ReplayRequest {
    /// Replays `selection` unthrottled.
    pub fn new(selection: ReplaySelection) -> Self {
        ReplayRequest {
            selection,
            rate_limit: None,
        }
    }

    /// Sets the rate limit in events/s.
    #[must_use]
    pub fn rate_limit(mut self, per_second: u32) -> Self {
        self.rate_limit = Some(per_second);
        self
    }

    /// Checks the selection and the rate (1 to [`MAX_RATE`]).
    pub fn validate(&self) -> Result<()> {
        self.selection.validate()?;
        if let Some(rate) = self.rate_limit
            && !(1..=MAX_RATE).contains(&rate)
        {
            return Err(Error::invalid(
                "rate_limit",
                format!("{rate} events/s"),
                format!("1 to {MAX_RATE} events/s, or none for an unthrottled replay"),
            ));
        }
        Ok(())
    }
}

/// How a replay delivers what it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplayMode {
    /// Each event is published again as a new event, through normal delivery.
    Republish,
    /// Each event is handed to a handler of the process that started the replay.
    Handler,
}

/// A replay's parameters as its operation stores them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayParams {
    /// The selection, frozen (its time range cut at the submit time).
    pub selection: ReplaySelection,
    /// Events/s, if limited.
    pub rate_limit: Option<u32>,
    /// How events are delivered.
    pub mode: ReplayMode,
    /// Whether the replay needs something only the process that started it has (a handler or
    /// a filter): the bus's runners leave it to that process.
    pub attached: bool,
    /// The key part of the walk's upper bound (its number part is the operation's `bound`;
    /// see `store::Position`), empty where the number says it all.
    #[serde(default)]
    pub bound_key: String,
}

impl ReplayParams {
    /// Reads the parameters of operation `id`. Fails with [`Error::Corrupt`].
    pub fn from_json(id: &str, params: &serde_json::Value) -> Result<ReplayParams> {
        serde_json::from_value(params.clone())
            .map_err(|e| Error::corrupt(format!("the parameters of replay {id}"), e))
    }

    /// Whether the operation's parameters say it is attached to the process that started it.
    pub fn is_attached(params: &serde_json::Value) -> bool {
        params
            .get("attached")
            .and_then(serde_json::Value::as_bool)
            .unwrap_or(false)
    }
}

/// A handler failure kept in a replay's summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayFailure {
    /// The original event.
    pub event_id: EventId,
    /// What the handler said.
    pub error: String,
}

/// Most handler failures a summary keeps (the count is in `errors`).
pub const MAX_FAILURES: usize = 20;

/// What a replay has done so far, stored with its operation and written with each chunk.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReplaySummary {
    /// Whether `system.replay.started` has been published.
    pub announced: bool,
    /// Events replayed per type.
    pub by_type: BTreeMap<String, u64>,
    /// The first handler failures (at most [`MAX_FAILURES`]).
    pub failures: Vec<ReplayFailure>,
}

impl ReplaySummary {
    /// Reads a stored summary (`None`: a fresh one). Fails with [`Error::Corrupt`].
    pub fn from_json(id: &str, summary: Option<&serde_json::Value>) -> Result<ReplaySummary> {
        summary
            .map(|s| {
                serde_json::from_value(s.clone())
                    .map_err(|e| Error::corrupt(format!("the summary of replay {id}"), e))
            })
            .transpose()
            .map(Option::unwrap_or_default)
    }

    /// As JSON, for the store.
    pub fn to_json(&self) -> Result<serde_json::Value> {
        serde_json::to_value(self).map_err(|e| Error::unserialisable("a replay's summary", &e))
    }

    /// Counts one replayed event.
    pub fn count(&mut self, event_type: &str) {
        *self.by_type.entry(event_type.to_owned()).or_insert(0) += 1;
    }

    /// Keeps a handler failure (the first [`MAX_FAILURES`]).
    pub fn fail(&mut self, event_id: EventId, error: String) {
        if self.failures.len() < MAX_FAILURES {
            self.failures.push(ReplayFailure { event_id, error });
        }
    }
}

/// The new event that re-publishes `original` for replay `operation`: a new id, the same type,
/// payload, metadata and priority, plus [`REPLAY_OF`] and [`REPLAY_OPERATION`]; due now.
pub fn republish(original: &Event, operation: &str) -> NewEvent {
    let mut metadata = original.metadata.clone();
    metadata.insert(REPLAY_OF.to_owned(), original.id.to_string());
    metadata.insert(REPLAY_OPERATION.to_owned(), operation.to_owned());
    NewEvent {
        id: EventId::new(),
        event_type: original.event_type.clone(),
        payload: original.payload.clone(),
        metadata,
        options: crate::options::PublishOptions::new().priority(original.priority),
    }
}

/// The payload of `system.replay.started`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayStarted<'a> {
    /// The replay's operation id.
    pub operation: &'a str,
    /// Who started it.
    pub actor: &'a Actor,
    /// How it delivers.
    pub mode: ReplayMode,
    /// What it selects.
    pub selection: &'a ReplaySelection,
    /// Events selected at submit.
    pub total: u64,
    /// Events/s, if limited.
    pub rate_limit: Option<u32>,
}

/// The payload of `system.replay.completed`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayCompleted<'a> {
    /// The replay's operation id.
    pub operation: &'a str,
    /// `completed`, `failed` or `cancelled`.
    pub status: &'a str,
    /// Events replayed.
    pub processed: u64,
    /// Events selected but passed over (a filter said no, or they were gone).
    pub skipped: u64,
    /// Events a handler failed on.
    pub errors: u64,
    /// How long it ran.
    pub duration_ms: i64,
    /// Who started it.
    pub actor: &'a Actor,
}

/// The system event announcing a replay's start.
pub fn started_event(started: &ReplayStarted<'_>) -> Result<NewEvent> {
    NewEvent::system(STARTED, started)
}

/// The system event announcing a replay's end.
pub fn completed_event(completed: &ReplayCompleted<'_>) -> Result<NewEvent> {
    NewEvent::system(COMPLETED, completed)
}

/// What a selection covers now: the count, per type, and the first few events.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayPreview {
    /// Events selected.
    pub count: u64,
    /// Of those, per type.
    pub by_type: BTreeMap<String, u64>,
    /// The first events (oldest first, at most 10).
    pub samples: Vec<Event>,
}

/// What a dry run found: what the replay would do, with nothing changed.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DryRun {
    /// Events the replay would replay (the selection, less what a filter refuses).
    pub count: u64,
    /// Of those, per type.
    pub by_type: BTreeMap<String, u64>,
    /// Events selected that a filter refused.
    pub skipped: u64,
    /// The first events it would replay (at most 10).
    pub samples: Vec<Event>,
    /// How long the walk took.
    pub duration_ms: i64,
}

/// A replay's result in the shape of the specification's `ReplayResult`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayResult {
    /// The replay's operation id.
    pub id: String,
    /// Events replayed.
    pub processed: u64,
    /// Events passed over.
    pub skipped: u64,
    /// Events a handler failed on.
    pub errors: u64,
    /// How long it ran (ms).
    pub duration: i64,
    /// `pending`, `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
}

impl ReplayResult {
    /// The result of `op` as of `now`.
    pub fn of(op: &crate::operation::Operation, now: Timestamp) -> ReplayResult {
        ReplayResult {
            id: op.id.clone(),
            processed: op.processed,
            skipped: op.skipped,
            errors: op.errors,
            duration: op.duration_ms(now),
            status: op.status.as_str().to_owned(),
        }
    }
}

#[cfg(test)]
mod tests;

//! The plain data the store traits take and return.

use serde::Serialize;
use std::time::Duration;

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::dlq::{Action, DeadLetter, DeadLetterFilter, Death};
use crate::error::Error;
use crate::event::{EventId, EventStatus};
use crate::operation::{Advance, Operation};

/// A subscription as stored (the handler itself lives in memory).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SubscriptionRow {
    /// Subscription id.
    pub id: String,
    /// Stable name given by the application, if any; delivery records use it so that they
    /// survive restarts.
    pub name: Option<String>,
    /// The glob pattern of event types.
    pub event_type: String,
    /// When the subscription was made.
    pub created_at: Timestamp,
}

/// The result of one delivery attempt, written back in one atomic step.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every matching handler has succeeded: the event is `done`.
    Done {
        /// The event.
        id: EventId,
        /// Subscriptions that have handled it.
        delivered: Vec<String>,
    },
    /// The attempt failed and another is allowed: the event is `pending` again.
    Retry {
        /// The event.
        id: EventId,
        /// Failed attempts so far.
        retry_count: u32,
        /// Errors of all failed attempts.
        errors: Vec<String>,
        /// Subscriptions that have handled it.
        delivered: Vec<String>,
        /// When the next attempt is due.
        next_attempt_at: Timestamp,
    },
    /// Handlers snoozed (and none failed): the event is `pending` again, due at
    /// `next_attempt_at`, its retry count and errors as they were; each snooze is counted for
    /// its subscription (see [`EventStore::snoozes`](super::EventStore::snoozes)).
    Snooze {
        /// The event.
        id: EventId,
        /// Subscriptions that have handled it.
        delivered: Vec<String>,
        /// When it is due again.
        next_attempt_at: Timestamp,
        /// The keys of the subscriptions that snoozed.
        subscriptions: Vec<String>,
    },
    /// The attempt failed and no retries are left: the event is a dead letter. Its
    /// dead-letter record (and the `system.dead_letter` event) are written in the same
    /// transaction.
    Dead {
        /// The event.
        id: EventId,
        /// Failed attempts in all.
        retry_count: u32,
        /// Errors of all failed attempts.
        errors: Vec<String>,
        /// Subscriptions that have handled it.
        delivered: Vec<String>,
        /// What the dead-letter record gets.
        death: Box<Death>,
    },
}

impl Outcome {
    /// Whether the outcome parks the event in a concurrency limit's line (pending at
    /// [`WAIT_MARK`](crate::concurrency::WAIT_MARK)).
    pub fn parks_for_slot(&self) -> bool {
        matches!(self, Outcome::Retry { next_attempt_at, .. } if *next_attempt_at == crate::concurrency::WAIT_MARK)
    }

    /// The event the outcome is for.
    pub fn id(&self) -> EventId {
        match self {
            Outcome::Done { id, .. }
            | Outcome::Retry { id, .. }
            | Outcome::Snooze { id, .. }
            | Outcome::Dead { id, .. } => *id,
        }
    }
}

/// Which events to list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    /// Only events with this status.
    pub status: Option<EventStatus>,
    /// Only events of exactly this type.
    pub event_type: Option<String>,
    /// Only events created at or after this time.
    pub created_from: Option<Timestamp>,
    /// Only events created before this time.
    pub created_before: Option<Timestamp>,
    /// Only events with this ordering key.
    pub ordering_key: Option<String>,
    /// Events to skip. Defaults to 0.
    pub offset: u64,
    /// Most events to return. Defaults to 100.
    pub limit: u64,
}

impl Default for EventQuery {
    fn default() -> Self {
        EventQuery {
            status: None,
            event_type: None,
            created_from: None,
            created_before: None,
            ordering_key: None,
            offset: 0,
            limit: 100,
        }
    }
}

/// Events counted by status and type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusCount {
    /// Event type.
    pub event_type: String,
    /// Status.
    pub status: EventStatus,
    /// Number of events.
    pub count: u64,
}

/// Events that ended in one minute: delivered, and dead-lettered (first deaths; a dead letter
/// sent back that dies again is counted when it first died).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteCount {
    /// The minute's start.
    pub minute: Timestamp,
    /// Events delivered (`done`) in it.
    pub done: u64,
    /// Events that became dead letters in it.
    pub dead: u64,
}

impl MinuteCount {
    /// Merges per-minute counts of delivered and of dead-lettered events (minute index,
    /// count), each in any order, into one list, oldest minute first.
    pub(crate) fn merge(done: Vec<(i64, u64)>, dead: Vec<(i64, u64)>) -> Vec<MinuteCount> {
        let mut by_minute = std::collections::BTreeMap::<i64, (u64, u64)>::new();
        for (m, n) in done {
            by_minute.entry(m).or_default().0 += n;
        }
        for (m, n) in dead {
            by_minute.entry(m).or_default().1 += n;
        }
        by_minute
            .into_iter()
            .map(|(m, (done, dead))| MinuteCount {
                minute: Timestamp(m.saturating_mul(60_000)),
                done,
                dead,
            })
            .collect()
    }
}

/// Events counted by status and retry count.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetryCount {
    /// Status.
    pub status: EventStatus,
    /// Failed attempts.
    pub retry_count: u32,
    /// Number of events.
    pub count: u64,
}

/// How an inserted event starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertMode {
    /// `pending` and due now: background workers deliver it.
    Pending,
    /// `processing`: the caller delivers it at once (publish's inline dispatch).
    Claimed,
}

/// What an insert did with one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Newly stored.
    New,
    /// An event with its id was stored already: nothing was written.
    Known,
    /// Its dedup key was taken, within its window, by the event with this id: nothing was
    /// written (see [`PublishOptions::dedup`](crate::PublishOptions::dedup)).
    Duplicate(EventId),
}

impl Stored {
    /// Whether the event was newly stored.
    pub fn is_new(self) -> bool {
        self == Stored::New
    }

    /// The id a publish of the event `own` answers: its own, or the first event's of its
    /// dedup window.
    pub fn id(self, own: EventId) -> EventId {
        match self {
            Stored::Duplicate(first) => first,
            Stored::New | Stored::Known => own,
        }
    }
}

/// Whether a job run could start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobStart {
    /// It started: the caller runs it and then ends it.
    Started,
    /// This tick has run (or is running) already, in this process or another.
    AlreadyRan,
    /// A run is still going (a previous tick's, or a manual one): this one is skipped.
    Busy,
}

/// A scheduled job's bookkeeping.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRow {
    /// The job's name.
    pub name: String,
    /// The last tick that ran (or was skipped).
    pub last_tick: Option<Timestamp>,
    /// Who runs it now, if anyone.
    pub running_by: Option<String>,
    /// When its last run started.
    pub last_started_at: Option<Timestamp>,
    /// When its last run ended.
    pub last_finished_at: Option<Timestamp>,
    /// How its last run ended: `ok` or `failed`.
    pub last_status: Option<String>,
    /// What its last run said.
    pub last_message: Option<String>,
    /// Runs in all.
    pub runs: u64,
    /// Ticks skipped because a run was still going.
    pub skipped: u64,
}

/// A place in a walk over stored events (a replay), in the store's own order: on SQLite the
/// insertion order (`at` is the rowid, `key` empty); on PostgreSQL creation time, then id
/// (`at` is the time in ms, `key` the id). The default is before the first event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Position {
    /// The number part.
    pub at: i64,
    /// The rest (empty where the number says it all).
    pub key: String,
}

/// Connections of a store's pool (PostgreSQL).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolGauges {
    /// Open connections not in use.
    pub idle: u64,
    /// Open connections in use.
    pub active: u64,
    /// The most connections the pool opens.
    pub max: u64,
    /// The bus's statements waiting for a connection (on a pool shared with the application,
    /// only the bus's own are counted).
    pub waiting: u64,
}

/// Depth and age figures of a store, each read by an indexed query (never a scan of the whole
/// event table: `done` events, the history, are not counted here but by the counters).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoreGauges {
    /// Events waiting for delivery (`pending`, due or not).
    pub pending: u64,
    /// Events published for a later time (`scheduled`).
    pub scheduled: u64,
    /// The earliest due time of a scheduled event, if any.
    pub next_scheduled_at: Option<Timestamp>,
    /// Events being delivered (`processing`).
    pub processing: u64,
    /// The earliest due time of a pending event, if any.
    pub oldest_due_at: Option<Timestamp>,
    /// Open dead letters: `pending` (waiting for an operator or the auto retry) and
    /// `retrying` (sent back, not yet delivered).
    pub dead_letters_pending: u64,
    /// Open dead letters that were sent back and are not yet delivered.
    pub dead_letters_retrying: u64,
    /// When the oldest `pending` dead letter was created, if any.
    pub oldest_pending_dead_letter_at: Option<Timestamp>,
    /// The pool's connections (PostgreSQL; `None` on SQLite).
    pub pool: Option<PoolGauges>,
    /// Bytes in the write-ahead log file (SQLite; `None` on PostgreSQL).
    pub wal_bytes: Option<u64>,
    /// Distinct workers holding a live lease on an event (PostgreSQL; `None` on SQLite, where
    /// one process is the only worker).
    pub live_workers: Option<u64>,
    /// Dead-letter records in all failure groups (kept with the groups as records change).
    pub dead_letter_records: u64,
    /// Failure groups first seen within [`NEW_GROUP_WINDOW`] before now.
    pub failure_groups_new: u64,
    /// Ordering keys held by a dead letter (`hold_key_on_dead_letter`): their later events
    /// wait until the dead letter is retried or closed.
    pub held_keys: u64,
    /// Since when the longest-held of them has been held, if any.
    pub oldest_held_key_at: Option<Timestamp>,
    /// The failure groups the metrics label, most open first, with their record counts (the
    /// telemetry fills it from [`DeadLetterStore::dlq_groups`](crate::DeadLetterStore); a
    /// store's `gauges` leaves it empty).
    pub failure_groups: Vec<(String, u64)>,
    /// Dead-letter records by event type and status (`pending`, `retrying`, `resolved`,
    /// `abandoned`), as `(type, status, records)` with records above 0: kept by the store as
    /// records arrive, change status and are purged, so reading them never counts records.
    pub dead_letter_types: Vec<(String, String, u64)>,
    /// The active pauses as `(scope, target, paused_at, parked events)` (the telemetry fills
    /// it from [`PauseStore::pause_list`](crate::PauseStore::pause_list); a store's `gauges`
    /// leaves it empty).
    pub pauses: Vec<(String, String, Timestamp, u64)>,
    /// Every process's breakers as reported in the last minute, as `(subscription, process,
    /// state)` (the telemetry fills it from
    /// [`BreakerStore::breaker_reports`](crate::BreakerStore::breaker_reports); a store's
    /// `gauges` leaves it empty).
    pub breakers: Vec<(String, String, crate::breaker::BreakerState)>,
    /// Every concurrency limit as `(subscription, max_in_flight, in_flight, waiting)` (the
    /// telemetry fills it from
    /// [`ConcurrencyStore::concurrency_list`](crate::ConcurrencyStore::concurrency_list); a
    /// store's `gauges` leaves it empty).
    pub concurrency: Vec<(String, u32, u64, u64)>,
}

/// How recent a failure group's first failure must be for the gauges to count it as new.
pub const NEW_GROUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);

impl StoreGauges {
    /// Seconds since `at` (0 for a time not yet reached).
    pub fn age(at: Option<Timestamp>, now: Timestamp) -> f64 {
        at.map_or(0.0, |t| {
            Duration::from_millis(u64::try_from(now.as_millis() - t.as_millis()).unwrap_or(0))
                .as_secs_f64()
        })
    }
}

/// A dead-letter action on many records, taken in one transaction by
/// [`DeadLetterStore::dlq_act`](super::DeadLetterStore::dlq_act).
#[derive(Debug, Clone)]
pub struct ActBatch {
    /// The records, by their events' ids.
    pub ids: Vec<EventId>,
    /// The action.
    pub action: Action,
    /// Who takes it.
    pub actor: Actor,
    /// Records that no longer match this filter when they are locked are passed over: a bulk
    /// action's selection, read before the batch, checked again at the write.
    pub still_matching: Option<DeadLetterFilter>,
    /// The chunk of a bulk operation the batch is, written with it.
    pub chunk: Option<ChunkWrite>,
    /// Read each record acted on back in the same transaction, as it is after the action
    /// (what one action returns to its caller).
    pub read_back: bool,
}

impl ActBatch {
    /// `action` by `actor` on `ids`, nothing else.
    pub fn new(ids: Vec<EventId>, action: Action, actor: Actor) -> ActBatch {
        ActBatch {
            ids,
            action,
            actor,
            still_matching: None,
            chunk: None,
            read_back: false,
        }
    }
}

/// The progress of a bulk operation's chunk, written in the transaction of its actions. The
/// store fills in the counts: records acted on are processed, records passed over skipped.
#[derive(Debug, Clone)]
pub struct ChunkWrite {
    /// The operation.
    pub operation: String,
    /// Its runner: the write is refused unless it still holds the operation.
    pub holder: String,
    /// How long the runner's lease is renewed for.
    pub lease: Duration,
    /// The chunk's cursor, end and expected cursor (counts are filled in).
    pub advance: Advance,
}

/// What a batch did.
#[derive(Debug)]
pub struct ActReport {
    /// How many records were acted on.
    pub applied: u64,
    /// The records passed over, each with why ([`crate::Error::NotFound`] or
    /// [`crate::Error::Conflict`]).
    pub skipped: Vec<(EventId, Error)>,
    /// The operation after its chunk (with [`ActBatch::chunk`]).
    pub operation: Option<Operation>,
    /// The records acted on as they are after it, purged ones left out (with
    /// [`ActBatch::read_back`]).
    pub after: Vec<DeadLetter>,
}

/// A snapshot's key: event, stage, time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SnapshotKey {
    /// The event.
    pub event_id: EventId,
    /// The stage.
    pub stage: String,
    /// When it was taken.
    pub created_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_seconds_and_never_negative() {
        let now = Timestamp(10_000);
        assert_eq!(StoreGauges::age(Some(Timestamp(7_500)), now), 2.5);
        assert_eq!(StoreGauges::age(Some(Timestamp(12_000)), now), 0.0);
        assert_eq!(StoreGauges::age(None, now), 0.0);
    }
}

//! The storage boundary. Everything database-specific sits behind [`Store`]; the bus, the
//! dispatcher and the dead-letter inspector are written once against it.

use std::sync::Arc;

use async_trait::async_trait;
use serde::Serialize;
use tokio::sync::Notify;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{Event, EventId, EventStatus, NewEvent};

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

/// A subscription as stored (the handler itself lives in memory).
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
    /// The attempt failed and no retries are left: the event is a dead letter.
    Dead {
        /// The event.
        id: EventId,
        /// Failed attempts in all.
        retry_count: u32,
        /// Errors of all failed attempts.
        errors: Vec<String>,
        /// Subscriptions that have handled it.
        delivered: Vec<String>,
    },
}

impl Outcome {
    /// The event the outcome is for.
    pub fn id(&self) -> EventId {
        match self {
            Outcome::Done { id, .. } | Outcome::Retry { id, .. } | Outcome::Dead { id, .. } => *id,
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

/// Events counted by status and retry count.
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

/// The one boundary between durabus and a database.
///
/// Implementations must make every write durable before returning `Ok`, apply each call
/// atomically, and only move events along `pending → processing → done | dlq` (plus the
/// documented resets). The contract suite in `tests/` holds every implementation to this.
#[async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// Stores events durably, all or none. An event whose id is already stored is skipped (the
    /// stored one is kept, whatever its status): one flag per event, `true` when it was newly
    /// stored. Two inserts of one id racing store it once.
    async fn insert(
        &self,
        events: Vec<NewEvent>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<bool>>;

    /// Moves up to `limit` due `pending` events (`next_attempt_at <= now`) to `processing` and
    /// returns them, earliest due first.
    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>>;

    /// The earliest `next_attempt_at` of any pending event.
    async fn next_due(&self) -> Result<Option<Timestamp>>;

    /// Writes the outcome of a delivery attempt. Returns `false` if the event was not
    /// `processing` (nothing is changed then).
    async fn record(&self, outcome: Outcome, now: Timestamp) -> Result<bool>;

    /// Writes many outcomes in one atomic step; one flag per outcome, as [`record`](Self::record)
    /// returns it. The default runs `record` for each.
    async fn record_many(&self, outcomes: Vec<Outcome>, now: Timestamp) -> Result<Vec<bool>> {
        let mut flags = Vec::with_capacity(outcomes.len());
        for o in outcomes {
            flags.push(self.record(o, now).await?);
        }
        Ok(flags)
    }

    /// Gives back claimed events that were never delivered (a worker stopping with events
    /// still queued): `processing` → `pending`, due now, retry count untouched. Returns how many.
    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64>;

    /// Crash recovery: every `processing` event goes back to `pending`, due now, with
    /// `retry_count + 1` and a note in its errors. Returns how many.
    async fn recover_processing(&self, now: Timestamp) -> Result<u64>;

    /// Stores a subscription row, replacing any row with the same id or the same name.
    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()>;

    /// Deletes a subscription row. Returns whether it existed.
    async fn delete_subscription(&self, id: &str) -> Result<bool>;

    /// All subscription rows, oldest first.
    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>>;

    /// One event by id.
    async fn get_event(&self, id: EventId) -> Result<Option<Event>>;

    /// Events matching `query`, newest first: dead letters by `created_at`, other listings in
    /// insertion order.
    async fn list_events(&self, query: EventQuery) -> Result<Vec<Event>>;

    /// Event counts per type and status.
    async fn counts(&self) -> Result<Vec<StatusCount>>;

    /// Event counts per status and retry count.
    async fn retry_counts(&self) -> Result<Vec<RetryCount>>;

    /// Dead-letter retry: a `dlq` event goes back to `pending`, due now, with `retry_count` 0 and
    /// its errors cleared. Returns `false` if no dead event has this id.
    async fn dlq_retry(&self, id: EventId, now: Timestamp) -> Result<bool>;

    /// Deletes dead events with `created_at <= cutoff`. Returns how many.
    async fn dlq_purge(&self, cutoff: Timestamp) -> Result<u64>;

    /// Deletes at most `limit` `done` events completed (`updated_at`) at or before `cutoff`, in
    /// one transaction. Returns how many; callers repeat while it returns `limit`, so the write
    /// lock is never held for a whole large purge.
    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64>;

    /// How often the dispatcher calls [`heartbeat`](Self::heartbeat) while it runs; `None`
    /// (the default) for stores without leases.
    fn heartbeat_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// Renews the leases of the events this process holds, so other workers do not take over
    /// an event whose handler is still running. The default does nothing.
    async fn heartbeat(&self, now: Timestamp) -> Result<()> {
        let _ = now;
        Ok(())
    }

    /// The store as [`Any`](std::any::Any), so callers can reach backend-specific features
    /// (such as [`SqliteStore::outbox`](sqlite::SqliteStore::outbox)) behind an `Arc<dyn Store>`.
    fn as_any(&self) -> &dyn std::any::Any;

    /// Notified whenever a write may have made an event due (an insert, a retry scheduled, a
    /// dead letter retried), so the dispatcher wakes without polling.
    fn wakeups(&self) -> Arc<Notify>;

    /// Flushes and closes the database. Later calls fail with [`crate::Error::StoreClosed`];
    /// closing twice is harmless.
    async fn close(&self) -> Result<()>;
}

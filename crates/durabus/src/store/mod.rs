//! The storage boundary: capability traits by noun. Everything database-specific sits behind
//! them; the dispatcher, the dead-letter inspector, history and statistics are written once
//! against them and tested once against every store by the contract suite.
//!
//! | trait | what it covers |
//! |---|---|
//! | [`EventStore`] | the hot path: insert, claim, record outcomes, release, crash recovery |
//! | [`SubscriptionStore`] | subscription rows (delivery records key on their names) |
//! | [`QueryStore`] | reading events back: by id, listings, counts, walks for replay; history retention |
//! | [`DeadLetterStore`] | dead-letter records: list, groups, select, act on many in one transaction (retry, resolve, abandon, purge; a bulk chunk with its progress) |
//! | [`OperationStore`] | durable operations: create, read, claim, advance a chunk, cancel |
//! | [`JobStore`] | scheduled jobs: once per tick across processes, never stacked |
//! | [`PayloadStore`] | payload snapshots per stage (gzip), their configuration, soft delete, retention |
//! | [`CancelStore`] | cancels of events (all subscriptions or one) and their records |
//! | [`PeriodicStore`] | periodic-event definitions and where each is in its schedule |
//! | [`PauseStore`] | pauses on record; ending one makes the events it parked due |
//! | [`ConcurrencyStore`] | concurrency limits per subscription, their slots and waiting line |
//! | [`RateStore`] | rate limits per subscription and the slots they hand out |
//! | [`BreakerStore`] | breakers reported by every process; shared breakers' rows and their probe |
//! | [`StoreLifecycle`] | wake-ups, background work of the store itself, close |
//!
//! [`Store`] is all of them together; `Arc<dyn Store>` is what a bus holds.
//!
//! **Do not implement these traits.** They are sealed: the set of stores is closed (SQLite and
//! PostgreSQL, behind features) and the traits grow with each release. They are public so that
//! applications and tools can call them on a bus's store.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::clock::{Clock, Timestamp};
use crate::dlq::{DeadLetter, DeadLetterFilter, DeadLetterGroup, Keyset};
use crate::error::Result;
use crate::event::{Event, EventId, NewEvent};
use crate::operation::{Advance, NewOperation, Operation, OperationKind, OperationStatus};
use crate::payload::NewSnapshot;
use crate::replay::ReplaySelection;

mod breaker_store;
mod cancel_store;
mod concurrency_store;
pub(crate) mod migrations;
mod pause_store;
mod payload_store;
mod periodic_store;
#[cfg(feature = "postgres")]
pub mod postgres;
mod rate_store;
pub(crate) mod recovery;
#[cfg(feature = "sqlite")]
pub mod sqlite;
mod types;

pub use breaker_store::BreakerStore;
pub use cancel_store::CancelStore;
pub use concurrency_store::ConcurrencyStore;
pub use pause_store::PauseStore;
pub use payload_store::PayloadStore;
pub use periodic_store::PeriodicStore;
pub use rate_store::RateStore;
pub use types::{
    ActBatch, ActReport, ChunkWrite, EventQuery, InsertMode, JobRow, JobStart, MinuteCount,
    NEW_GROUP_WINDOW, Outcome, PoolGauges, Position, RetryCount, SnapshotKey, StatusCount,
    StoreGauges, Stored, SubscriptionRow,
};

/// Scheduled events a claim makes pending at most, earliest due first: a claim takes due
/// events by priority among those made pending, so a larger chunk orders more of a burst of
/// events due at one moment by priority, at the cost of a longer claim when it happens.
pub const PROMOTE_CHUNK: i64 = 1000;

pub(crate) mod sealed {
    /// Implemented by durabus's own stores only.
    pub trait Sealed {}
}

/// The hot path of events: store, claim, record outcomes.
///
/// Every write is durable before it returns `Ok` and atomic. Events move only along
/// `pending → processing → done | dlq` (plus the documented resets).
#[async_trait]
pub trait EventStore: sealed::Sealed + Send + Sync + std::fmt::Debug + 'static {
    /// Stores events durably, all or none. An event whose id is already stored is skipped (the
    /// stored one is kept, whatever its status): one flag per event, `true` when it was newly
    /// stored. Two inserts of one id racing store it once.
    async fn insert(
        &self,
        events: Vec<NewEvent>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<Stored>> {
        self.insert_with(events, Vec::new(), mode, now).await
    }

    /// [`insert`](Self::insert), and in the same transaction the payload snapshots of the
    /// events that were newly stored (a snapshot of an event already stored is dropped).
    async fn insert_with(
        &self,
        events: Vec<NewEvent>,
        snapshots: Vec<NewSnapshot>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<Stored>>;

    /// Moves up to `limit` due `pending` events (`next_attempt_at <= now`) to `processing` and
    /// returns them, earliest due first. On PostgreSQL this also takes over events whose lease
    /// expired, their interrupted attempt counted (the rules of `store/recovery.rs`).
    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>>;

    /// The earliest time at which something becomes claimable: a pending event's
    /// `next_attempt_at` (or, on PostgreSQL, a lease's expiry).
    async fn next_due(&self) -> Result<Option<Timestamp>>;

    /// Writes the outcome of a delivery attempt. Returns `false` if the event was not
    /// `processing` (or, on PostgreSQL, not held by this process): nothing is changed then.
    async fn record(&self, outcome: Outcome, now: Timestamp) -> Result<bool> {
        let flags = self.record_many(vec![outcome], now).await?;
        Ok(flags.first().copied().unwrap_or(false))
    }

    /// Writes many outcomes in one atomic step; one flag per outcome, as
    /// [`record`](Self::record) returns it.
    async fn record_many(&self, outcomes: Vec<Outcome>, now: Timestamp) -> Result<Vec<bool>> {
        self.record_many_with(outcomes, Vec::new(), now).await
    }

    /// [`record_many`](Self::record_many), and in the same transaction payload snapshots of
    /// the attempts (the `error` stage of failed ones); a snapshot of an outcome that was not
    /// recorded is dropped.
    async fn record_many_with(
        &self,
        outcomes: Vec<Outcome>,
        snapshots: Vec<NewSnapshot>,
        now: Timestamp,
    ) -> Result<Vec<bool>>;

    /// How often the handler of subscription `key` has snoozed the event `id` (0 if never).
    async fn snoozes(&self, id: EventId, key: &str) -> Result<u32>;

    /// Gives back claimed events that were never delivered (a worker stopping with events
    /// still queued): `processing` → `pending`, due now, retry count untouched. Returns how many.
    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64>;

    /// Gives back the events this store set aside for its next claims, never claimed: `pending`
    /// again at their due time (their place among the due events). On SQLite a completion
    /// claims the next event of its ordering key and sets it aside for the next
    /// [`claim_due`](Self::claim_due); a worker that stops or finds the whole bus paused calls
    /// this so that no event stays `processing` with nobody to run it. Returns how many
    /// (always 0 on a store that sets nothing aside).
    async fn give_back_set_aside(&self, now: Timestamp) -> Result<u64> {
        let _ = now;
        Ok(0)
    }

    /// Crash recovery: `processing` events left by a process that stopped go back to
    /// `pending`, due now, with the interrupted attempt counted as the rules of `store/recovery.rs` decide.
    /// Returns how many.
    async fn recover_processing(&self, now: Timestamp) -> Result<u64>;
}

/// Subscription rows. The handler itself lives in memory; the row makes a named
/// subscription's delivery records survive restarts.
#[async_trait]
pub trait SubscriptionStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores a subscription row, replacing any row with the same id or the same name.
    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()>;

    /// Deletes a subscription row. Returns whether it existed.
    async fn delete_subscription(&self, id: &str) -> Result<bool>;

    /// All subscription rows, oldest first.
    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>>;

    /// Whether a subscription row has `key` as its name (or, for an unnamed one, its id):
    /// what the operators' levers (pauses, limits) may name.
    async fn subscription_known(&self, key: &str) -> Result<bool> {
        Ok(self
            .subscriptions()
            .await?
            .iter()
            .any(|r| r.name.as_deref() == Some(key) || r.id == key))
    }
}

/// Reading events back, and removing old history.
#[async_trait]
pub trait QueryStore: sealed::Sealed + Send + Sync + 'static {
    /// One event by id, in any status.
    async fn get_event(&self, id: EventId) -> Result<Option<Event>>;

    /// Events matching `query`, newest first: dead letters by `created_at`, other listings in
    /// insertion order.
    async fn list_events(&self, query: EventQuery) -> Result<Vec<Event>>;

    /// Event counts per type and status.
    async fn counts(&self) -> Result<Vec<StatusCount>>;

    /// Event counts per status and retry count.
    async fn retry_counts(&self) -> Result<Vec<RetryCount>>;

    /// Deletes at most `limit` `done` events completed (`updated_at`) at or before `cutoff`, in
    /// one transaction. Returns how many; callers repeat while it returns `limit`, so the write
    /// lock is never held for a whole large purge.
    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64>;

    /// The gauges of the metrics (depths and ages), each from an indexed query: cheap enough
    /// for a scrape, never a scan of the event table.
    async fn gauges(&self, now: Timestamp) -> Result<StoreGauges>;

    /// Events delivered and dead-lettered per minute since `since` (rounded down to its
    /// minute), oldest first; minutes in which nothing ended are left out. On PostgreSQL the
    /// delivered count reads an index of the event log; on SQLite it scans the history in the
    /// events table (keep it purged, see [`History::purge`](crate::History::purge)), so callers
    /// cache it (the admin API does, for 5 s).
    async fn finished_per_minute(&self, since: Timestamp) -> Result<Vec<MinuteCount>>;

    /// The upper bound of a walk over events frozen now: the highest position there is, up
    /// to `now` (see [`Position`]). Events stored later are never in the walk.
    async fn walk_bound(&self, now: Timestamp) -> Result<Position>;

    /// The events `selection` covers with a position up to `bound`, counted per type.
    async fn walk_count(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
    ) -> Result<Vec<(String, u64)>>;

    /// Up to `limit` events `selection` covers after `after` and up to `bound`, each with its
    /// position, in the store's walk order (see [`Position`]; on PostgreSQL the live table
    /// and the event log together).
    async fn walk(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
        after: &Position,
        limit: usize,
    ) -> Result<Vec<(Position, Event)>>;
}

/// Dead letters: events whose delivery failed every allowed attempt, each with a record that
/// carries its lifecycle (see [`crate::dlq`]). Records are written by the outcome that
/// dead-letters an event (in [`EventStore::record_many`]); these methods read them and act on
/// them, each action in one transaction under the rules of [`crate::dlq::apply`].
#[async_trait]
pub trait DeadLetterStore: sealed::Sealed + Send + Sync + 'static {
    /// Records matching `filter`, newest first (by position), one keyset page.
    async fn dlq_list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<Vec<DeadLetter>>;

    /// The same page as [`dlq_list`](Self::dlq_list), as summaries (no payload, causes or
    /// error history are read).
    async fn dlq_list_summaries(
        &self,
        filter: DeadLetterFilter,
        page: Keyset,
    ) -> Result<Vec<crate::dlq::DeadLetterSummary>>;

    /// One record by its event's id.
    async fn dlq_get(&self, event_id: EventId) -> Result<Option<DeadLetter>>;

    /// How many records match `filter` with a position at most `bound` (any, if `None`).
    async fn dlq_count(&self, filter: DeadLetterFilter, bound: Option<i64>) -> Result<u64>;

    /// The highest position of any record (0 when there are none): the upper bound of a
    /// selection frozen now.
    async fn dlq_max_seq(&self) -> Result<i64>;

    /// Failure groups, most open records first, then most records.
    async fn dlq_groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>>;

    /// Records of the groups `fingerprints` created at or after `since`, counted per bucket of
    /// `bucket_ms` (bucket 0 starts at `since`): `(fingerprint, bucket, count)`, buckets
    /// without records left out. One range of the `(fingerprint, created_at)` index per group.
    async fn dlq_group_buckets(
        &self,
        fingerprints: &[String],
        since: Timestamp,
        bucket_ms: i64,
    ) -> Result<Vec<(String, i64, u64)>>;

    /// The event ids of `pending` records whose next auto retry is due at `now`, earliest due
    /// first, at most `limit`.
    async fn dlq_auto_retry_due(&self, now: Timestamp, limit: usize) -> Result<Vec<EventId>>;

    /// The event ids of `resolved` or `abandoned` records last changed at or before `cutoff`,
    /// at most `limit`.
    async fn dlq_closed_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>>;

    /// The ids of dead events (status `dlq`) created at or before `cutoff`, at most `limit`.
    async fn dlq_dead_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>>;

    /// The next records of a frozen selection: matching `filter`, with a position after
    /// `after` and at most `bound`, oldest first, at most `limit`; each with its position.
    async fn dlq_select(
        &self,
        filter: &DeadLetterFilter,
        after: i64,
        bound: i64,
        limit: usize,
    ) -> Result<Vec<(EventId, i64)>>;

    /// Applies `batch.action` by `batch.actor` to each record of `batch.ids` in one
    /// transaction, each under the rules of [`crate::dlq::apply`]; a retry sends the event
    /// back for delivery in the same transaction. A record that is gone, that its status does
    /// not allow the action, or that no longer matches `batch.still_matching` is passed over
    /// with the reason ([`crate::Error::NotFound`] or [`crate::Error::Conflict`]). With
    /// `batch.chunk`, the chunk's progress is written in the same transaction; if its holder
    /// no longer holds the operation, nothing is written and the call fails with
    /// [`crate::Error::Conflict`].
    async fn dlq_act(&self, batch: ActBatch, now: Timestamp) -> Result<ActReport>;

    /// Deletes events that are still dead and have no record (never expected: the purge by
    /// age finds them); an ordering key one of them held moves on at `now`. Returns how many.
    async fn dlq_delete_dead_events(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64>;
}

/// Durable operations (see [`crate::operation`]): creating, reading, claiming, advancing and
/// cancelling them. Who may take one and what a cancel does are the pure rules of
/// [`crate::operation::state`], which the stores apply to the row they read in the
/// transaction that writes it. A chunk of a bulk dead-letter action is written with its
/// actions by [`DeadLetterStore::dlq_act`].
#[async_trait]
pub trait OperationStore: sealed::Sealed + Send + Sync + 'static {
    /// Stores a new operation, `pending`.
    async fn operation_create(&self, op: NewOperation, now: Timestamp) -> Result<Operation>;

    /// One operation.
    async fn operation_get(&self, id: &str) -> Result<Option<Operation>>;

    /// Operations, newest first; only `status` and only `kind` if given.
    async fn operation_list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<OperationKind>,
        limit: u32,
    ) -> Result<Vec<Operation>>;

    /// Takes operation `id` for `holder` until `now + lease` if
    /// [`state::may_claim`](crate::operation::state::may_claim) allows: a pending one starts
    /// running; a running one whose holder's lease ran out is taken over. Returns it, or
    /// `None` if it cannot be taken (finished, or held by a live holder).
    async fn operation_claim(
        &self,
        id: &str,
        holder: &str,
        lease: std::time::Duration,
        now: Timestamp,
    ) -> Result<Option<Operation>>;

    /// Open operations (pending or running), oldest first, at most `limit`: where a runner
    /// looks for work it may take.
    async fn operation_open(&self, limit: u32) -> Result<Vec<Operation>>;

    /// Asks operation `id` to stop, as [`state::cancel`](crate::operation::state::cancel)
    /// says: a pending one is cancelled at once, a running one at its next chunk. Fails with
    /// [`crate::Error::NotFound`], or [`crate::Error::Conflict`] if it has finished.
    async fn operation_cancel(&self, id: &str, now: Timestamp) -> Result<Operation>;

    /// Lets go of operation `id` held by `holder` (a runner pausing at shutdown): its lease
    /// ends now, so the next runner takes it over at once.
    async fn operation_release(&self, id: &str, holder: &str, now: Timestamp) -> Result<()>;

    /// Writes one chunk of operation `id`, held by `holder`, in one transaction: publishes
    /// `advance.events`, moves the cursor, adds the counts, replaces the summary (if given),
    /// extends the lease to `now + lease` and, with `advance.finish`, ends the operation.
    /// Returns the operation after it. Fails with [`crate::Error::Conflict`] (nothing written)
    /// when `holder` does not hold it running (taken over, or ended).
    async fn operation_advance(
        &self,
        id: &str,
        holder: &str,
        advance: Advance,
        lease: std::time::Duration,
        now: Timestamp,
    ) -> Result<Operation>;

    /// Marks operation `id` failed with `error` (its holder gave up on it).
    async fn operation_fail(
        &self,
        id: &str,
        holder: &str,
        error: &str,
        now: Timestamp,
    ) -> Result<()>;
}

/// Scheduled jobs' bookkeeping: each tick of a job runs once across every process on the
/// database, and never while the previous run is still going.
#[async_trait]
pub trait JobStore: sealed::Sealed + Send + Sync + 'static {
    /// Tries to start job `name` for `holder`, for the tick at `tick` (`None`: a run asked
    /// for by hand, outside the schedule). It starts if no live holder runs it and, for a
    /// tick, if that tick has not run yet; the run's lock lasts until `now + ttl`.
    async fn job_begin(
        &self,
        name: &str,
        tick: Option<Timestamp>,
        holder: &str,
        ttl: std::time::Duration,
        now: Timestamp,
    ) -> Result<JobStart>;

    /// Ends `holder`'s run of job `name` with `status` (`ok` or `failed`) and a message.
    async fn job_end(
        &self,
        name: &str,
        holder: &str,
        status: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<()>;

    /// Every job that has ever run, by name.
    async fn job_list(&self) -> Result<Vec<JobRow>>;

    /// The statistics snapshot last kept (JSON, see [`StatsSnapshot`](crate::StatsSnapshot)),
    /// if any.
    async fn stats_get(&self) -> Result<Option<String>>;

    /// Keeps a statistics snapshot (JSON), replacing the last one.
    async fn stats_put(&self, snapshot: &str) -> Result<()>;
}

/// Which store is behind an `Arc<dyn Store>`, for the few features that exist on one only
/// (the outboxes write through a backend's own connection type).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum Backend<'a> {
    /// The SQLite store.
    #[cfg(feature = "sqlite")]
    Sqlite(&'a sqlite::SqliteStore),
    /// The PostgreSQL store.
    #[cfg(feature = "postgres")]
    Postgres(&'a postgres::PgStore),
    #[doc(hidden)]
    #[cfg(not(all(feature = "sqlite", feature = "postgres")))]
    _Unused(std::marker::PhantomData<&'a ()>),
}

/// The clock to read for `store` when none is given: its own
/// ([`StoreLifecycle::clock`]), else the system clock.
pub fn clock_of(store: &Arc<dyn Store>) -> Arc<dyn Clock> {
    store
        .clock()
        .unwrap_or_else(|| Arc::new(crate::clock::SystemClock))
}

/// The store's own life: wake-ups, its background work, closing.
#[async_trait]
pub trait StoreLifecycle: sealed::Sealed + Send + Sync + 'static {
    /// Which store this is.
    fn backend(&self) -> Backend<'_>;

    /// Notified whenever a write may have made an event due (an insert, a retry scheduled, a
    /// dead letter sent back, another process's commit), so the dispatcher wakes without
    /// polling.
    fn wakeups(&self) -> Arc<Notify>;

    /// Starts the store's own background work on `clock` (PostgreSQL: renewing the leases of
    /// the events this process holds, every third of the lease), until [`close`](Self::close).
    /// Calling it again does nothing. The default has none.
    fn start_background(&self, clock: Arc<dyn Clock>) {
        let _ = clock;
    }

    /// The clock a bus on this store reads when none is given: PostgreSQL's is the database
    /// server's clock (an [`OffsetClock`](crate::OffsetClock) it keeps measured), so every
    /// process of a cluster decides leases, back-off and schedules on one clock. The default
    /// has none (the system clock).
    fn clock(&self) -> Option<Arc<dyn Clock>> {
        None
    }

    /// Hands the errors of the store's own background work (PostgreSQL: the `LISTEN`
    /// connection, lease renewals) to `hook` as well as to `tracing`. The default has none.
    fn set_error_hook(&self, hook: crate::hook::ErrorHook) {
        let _ = hook;
    }

    /// Flushes and closes the database. Later calls fail with [`crate::Error::StoreClosed`];
    /// closing twice is harmless.
    async fn close(&self) -> Result<()>;
}

/// Every capability of a store together: what a bus holds as `Arc<dyn Store>`. Implemented
/// for every type that implements all the capability traits (only durabus's own stores can).
pub trait Store:
    EventStore
    + SubscriptionStore
    + QueryStore
    + DeadLetterStore
    + OperationStore
    + JobStore
    + PayloadStore
    + CancelStore
    + PeriodicStore
    + PauseStore
    + BreakerStore
    + RateStore
    + ConcurrencyStore
    + StoreLifecycle
{
}

impl<T> Store for T where
    T: EventStore
        + SubscriptionStore
        + QueryStore
        + DeadLetterStore
        + OperationStore
        + JobStore
        + PayloadStore
        + CancelStore
        + PeriodicStore
        + PauseStore
        + BreakerStore
        + RateStore
        + ConcurrencyStore
        + StoreLifecycle
{
}

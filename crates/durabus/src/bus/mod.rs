//! The [`EventBus`]: the public handle. It holds a dispatcher (delivery) and its own lifecycle
//! (started, shutting down, the background tasks under a supervisor).

mod builder;
mod manual;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tokio::sync::Mutex;

pub use crate::dispatch::breakers::SubscriptionBreaker;
pub use builder::BusBuilder;

use crate::clock::Clock;
use crate::config::BusConfig;
use crate::dispatch::Dispatcher;
use crate::dispatch::registry::Entry;
use crate::dlq::DlqInspector;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::handler::{Handler, SubscribeOptions, Subscription};
use crate::metrics::MetricsSnapshot;
use crate::ops::payloads::ConfigSource;
use crate::pattern::Pattern;
use crate::payload::NewSnapshot;
use crate::shutdown::Supervisor;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::store::Backend;
use crate::store::{InsertMode, Store, SubscriptionRow};

/// A subscription id (a UUID string).
pub type SubscriptionId = String;

/// Where the bus is in its life.
#[derive(Default)]
struct Lifecycle {
    shutting_down: AtomicBool,
    started: AtomicBool,
    /// The background tasks (the worker loop; later the operations layer's), drained at
    /// shutdown.
    supervisor: Supervisor,
    /// Set once shutdown has finished; held while it runs, so a second call waits for it.
    closed: Mutex<bool>,
    /// Serialises `subscribe`, so the check that a name is free and its use are one step.
    subscribing: Mutex<()>,
}

struct Inner {
    dispatcher: Arc<Dispatcher>,
    life: Lifecycle,
    /// The payload configuration (snapshots, redaction), shared with the dispatcher and every
    /// reader the bus hands out.
    payloads: Arc<ConfigSource>,
}

/// A persistent event bus. Cheap to clone: clones share one bus.
///
/// ```no_run
/// # async fn demo() -> durabus::Result<()> {
/// use durabus::{EventBus, Event, SubscribeOptions};
///
/// let bus = EventBus::open("app.db").await?;
/// bus.subscribe("user.*", |event: Event| async move {
///     println!("{} {}", event.event_type, event.payload);
///     Ok(())
/// }, SubscribeOptions::default()).await?;
/// bus.start().await?;
/// let id = bus.publish("user.created", &serde_json::json!({"id": 42})).await?;
/// bus.shutdown().await?;
/// # let _ = id; Ok(()) }
/// ```
#[derive(Clone)]
pub struct EventBus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("store", self.inner.dispatcher.store())
            .field("shutting_down", &self.is_shutdown())
            .finish_non_exhaustive()
    }
}

impl EventBus {
    /// A builder for a bus with custom settings.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }

    /// Opens a bus with default settings on `target`: a `postgres://` (or `postgresql://`) URL
    /// selects PostgreSQL (with the `postgres` feature), anything else is an SQLite file path.
    pub async fn connect(target: &str) -> Result<EventBus> {
        Self::builder().database(target).build().await
    }

    /// Opens a bus on the SQLite file at `path` (created if missing) with default settings.
    /// `":memory:"` opens a private in-memory database, as [`in_memory`](Self::in_memory) does.
    #[cfg(feature = "sqlite")]
    pub async fn open(path: impl AsRef<std::path::Path>) -> Result<EventBus> {
        Self::builder().sqlite(path.as_ref()).build().await
    }

    /// Opens a bus on a private in-memory SQLite database with default settings: for tests and
    /// throw-away buses; the events are gone when the bus shuts down. See
    /// [`SqliteStore::in_memory`](crate::SqliteStore::in_memory) for how it differs from a file.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> durabus::Result<()> {
    /// use durabus::store::QueryStore;
    ///
    /// let bus = durabus::EventBus::in_memory().await?;
    /// let id = bus.publish("user.created", &serde_json::json!({"id": 1})).await?;
    /// let event = bus.store().get_event(id).await?;
    /// assert_eq!(event.map(|e| e.event_type), Some("user.created".to_owned()));
    /// bus.shutdown().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "sqlite")]
    pub async fn in_memory() -> Result<EventBus> {
        Self::builder().in_memory().build().await
    }

    pub(crate) fn from_parts(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: BusConfig,
    ) -> EventBus {
        let payloads = Arc::new(ConfigSource::new(store.clone()));
        EventBus {
            inner: Arc::new(Inner {
                dispatcher: Arc::new(Dispatcher::new(store, clock, config, payloads.cache())),
                life: Lifecycle::default(),
                payloads,
            }),
        }
    }

    /// Loads the payload configuration from the store (the publish path reads it without
    /// waiting).
    pub(crate) async fn load_payload_configs(&self) -> Result<()> {
        self.inner.payloads.reload().await.map(|_| ())
    }

    /// The payload store: snapshots per stage, their configuration per type, soft delete,
    /// retention (on this bus's store and clock; configuration changes apply to this bus at
    /// once).
    pub fn payloads(&self) -> crate::Payloads {
        crate::Payloads::with_source(self.store(), self.clock(), self.inner.payloads.clone())
    }

    /// The `published` snapshots of `events`, when automatic snapshots are on. A snapshot of
    /// the payload as published is [shared](NewSnapshot::shared) with the event's row where the
    /// store allows it; a redacted one is compressed here, on the caller's task, not on the
    /// store's writer.
    fn published_snapshots(
        &self,
        events: &[NewEvent],
        now: crate::Timestamp,
    ) -> Result<Vec<NewSnapshot>> {
        if !self.config().payload_snapshots {
            return Ok(Vec::new());
        }
        let set = self.dispatcher().payload_configs().get();
        let mut out = Vec::new();
        for e in events {
            if let Some(s) = crate::payload::published_snapshot(
                e.id,
                &e.event_type,
                &e.payload,
                set.resolve(&e.event_type),
                now,
            )? {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// The Prometheus metrics of this bus.
    pub(crate) fn telemetry(&self) -> &Arc<crate::telemetry::Telemetry> {
        self.dispatcher().telemetry()
    }

    fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.inner.dispatcher
    }

    /// An [`Outbox`](crate::Outbox) for publishing inside the application's own SQLite
    /// transactions, on this bus's tables, clock and payload limit. Fails with
    /// [`Error::InvalidConfig`] when the bus's store is not SQLite.
    #[cfg(feature = "sqlite")]
    pub fn outbox(&self) -> Result<crate::Outbox> {
        match self.store().backend() {
            Backend::Sqlite(store) => Ok(store
                .outbox()
                .with_clock(self.clock())
                .max_payload_bytes(self.config().max_payload_bytes)),
            #[allow(unreachable_patterns)]
            _ => Err(Error::InvalidConfig(
                "the outbox writes through a SQLite connection; this bus's store is not SQLite"
                    .into(),
            )),
        }
    }

    /// A [`PgOutbox`](crate::store::postgres::PgOutbox) for publishing inside the
    /// application's own `sqlx` PostgreSQL transactions, on this bus's schema and payload
    /// limit. Fails with [`Error::InvalidConfig`] when the bus's store is not PostgreSQL.
    #[cfg(feature = "postgres")]
    pub fn pg_outbox(&self) -> Result<crate::store::postgres::PgOutbox> {
        match self.store().backend() {
            Backend::Postgres(store) => Ok(store
                .outbox()
                .max_payload_bytes(self.config().max_payload_bytes)),
            #[allow(unreachable_patterns)]
            _ => Err(Error::InvalidConfig(
                "this bus's store is not PostgreSQL".into(),
            )),
        }
    }

    /// Completed events (history): listing by type, status and time (payloads redacted as
    /// configured), and retention purges.
    pub fn history(&self) -> crate::History {
        crate::History::with_source(self.store(), self.clock(), self.inner.payloads.clone())
    }

    /// The store under the bus.
    pub fn store(&self) -> Arc<dyn Store> {
        self.dispatcher().store().clone()
    }

    /// The bus's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.dispatcher().clock().clone()
    }

    /// The bus's settings.
    pub fn config(&self) -> &BusConfig {
        self.dispatcher().config()
    }

    /// A dead-letter inspector on the same store and clock.
    pub fn dlq(&self) -> DlqInspector {
        DlqInspector::with_source(self.store(), self.clock(), self.inner.payloads.clone())
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shutdown(&self) -> bool {
        self.inner.life.shutting_down.load(Ordering::SeqCst)
    }

    fn check_open(&self) -> Result<()> {
        if self.is_shutdown() {
            Err(Error::Shutdown)
        } else {
            Ok(())
        }
    }

    fn prepare<T: Serialize + ?Sized>(&self, event_type: &str, payload: &T) -> Result<NewEvent> {
        self.check_open()?;
        let event = NewEvent::new(event_type, payload)?;
        self.check_size(&event)?;
        Ok(event)
    }

    fn check_size(&self, event: &NewEvent) -> Result<()> {
        event.check(self.config().max_payload_bytes)
    }

    fn map_closed(e: Error) -> Error {
        match e {
            Error::StoreClosed => Error::Shutdown,
            other => other,
        }
    }

    /// Stores the event durably, delivers it to the matching handlers, waits for that first
    /// delivery attempt, and returns the event's id. A failed attempt is retried in the
    /// background on the retry schedule (the bus must be [`start`](Self::start)ed for that).
    ///
    /// Fails with [`Error::InvalidEventType`] (also for the reserved `system.*` types),
    /// [`Error::InvalidPayload`], [`Error::PayloadTooLarge`] or [`Error::Shutdown`]; nothing is
    /// stored then.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        event_type: &str,
        payload: &T,
    ) -> Result<EventId> {
        let event = self.prepare(event_type, payload)?;
        self.publish_event(event).await
    }

    /// [`publish`](Self::publish) for a prepared [`NewEvent`] (with metadata, say, or a
    /// caller-chosen id: see [`NewEvent::with_id`]). If an event with the same id is already
    /// stored, nothing is stored or delivered and the id is returned: publishing is
    /// idempotent, also when two publishes of one id race.
    pub async fn publish_event(&self, event: NewEvent) -> Result<EventId> {
        let dispatcher = self.dispatcher().clone();
        let guard = dispatcher.inflight().enter();
        self.check_open()?;
        self.check_size(&event)?;
        let now = dispatcher.clock().now();
        let id = event.id;
        let snapshots = self.published_snapshots(std::slice::from_ref(&event), now)?;
        // Stored and delivered in one task of its own: if the caller drops this future, the
        // insert and the delivery still finish and the outcome is recorded, so the event is
        // never left `processing` with nobody delivering it.
        let task = tokio::spawn(async move {
            let started = std::time::Instant::now();
            let inserted = dispatcher
                .store()
                .insert_with(vec![event.clone()], snapshots, InsertMode::Claimed, now)
                .await
                .map_err(Self::map_closed)?;
            counted(
                dispatcher.telemetry(),
                [event.event_type.as_str()],
                &inserted,
                started,
            );
            // Idempotent publish: an event with this id is already stored (and delivered, or
            // on its way); it is not delivered again.
            if inserted.first() == Some(&true) {
                dispatcher
                    .deliver(event.into_event(EventStatus::Processing, now))
                    .await;
            }
            drop(guard);
            Ok(())
        });
        match task.await {
            Ok(result) => result.map(|()| id),
            Err(e) => Err(Error::Internal(format!("the publish task failed: {e}"))),
        }
    }

    /// Stores the event durably and returns its id at once; the background workers deliver it.
    /// This is the fast path. Fails like [`publish`](Self::publish).
    pub async fn enqueue<T: Serialize + ?Sized>(
        &self,
        event_type: &str,
        payload: &T,
    ) -> Result<EventId> {
        let event = self.prepare(event_type, payload)?;
        self.enqueue_event(event).await
    }

    /// [`enqueue`](Self::enqueue) for a prepared [`NewEvent`]. Idempotent like
    /// [`publish_event`](Self::publish_event): an id already stored is not stored again.
    pub async fn enqueue_event(&self, event: NewEvent) -> Result<EventId> {
        self.check_open()?;
        self.check_size(&event)?;
        let id = event.id;
        let now = self.clock().now();
        let snapshots = self.published_snapshots(std::slice::from_ref(&event), now)?;
        let event_type = event.event_type.clone();
        let started = std::time::Instant::now();
        let inserted = self
            .store()
            .insert_with(vec![event], snapshots, InsertMode::Pending, now)
            .await
            .map_err(Self::map_closed)?;
        counted(self.telemetry(), [event_type.as_str()], &inserted, started);
        Ok(id)
    }

    /// Batch publish: stores many events in one transaction, all or none, and returns their
    /// ids at once; the background workers deliver them. Every event is checked first: one bad
    /// event fails the whole call and nothing is stored. Events whose id is already stored are
    /// skipped (idempotent), their ids returned like the others.
    pub async fn enqueue_batch(&self, events: Vec<NewEvent>) -> Result<Vec<EventId>> {
        self.check_open()?;
        for event in &events {
            self.check_size(event)?;
        }
        let ids = events.iter().map(|e| e.id).collect();
        if events.is_empty() {
            return Ok(ids);
        }
        let now = self.clock().now();
        let snapshots = self.published_snapshots(&events, now)?;
        let types: Vec<String> = events.iter().map(|e| e.event_type.clone()).collect();
        let started = std::time::Instant::now();
        let inserted = self
            .store()
            .insert_with(events, snapshots, InsertMode::Pending, now)
            .await
            .map_err(Self::map_closed)?;
        counted(
            self.telemetry(),
            types.iter().map(String::as_str),
            &inserted,
            started,
        );
        Ok(ids)
    }

    /// Registers `handler` for event types matching `pattern` and stores the subscription row.
    /// Returns the subscription id. Patterns may name the bus's own events (`system.*`).
    ///
    /// Fails with [`Error::InvalidPattern`], [`Error::InvalidConfig`] (a zero timeout, a bad
    /// retry override, a name already in use) or [`Error::Shutdown`].
    pub async fn subscribe<H: Handler>(
        &self,
        pattern: &str,
        handler: H,
        options: SubscribeOptions,
    ) -> Result<SubscriptionId> {
        self.check_open()?;
        let pattern = Pattern::new(pattern)?;
        let config = self.config();
        let timeout = options.timeout.unwrap_or(config.handler_timeout);
        if timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "subscription timeout must be above zero".into(),
            ));
        }
        if let Some(o) = &options.retry {
            config.retry.with_override(o).validate()?;
        }
        let registry = self.dispatcher().registry();
        let _one_at_a_time = self.inner.life.subscribing.lock().await;
        if let Some(name) = &options.name {
            if name.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "subscription name must not be empty".into(),
                ));
            }
            if registry.has_key(name) {
                return Err(Error::InvalidConfig(format!(
                    "a subscription named {name:?} already exists on this bus; names must be unique"
                )));
            }
        }
        let id = uuid::Uuid::now_v7().to_string();
        let info = Subscription {
            id: id.clone(),
            name: options.name.clone(),
            event_type: pattern.as_str().to_owned(),
            timeout,
            retry: options.retry,
            created_at: self.clock().now(),
        };
        let row = SubscriptionRow {
            id: id.clone(),
            name: info.name.clone(),
            event_type: info.event_type.clone(),
            created_at: info.created_at,
        };
        self.store()
            .save_subscription(row)
            .await
            .map_err(Self::map_closed)?;
        registry.add(Entry {
            key: options.name.unwrap_or_else(|| id.clone()),
            info,
            pattern,
            handler: Arc::new(handler),
        });
        Ok(id)
    }

    /// Each live subscription's circuit breaker: state, failure rate and samples in the window,
    /// and when it opened.
    pub fn breakers(&self) -> Vec<SubscriptionBreaker> {
        let d = self.dispatcher();
        d.breakers().snapshot(d.registry().all(), d.clock().now())
    }

    /// A snapshot of the retry metrics kept since this bus was built.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.dispatcher().metrics().snapshot()
    }

    /// The live subscriptions of this bus, in the order their handlers run.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.dispatcher().registry().all()
    }

    /// Removes a subscription: its handler gets no more events and its row is deleted.
    /// Fails with [`Error::SubscriptionNotFound`] for an unknown id.
    pub async fn unsubscribe(&self, id: &str) -> Result<()> {
        let d = self.dispatcher();
        let removed = d.registry().remove(id);
        d.breakers().remove(id);
        let deleted = self
            .store()
            .delete_subscription(id)
            .await
            .map_err(Self::map_closed)?;
        if removed || deleted {
            Ok(())
        } else {
            Err(Error::SubscriptionNotFound(id.to_owned()))
        }
    }

    /// Starts the background workers. First recovers events a crash left in `processing` (back
    /// to `pending` with `retry_count + 1`) so they are delivered again. Returns how many were
    /// recovered. Subscribe before starting, so recovered events find their handlers. Calling it
    /// again does nothing and returns 0. A bus built with
    /// [`deliver(false)`](crate::BusBuilder::deliver) neither recovers nor claims: it starts
    /// the maintenance jobs and the operations runner only, and returns 0.
    pub async fn start(&self) -> Result<u64> {
        self.check_open()?;
        let life = &self.inner.life;
        if life.started.swap(true, Ordering::SeqCst) {
            return Ok(0);
        }
        let deliver = self.config().deliver;
        let recovered = if deliver {
            match self.recover_and_start_store().await {
                Ok(n) => n,
                Err(e) => {
                    // Not started: a later call may try again.
                    life.started.store(false, Ordering::SeqCst);
                    self.config()
                        .on_error
                        .report(crate::hook::ErrorSource::Recovery, &e, false);
                    return Err(e);
                }
            }
        } else {
            0
        };
        if recovered > 0 {
            tracing::info!(recovered, "recovered events left in processing by a crash");
        }
        if deliver {
            let dispatcher = self.dispatcher().clone();
            life.supervisor.spawn("worker", move |shutdown| {
                crate::dispatch::worker::run(dispatcher, shutdown)
            });
        }
        if self.config().scheduler.enabled {
            let scheduler = self.scheduler()?;
            life.supervisor
                .spawn("scheduler", move |shutdown| scheduler.run(shutdown));
        }
        if self.config().payload_snapshots {
            let payloads = self.inner.payloads.clone();
            let hook = self.config().on_error.clone();
            life.supervisor.spawn("payload-configs", move |mut shutdown| async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(crate::ops::payloads::CONFIG_REFRESH) => {}
                        _ = shutdown.recv() => return,
                    }
                    if let Err(e) = payloads.reload().await {
                        tracing::warn!(error = %e, "could not reload the payload configuration");
                        hook.report(crate::hook::ErrorSource::PayloadConfig, &e, true);
                    }
                }
            });
        }
        let operations = self.operations();
        let every = self.config().operations_poll;
        let hook = self.config().on_error.clone();
        life.supervisor.spawn("operations", move |shutdown| {
            run_operations(operations, every, hook, shutdown)
        });
        Ok(recovered)
    }

    /// Dead-letter records: list, inspect, groups, act, bulk operations (on this bus's store
    /// and clock).
    pub fn dead_letters(&self) -> crate::DeadLetters {
        crate::DeadLetters::with_source(self.store(), self.clock(), self.inner.payloads.clone())
            .observed(self.telemetry().clone())
    }

    /// The Prometheus text of this bus's metrics (every name is listed in
    /// `docs/OPERATIONS.md`): what it counted since it was built, the store's depth and age
    /// gauges (read by indexed queries at most every
    /// [`MetricsConfig::gauge_refresh`](crate::MetricsConfig), 15 s by default, and cached in
    /// between), its breakers and this process's resources. Serve it at `/metrics` with
    /// [`telemetry::CONTENT_TYPE`](crate::telemetry::CONTENT_TYPE). Fails with the store's error
    /// if the gauges cannot be read.
    #[cfg(feature = "metrics")]
    pub async fn metrics_text(&self) -> Result<String> {
        let d = self.dispatcher();
        let telemetry = d.telemetry();
        let now = d.clock().now();
        let store = match telemetry.cached_gauges(now) {
            Some(g) => g,
            None => {
                let g = d.store().gauges(now).await?;
                telemetry.keep_gauges(now, g.clone());
                g
            }
        };
        let breakers = d
            .breakers()
            .snapshot(d.registry().all(), now)
            .into_iter()
            .map(|b| {
                let label = b.name.clone().unwrap_or_else(|| b.event_type.clone());
                (
                    label,
                    crate::telemetry::breaker_state_value(b.breaker.state),
                )
            })
            .collect();
        let process = tokio::task::spawn_blocking(crate::telemetry::ProcessStats::read)
            .await
            .map_err(|e| Error::Internal(format!("reading process stats failed: {e}")))?;
        telemetry.encode(&crate::telemetry::ScrapeInput {
            store,
            now,
            breakers,
            process,
            uptime: telemetry.uptime(),
        })
    }

    /// Durable operations on this bus's store: read, cancel, run. A started bus runs submitted
    /// operations (and resumes those whose runner died) by itself.
    pub fn operations(&self) -> crate::Operations {
        crate::Operations::with_clock(self.store(), self.clock())
            .observed(Some(self.telemetry().clone()))
            .hooked(self.config().on_error.clone())
    }

    /// Replays on this bus's store and clock: preview, dry run, submit (a started bus runs
    /// submitted replays by itself), run here with a handler or filter, follow, cancel.
    pub fn replays(&self) -> crate::Replays {
        crate::Replays::with_clock(self.store(), self.clock()).observed(self.telemetry().clone())
    }

    /// The maintenance jobs of this bus (see [`SchedulerConfig`](crate::SchedulerConfig)): list
    /// them, run one now. A started bus runs them on their schedules.
    pub fn scheduler(&self) -> Result<crate::Scheduler> {
        Ok(
            crate::Scheduler::new(self.store(), self.clock(), self.config().scheduler.clone())?
                .observed(self.telemetry().clone())
                .hooked(self.config().on_error.clone()),
        )
    }

    /// Crash recovery, then the store's own background work (PostgreSQL's lease heartbeats).
    async fn recover_and_start_store(&self) -> Result<u64> {
        let store = self.store();
        let recovered = store
            .recover_processing(self.clock().now())
            .await
            .map_err(Self::map_closed)?;
        store.start_background(self.clock());
        Ok(recovered)
    }

    /// Dispatches running now (inline publishes and background deliveries).
    pub fn in_flight(&self) -> usize {
        self.dispatcher().inflight().count()
    }

    /// Graceful shutdown: new publishes and subscribes fail with [`Error::Shutdown`], the workers
    /// stop claiming, in-flight dispatches get up to `shutdown_timeout` to finish, then the store
    /// is closed. Handlers still running after the timeout are abandoned; their events stay
    /// `processing` and are recovered by the next start. Calling it again is harmless.
    pub async fn shutdown(&self) -> Result<()> {
        let life = &self.inner.life;
        let mut closed = life.closed.lock().await;
        if *closed {
            return Ok(());
        }
        life.shutting_down.store(true, Ordering::SeqCst);
        life.supervisor.drain().await;
        let d = self.dispatcher();
        // Rows of unnamed subscriptions belong to this process alone; named rows stay, since a
        // later process with the same names carries on their delivery records.
        for sub in d.registry().all() {
            if sub.name.is_none()
                && let Err(e) = d.store().delete_subscription(&sub.id).await
            {
                tracing::warn!(subscription_id = %sub.id, error = %e, "could not remove the subscription row");
                d.config().on_error.report(
                    crate::hook::ErrorSource::SubscriptionCleanup,
                    &e,
                    false,
                );
            }
        }
        let timeout = d.config().shutdown_timeout;
        if tokio::time::timeout(timeout, d.inflight().wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = d.inflight().count(),
                timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                "shutdown timed out waiting for handlers; their events will be recovered on the next start"
            );
        }
        let result = d.store().close().await;
        *closed = true;
        result
    }
}

/// The bus's operations task: every `every`, starts each operation that can be taken
/// (submitted, or left by a runner that died) on a task of its own, so a long, rate-limited
/// replay does not hold up a bulk retry submitted after it. At shutdown the running ones
/// pause at their next chunk boundary and are resumed by the next start.
async fn run_operations(
    operations: crate::Operations,
    every: std::time::Duration,
    hook: crate::hook::ErrorHook,
    mut shutdown: crate::shutdown::Shutdown,
) {
    let options = crate::RunOptions::default();
    let mut running: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    let active = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    loop {
        // Look after a pause, not at once: a start has its own work (recovery, the first
        // claims) and an operation waits a second at most.
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.recv() => break,
        }
        while running.try_join_next().is_some() {}
        let claimable = match operations.claimable().await {
            Ok(ops) => ops,
            Err(e) => {
                tracing::warn!(error = %e, "looking for operations to run failed");
                hook.report(crate::hook::ErrorSource::Operation(None), &e, true);
                continue;
            }
        };
        for op in claimable {
            if !crate::sync::lock(&active).insert(op.id.clone()) {
                continue;
            }
            let (operations, options, active, hook) = (
                operations.clone(),
                options.clone(),
                active.clone(),
                hook.clone(),
            );
            running.spawn(async move {
                match operations.run(&op.id, &options, |_| {}).await {
                    Ok(_) => {}
                    Err(e) if e.kind() == crate::ErrorKind::Conflict => {}
                    Err(e) => {
                        tracing::warn!(operation = %op.id, error = %e, "an operation could not run");
                        hook.report(
                            crate::hook::ErrorSource::Operation(Some(op.id.clone())),
                            &e,
                            false,
                        );
                    }
                }
                crate::sync::lock(&active).remove(&op.id);
            });
        }
    }
    options.pause.store(true, Ordering::SeqCst);
    while running.join_next().await.is_some() {}
}

/// Counts the events a publish stored (`inserted`: one flag per event, `false` for an id
/// already stored) and times the insert.
fn counted<'a>(
    telemetry: &crate::telemetry::Telemetry,
    types: impl IntoIterator<Item = &'a str>,
    inserted: &[bool],
    started: std::time::Instant,
) {
    telemetry.store_call(crate::telemetry::StoreCall::Insert, started.elapsed());
    let mut run: Option<(&str, u64)> = None;
    for (event_type, stored) in types.into_iter().zip(inserted) {
        if !stored {
            continue;
        }
        match &mut run {
            Some((t, n)) if *t == event_type => *n += 1,
            _ => {
                if let Some((t, n)) = run.take() {
                    telemetry.published(t, n);
                }
                run = Some((event_type, 1));
            }
        }
    }
    if let Some((t, n)) = run {
        telemetry.published(t, n);
    }
}

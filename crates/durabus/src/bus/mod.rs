//! The [`EventBus`]: publish, enqueue, subscribe, unsubscribe, start and shutdown.

mod breakers;
mod builder;
pub(crate) mod inflight;
mod manual;
pub(crate) mod registry;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

pub use breakers::SubscriptionBreaker;
pub use builder::BusBuilder;

use self::breakers::Breakers;
use self::inflight::InFlight;
use self::registry::{Entry, Registry};
use crate::clock::Clock;
use crate::config::BusConfig;
use crate::dlq::DlqInspector;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::handler::{Handler, SubscribeOptions, Subscription};
use crate::metrics::{MetricsSnapshot, RetryMetrics};
use crate::pattern::Pattern;
use crate::store::{InsertMode, Store, SubscriptionRow};

/// A subscription id (a UUID string).
pub type SubscriptionId = String;

pub(crate) struct Inner {
    pub store: Arc<dyn Store>,
    pub clock: Arc<dyn Clock>,
    pub config: BusConfig,
    pub registry: Registry,
    pub breakers: Breakers,
    pub metrics: RetryMetrics,
    pub inflight: Arc<InFlight>,
    shutting_down: AtomicBool,
    started: AtomicBool,
    stop: watch::Sender<bool>,
    worker: Mutex<Option<JoinHandle<()>>>,
    /// Renews the store's leases (PostgreSQL) from `start` until the drain at shutdown ends.
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    closed: Mutex<bool>,
    /// Serialises `subscribe`, so the check that a name is free and its use are one step.
    subscribing: Mutex<()>,
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
            .field("store", &self.inner.store)
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
    #[cfg(feature = "sqlite")]
    pub async fn open(path: impl AsRef<std::path::Path>) -> Result<EventBus> {
        Self::builder().sqlite(path.as_ref()).build().await
    }

    pub(crate) fn from_parts(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: BusConfig,
    ) -> EventBus {
        EventBus {
            inner: Arc::new(Inner {
                store,
                clock,
                breakers: Breakers::new(config.breaker),
                config,
                registry: Registry::default(),
                metrics: RetryMetrics::default(),
                inflight: Arc::new(InFlight::default()),
                shutting_down: AtomicBool::new(false),
                started: AtomicBool::new(false),
                stop: watch::channel(false).0,
                worker: Mutex::new(None),
                heartbeat: Mutex::new(None),
                closed: Mutex::new(false),
                subscribing: Mutex::new(()),
            }),
        }
    }

    /// An [`Outbox`](crate::Outbox) for publishing inside the application's own SQLite
    /// transactions, on this bus's tables, clock and payload limit. Fails with
    /// [`Error::InvalidConfig`] when the bus's store is not SQLite.
    #[cfg(feature = "sqlite")]
    pub fn outbox(&self) -> Result<crate::Outbox> {
        let store = self
            .inner
            .store
            .as_any()
            .downcast_ref::<crate::SqliteStore>()
            .ok_or_else(|| {
                Error::InvalidConfig(
                    "the outbox writes through a SQLite connection; this bus's store is not SQLite"
                        .into(),
                )
            })?;
        Ok(store
            .outbox()
            .with_clock(self.inner.clock.clone())
            .max_payload_bytes(self.inner.config.max_payload_bytes))
    }

    /// A [`PgOutbox`](crate::store::postgres::PgOutbox) for publishing inside the
    /// application's own `sqlx` PostgreSQL transactions, on this bus's schema and payload
    /// limit. Fails with [`Error::InvalidConfig`] when the bus's store is not PostgreSQL.
    #[cfg(feature = "postgres")]
    pub fn pg_outbox(&self) -> Result<crate::store::postgres::PgOutbox> {
        let store = self
            .inner
            .store
            .as_any()
            .downcast_ref::<crate::store::postgres::PgStore>()
            .ok_or_else(|| Error::InvalidConfig("this bus's store is not PostgreSQL".into()))?;
        Ok(store
            .outbox()
            .max_payload_bytes(self.inner.config.max_payload_bytes))
    }

    /// Completed events (history): listing by type, status and time, and retention purges.
    pub fn history(&self) -> crate::History {
        crate::History::with_clock(self.inner.store.clone(), self.inner.clock.clone())
    }

    /// The store under the bus.
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// The bus's clock.
    pub fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    /// The bus's settings.
    pub fn config(&self) -> &BusConfig {
        &self.inner.config
    }

    /// A dead-letter inspector on the same store and clock.
    pub fn dlq(&self) -> DlqInspector {
        DlqInspector::with_clock(self.inner.store.clone(), self.inner.clock.clone())
    }

    /// Whether [`shutdown`](Self::shutdown) has been called.
    pub fn is_shutdown(&self) -> bool {
        self.inner.shutting_down.load(Ordering::SeqCst)
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
        event.check(self.inner.config.max_payload_bytes)
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
    /// Fails with [`Error::InvalidEventType`], [`Error::InvalidPayload`],
    /// [`Error::PayloadTooLarge`] or [`Error::Shutdown`]; nothing is stored then.
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
        let guard = self.inner.inflight.enter();
        self.check_open()?;
        self.check_size(&event)?;
        let now = self.inner.clock.now();
        let id = event.id;
        // Stored and delivered in one task of its own: if the caller drops this future, the
        // insert and the delivery still finish and the outcome is recorded, so the event is
        // never left `processing` with nobody delivering it.
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            let inserted = inner
                .store
                .insert(vec![event.clone()], InsertMode::Claimed, now)
                .await
                .map_err(Self::map_closed)?;
            // Idempotent publish: an event with this id is already stored (and delivered, or
            // on its way); it is not delivered again.
            if inserted.first() == Some(&true) {
                crate::dispatch::deliver(&inner, event.into_event(EventStatus::Processing, now))
                    .await;
            }
            drop(guard);
            Ok(())
        });
        match task.await {
            Ok(result) => result.map(|()| id),
            Err(e) => Err(Error::Database(format!("the publish task failed: {e}"))),
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
        self.inner
            .store
            .insert(vec![event], InsertMode::Pending, self.inner.clock.now())
            .await
            .map_err(Self::map_closed)?;
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
        self.inner
            .store
            .insert(events, InsertMode::Pending, self.inner.clock.now())
            .await
            .map_err(Self::map_closed)?;
        Ok(ids)
    }

    /// Registers `handler` for event types matching `pattern` and stores the subscription row.
    /// Returns the subscription id.
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
        let timeout = options.timeout.unwrap_or(self.inner.config.handler_timeout);
        if timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "subscription timeout must be above zero".into(),
            ));
        }
        if let Some(o) = &options.retry {
            self.inner.config.retry.with_override(o).validate()?;
        }
        let _one_at_a_time = self.inner.subscribing.lock().await;
        if let Some(name) = &options.name {
            if name.trim().is_empty() {
                return Err(Error::InvalidConfig(
                    "subscription name must not be empty".into(),
                ));
            }
            if self.inner.registry.has_key(name) {
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
            created_at: self.inner.clock.now(),
        };
        let row = SubscriptionRow {
            id: id.clone(),
            name: info.name.clone(),
            event_type: info.event_type.clone(),
            created_at: info.created_at,
        };
        self.inner
            .store
            .save_subscription(row)
            .await
            .map_err(Self::map_closed)?;
        self.inner.registry.add(Entry {
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
        self.inner
            .breakers
            .snapshot(self.inner.registry.all(), self.inner.clock.now())
    }

    /// A snapshot of the retry metrics kept since this bus was built.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The live subscriptions of this bus, in the order their handlers run.
    pub fn subscriptions(&self) -> Vec<Subscription> {
        self.inner.registry.all()
    }

    /// Removes a subscription: its handler gets no more events and its row is deleted.
    /// Fails with [`Error::SubscriptionNotFound`] for an unknown id.
    pub async fn unsubscribe(&self, id: &str) -> Result<()> {
        let removed = self.inner.registry.remove(id);
        self.inner.breakers.remove(id);
        let deleted = self
            .inner
            .store
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
    /// again does nothing and returns 0.
    pub async fn start(&self) -> Result<u64> {
        self.check_open()?;
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return Ok(0);
        }
        let recovered = match self
            .inner
            .store
            .recover_processing(self.inner.clock.now())
            .await
        {
            Ok(n) => n,
            Err(e) => {
                // Not started: a later call may try again.
                self.inner.started.store(false, Ordering::SeqCst);
                return Err(Self::map_closed(e));
            }
        };
        if recovered > 0 {
            tracing::info!(recovered, "recovered events left in processing by a crash");
        }
        let handle = tokio::spawn(crate::dispatch::run_worker(
            self.inner.clone(),
            self.inner.stop.subscribe(),
        ));
        *self.inner.worker.lock().await = Some(handle);
        self.start_heartbeat().await;
        Ok(recovered)
    }

    /// Starts renewing the store's leases (PostgreSQL), once.
    pub(crate) async fn start_heartbeat(&self) {
        let mut beat = self.inner.heartbeat.lock().await;
        if beat.is_none()
            && let Some(every) = self.inner.store.heartbeat_interval()
        {
            *beat = Some(tokio::spawn(crate::dispatch::worker::heartbeat(
                self.inner.clone(),
                every,
            )));
        }
    }

    /// Dispatches running now (inline publishes and background deliveries).
    pub fn in_flight(&self) -> usize {
        self.inner.inflight.count()
    }

    /// Graceful shutdown: new publishes and subscribes fail with [`Error::Shutdown`], the workers
    /// stop claiming, in-flight dispatches get up to `shutdown_timeout` to finish, then the store
    /// is closed. Handlers still running after the timeout are abandoned; their events stay
    /// `processing` and are recovered by the next start. Calling it again is harmless.
    pub async fn shutdown(&self) -> Result<()> {
        let mut closed = self.inner.closed.lock().await;
        if *closed {
            return Ok(());
        }
        self.inner.shutting_down.store(true, Ordering::SeqCst);
        self.inner.stop.send_replace(true);
        if let Some(worker) = self.inner.worker.lock().await.take() {
            let _ = worker.await;
        }
        // Rows of unnamed subscriptions belong to this process alone; named rows stay, since a
        // later process with the same names carries on their delivery records.
        for sub in self.inner.registry.all() {
            if sub.name.is_none()
                && let Err(e) = self.inner.store.delete_subscription(&sub.id).await
            {
                tracing::warn!(subscription_id = %sub.id, error = %e, "could not remove the subscription row");
            }
        }
        let timeout = self.inner.config.shutdown_timeout;
        if tokio::time::timeout(timeout, self.inner.inflight.wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = self.inner.inflight.count(),
                timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                "shutdown timed out waiting for handlers; their events will be recovered on the next start"
            );
        }
        if let Some(beat) = self.inner.heartbeat.lock().await.take() {
            beat.abort();
        }
        let result = self.inner.store.close().await;
        *closed = true;
        result
    }
}

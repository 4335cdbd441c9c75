//! The [`EventBus`]: the public handle. It holds a dispatcher (delivery) and its own lifecycle
//! (started, shutting down, the background tasks under a supervisor).

mod builder;
mod cancels;
mod lifecycle;
mod manual;
mod pauses;
mod periodics;
mod publish;
mod typed;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Mutex;

pub use crate::dispatch::breakers::SubscriptionBreaker;
pub use builder::BusBuilder;

use crate::clock::Clock;
use crate::config::BusConfig;
use crate::dispatch::Dispatcher;
use crate::dispatch::registry::Entry;
use crate::dlq::DlqInspector;
use crate::error::{Error, Result};
use crate::handler::{Handler, SubscribeOptions, Subscription};
use crate::pattern::Pattern;
use crate::payload::ConfigSource;
use crate::shutdown::Supervisor;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::store::Backend;
use crate::store::{Store, SubscriptionRow};
use crate::telemetry::MetricsSnapshot;

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
    /// The maintenance jobs, their schedules parsed once when the bus is built (a start only
    /// spawns the task that runs them).
    scheduler: crate::Scheduler,
    /// Wakes the periodic-event loop after a registration in this process.
    periodic_changed: Arc<tokio::sync::Notify>,
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

    /// Fails only if a job's schedule does not parse (the builder has checked them already).
    pub(crate) fn from_parts(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: BusConfig,
    ) -> Result<EventBus> {
        let payloads = Arc::new(ConfigSource::new(store.clone()));
        let dispatcher = Arc::new(Dispatcher::new(store, clock, config, payloads.cache()));
        let scheduler = crate::Scheduler::new(
            dispatcher.store().clone(),
            dispatcher.clock().clone(),
            dispatcher.config().scheduler.clone(),
        )?
        .observed(dispatcher.telemetry().clone())
        .hooked(dispatcher.config().on_error.clone());
        Ok(EventBus {
            inner: Arc::new(Inner {
                dispatcher,
                life: Lifecycle::default(),
                payloads,
                scheduler,
                periodic_changed: Arc::new(tokio::sync::Notify::new()),
            }),
        })
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

    /// The Prometheus metrics of this bus.
    pub(crate) fn telemetry(&self) -> &Arc<crate::telemetry::Telemetry> {
        self.dispatcher().telemetry()
    }

    fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.inner.dispatcher
    }

    /// An [`Outbox`](crate::Outbox) for publishing inside the application's own SQLite
    /// transactions, on this bus's tables, clock and payload limit. Fails with
    /// [`Error::Invalid`] when the bus's store is not SQLite.
    #[cfg(feature = "sqlite")]
    pub fn outbox(&self) -> Result<crate::Outbox> {
        match self.store().backend() {
            Backend::Sqlite(store) => Ok(store
                .outbox()
                .with_clock(self.clock())
                .max_payload_bytes(self.config().max_payload_bytes)
                .observed(self.dispatcher().published().clone())),
            #[allow(unreachable_patterns)]
            _ => Err(Error::invalid(
                "store",
                "the outbox writes through a SQLite connection; this bus's store is not SQLite",
                "a bus on SQLite (pg_outbox() on PostgreSQL)",
            )),
        }
    }

    /// A [`PgOutbox`](crate::store::postgres::PgOutbox) for publishing inside the
    /// application's own `sqlx` PostgreSQL transactions, on this bus's schema and payload
    /// limit. Fails with [`Error::Invalid`] when the bus's store is not PostgreSQL.
    #[cfg(feature = "postgres")]
    pub fn pg_outbox(&self) -> Result<crate::store::postgres::PgOutbox> {
        match self.store().backend() {
            Backend::Postgres(store) => Ok(store
                .outbox()
                .max_payload_bytes(self.config().max_payload_bytes)
                .observed(self.dispatcher().published().clone())),
            #[allow(unreachable_patterns)]
            _ => Err(Error::invalid(
                "store",
                "this bus's store is not PostgreSQL",
                "a bus on PostgreSQL (outbox() on SQLite)",
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

    /// Registers `handler` for event types matching `pattern` and stores the subscription row.
    /// Returns the subscription id. Patterns may name the bus's own events (`system.*`).
    ///
    /// Fails with [`Error::InvalidPattern`], [`Error::Invalid`] (a zero timeout, a bad
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
            return Err(Error::invalid(
                "timeout",
                "a subscription's timeout is zero",
                "a duration above zero",
            ));
        }
        if let Some(o) = &options.retry {
            config.retry.with_override(o).validate()?;
        }
        let registry = self.dispatcher().registry();
        let _one_at_a_time = self.inner.life.subscribing.lock().await;
        if let Some(name) = &options.name {
            if name.trim().is_empty() {
                return Err(Error::invalid(
                    "name",
                    "a subscription's name is empty",
                    "a non-blank name, unique on the bus",
                ));
            }
            if registry.has_key(name) {
                return Err(Error::invalid(
                    "name",
                    format!("a subscription named {name:?} already exists on this bus"),
                    "a name unique on the bus",
                ));
            }
        }
        let id = uuid::Uuid::now_v7().to_string();
        let info = Subscription {
            id: id.clone(),
            name: options.name.clone(),
            event_type: pattern.as_str().to_owned(),
            timeout,
            retry: options.retry,
            max_snoozes: options
                .max_snoozes
                .unwrap_or(crate::handler::DEFAULT_MAX_SNOOZES),
            hold_key_on_dead_letter: options.hold_key_on_dead_letter,
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

    /// Every process's breakers as reported to the store in the last
    /// [`REPORT_FRESH`](crate::breaker::report::REPORT_FRESH), by subscription and process
    /// (a started bus reports its own on every change and every
    /// [`REPORT_EVERY`](crate::breaker::report::REPORT_EVERY)).
    pub async fn breaker_reports(&self) -> Result<Vec<crate::breaker::report::BreakerReport>> {
        let since = self
            .clock()
            .now()
            .minus(crate::breaker::report::REPORT_FRESH);
        self.store().breaker_reports(since).await
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
    /// [`telemetry::CONTENT_TYPE`](crate::telemetry::CONTENT_TYPE).
    ///
    /// A store that cannot be read (down, or slower than
    /// [`GAUGE_READ_LIMIT`](crate::telemetry::GAUGE_READ_LIMIT)) does not fail the scrape: it
    /// shows `store_up 0`, the store gauges keep their last values, and the counters are
    /// served as ever. It fails only if the text cannot be made.
    #[cfg(feature = "metrics")]
    pub async fn metrics_text(&self) -> Result<String> {
        let d = self.dispatcher();
        let telemetry = d.telemetry();
        let now = d.clock().now();
        let store = match telemetry.cached_gauges(now) {
            Some(cached) => cached,
            None => {
                let read = tokio::time::timeout(
                    crate::telemetry::GAUGE_READ_LIMIT,
                    telemetry.read_gauges(d.store().as_ref(), now),
                )
                .await;
                match read {
                    Ok(Ok(g)) => telemetry.keep_gauges(now, g),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "metrics: the store's gauges could not be read");
                        telemetry.keep_failure(now)
                    }
                    Err(_) => {
                        tracing::warn!(
                            limit = ?crate::telemetry::GAUGE_READ_LIMIT,
                            "metrics: reading the store's gauges took too long"
                        );
                        telemetry.keep_failure(now)
                    }
                }
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
            store: store.gauges,
            store_up: store.up,
            now: store.as_of,
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
    /// them, run one now. A started bus runs them on their schedules. (It does not fail: the
    /// schedules were parsed when the bus was built; the `Result` is kept for callers written
    /// against earlier versions.)
    pub fn scheduler(&self) -> Result<crate::Scheduler> {
        Ok(self.inner.scheduler.clone())
    }

    /// Dispatches running now (inline publishes and background deliveries).
    pub fn in_flight(&self) -> usize {
        self.dispatcher().inflight().count()
    }
}

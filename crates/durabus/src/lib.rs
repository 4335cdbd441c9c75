//! # durabus
//!
//! A persistent event bus: publishing stores the event durably first; subscribed handlers get
//! it at least once; failures are retried on a schedule that survives crashes; what cannot be
//! delivered lands in a dead-letter queue that can be listed, retried and purged.
//!
//! ```no_run
//! use durabus::{Event, EventBus, Page, SubscribeOptions, RetryOverride};
//!
//! # async fn run() -> durabus::Result<()> {
//! let bus = EventBus::open("app.db").await?;
//! bus.subscribe("order.*", |event: Event| async move {
//!     let order: serde_json::Value = event.payload()?;
//!     println!("{}: {order}", event.event_type);
//!     Ok(())
//! }, SubscribeOptions::default().name("order-log").retry(RetryOverride::default().max_retries(5)))
//! .await?;
//! bus.start().await?;                       // recovers a crash's leftovers, starts workers
//! bus.publish("order.paid", &serde_json::json!({"id": 1})).await?;  // durable, then delivered
//! bus.enqueue("order.shipped", &serde_json::json!({"id": 1})).await?; // durable, delivered in background
//! for dead in bus.dlq().list(Page::default()).await? {
//!     println!("dead: {} {:?}", dead.id, dead.errors);
//! }
//! bus.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! # Modules
//! Layers point one way: `bus → dispatch → store`; each capability module owns its data, its
//! pure rules and its service or runner, and uses the store only; the admin HTTP API (crate
//! `durabus-admin`) and the CLI sit on top of them.
//!
//! | module | what it holds |
//! |---|---|
//! | [`bus`](EventBus) | the public handle: publish, enqueue, subscribe, start, shutdown; `poll`/`finalize` for own worker loops; the builder |
//! | `dispatch` | the dispatcher: registry, circuit breakers, in-flight tracking; runs handlers under timeouts, decides what an attempt means, records outcomes |
//! | [`store`] | capability traits by noun ([`EventStore`], [`SubscriptionStore`], [`QueryStore`], [`DeadLetterStore`], [`PayloadStore`](store::PayloadStore), [`CancelStore`](store::CancelStore), [`OperationStore`], [`JobStore`], [`StoreLifecycle`]) and the SQLite and PostgreSQL stores |
//! | [`options`] | publish options: a due time ([`NewEvent::delay`], [`NewEvent::deliver_at`]) and a priority, one builder ([`PublishOptions`]) for every publish path |
//! | [`periodic`] | periodic events: published on a cron expression in a time zone, once per tick across processes ([`Periodic`], [`EventBus::periodic`], [`Periodics`]) |
//! | [`typed`] | typed events: a payload type that names its event type ([`TypedEvent`]), published and handled as itself; a payload that does not fit is dead-lettered at once |
//! | [`cancel`] | cancelling undelivered events (all subscriptions or one): the rules and the record ([`EventBus::cancel`]) |
//! | [`dlq`] | dead letters: records, lifecycle rules, failure groups, filters, the auto-retry and retention rounds, bulk actions; the spec's [`DlqInspector`] and the operator's [`DeadLetters`] |
//! | [`operation`] | durable operations: a typed [`OperationKind`], the state machine, the [`Runner`](operation::Runner) every kind runs under, the [`Operations`] service |
//! | [`replay`] | replay selections, requests, summaries, the rate limiter, the run, the [`Replays`] service |
//! | [`payload`] | payload snapshots: configuration per type, compression, content flags, redaction; the [`Payloads`] service |
//! | [`scheduler`] | maintenance jobs on cron expressions, once per tick cluster-wide ([`Scheduler`]) |
//! | [`telemetry`] | every metric: in-process retry metrics, Prometheus families, gauges |
//! | [`history`], [`stats`] | event history and statistics over a store |
//! | [`hook`] | the error hook ([`BusBuilder::on_error`]) |
//! | `outbox` | publishing inside the application's own transaction |
//! | `testing` | test helpers for applications (feature `test-util`) |
//! | [`actor`], [`retry`], [`pattern`], [`text`], [`whole`], [`breaker`], [`clock`], [`error`] | plain data and pure rules (the input grammars the OpenAPI document states too), injected time, [`Error`] with an [`ErrorKind`] to branch on |
//!
//! # Features
//!
//! Every feature, from `Cargo.toml` (the defaults are marked):
//!
#![doc = document_features::document_features!()]
//!
//! Which capability works on which store:
//!
//! | capability | SQLite | PostgreSQL |
//! |---|---|---|
//! | publish, enqueue, batches, idempotent ids, retries, dead letters, breakers | yes | yes |
//! | several worker processes on one queue (leases, fencing, `LISTEN/NOTIFY`) | one process writes (others may read) | yes |
//! | outbox in the application's transaction | `Outbox` (rusqlite) | `PgOutbox` (sqlx) |
//! | open on what the application already has | its SQLite file (tables by prefix) | its `sqlx::PgPool` (`BusBuilder::postgres_pool`) |
//! | in memory, for tests (`EventBus::in_memory`, `:memory:`) | yes (no WAL, no outbox) | — |
//! | dead-letter lifecycle, bulk operations, replay, payload snapshots, jobs, metrics, admin API | yes | yes |
//!
//! At least one store feature is needed; a build without one stops with a clear error.

#![cfg_attr(docsrs, feature(doc_cfg))]
#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
compile_error!(
    "durabus needs a store: enable the `sqlite` feature (the default) or `postgres`, or both"
);

/// A fail point of the reliability suite: aborts the process here when the `fault-injection`
/// feature is on and the point is armed (see `fault`); nothing at all otherwise.
macro_rules! fail_point {
    ($name:literal) => {{
        #[cfg(feature = "fault-injection")]
        $crate::fault::hit($name);
    }};
}
pub(crate) use fail_point;

pub mod actor;
pub mod breaker;
mod bus;
pub mod cancel;
pub mod clock;
pub mod concurrency;
pub mod config;
mod dispatch;
pub mod dlq;
pub mod error;
pub mod event;
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod fault;
pub mod handler;
pub mod history;
mod holder;
pub mod hook;
pub mod operation;
pub mod options;
#[cfg(feature = "sqlite")]
pub mod outbox;
pub mod pattern;
pub mod pause;
pub mod payload;
pub mod periodic;
mod published;
pub mod rate;
pub mod replay;
pub mod retry;
pub mod scheduler;
mod shutdown;
pub mod stats;
pub mod store;
mod sync;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod text;
pub mod typed;
pub mod whole;

pub use actor::{Actor, ActorKind};
pub use breaker::{BreakerConfig, BreakerSnapshot, BreakerState};
pub use bus::{BusBuilder, EventBus, SubscriptionBreaker, SubscriptionId};
pub use clock::{Clock, ManualClock, OffsetClock, SystemClock, Timestamp};
pub use concurrency::{ConcurrencyLimit, ConcurrencyLimits, PartitionBy, PartitionLimit};
pub use config::{Backoff, BusConfig, MetricsConfig};
pub use dlq::{
    Action, BulkRequest, DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterPage,
    DeadLetterPolicy, DeadLetterStatus, DeadLetterSummary, DeadLetterSummaryPage, DeadLetters,
    DlqInspector, GroupTrend, Keyset, Page, Preview,
};
pub use error::{Error, ErrorKind, Invalid, Result};
pub use event::{Event, EventId, EventStatus, Metadata, NewEvent};
pub use handler::{
    BoxError, Handler, HandlerResult, Permanent, Snooze, SubscribeOptions, Subscription,
};
pub use history::History;
pub use hook::{BusError, ErrorHook, ErrorSource};
pub use operation::{
    OPERATION_KINDS, Operation, OperationKind, OperationStatus, Operations, PaceConfig, RunOptions,
};
pub use options::PublishOptions;
#[cfg(feature = "sqlite")]
pub use outbox::Outbox;
pub use pause::{Pause, PauseRequest, PauseScope, Pauses, ResumeRequest, ResumeTarget};
pub use payload::{ConfigChange, ConfigInput, PayloadConfig, Payloads, Snapshot};
pub use periodic::{Periodic, PeriodicInfo, Periodics};
pub use rate::{RateLimit, RateLimits};
pub use replay::{ReplayHooks, ReplayRequest, ReplayResult, ReplaySelection, Replays};
pub use retry::{RetryOverride, RetryPolicy};
/// The `rusqlite` durabus links, for applications that write events in their own SQLite
/// transactions through an [`Outbox`].
#[cfg(feature = "sqlite")]
pub use rusqlite;
pub use scheduler::{JOBS, JobConfig, Scheduler, SchedulerConfig};
/// The `sqlx` durabus links, for applications that publish inside their own PostgreSQL
/// transactions through a [`PgOutbox`].
#[cfg(feature = "postgres")]
pub use sqlx;
pub use stats::{StatsSnapshot, StoreStats, TypeStats};
#[cfg(feature = "postgres")]
pub use store::postgres::{PgOptions, PgOutbox, PgStore};
#[cfg(feature = "sqlite")]
pub use store::sqlite::{Durability, SqliteOptions, SqliteStore};
pub use store::{
    ActBatch, ActReport, Backend, BreakerStore, ChunkWrite, ConcurrencyStore, DeadLetterStore,
    EventQuery, EventStore, InsertMode, JobRow, JobStart, JobStore, OperationStore, Outcome,
    PauseStore, PeriodicStore, QueryStore, RateStore, RetryCount, StatusCount, Store,
    StoreLifecycle, Stored, SubscriptionRow, SubscriptionStore,
};
pub use telemetry::{MetricsSnapshot, TypeMetrics};
#[cfg(feature = "opentelemetry")]
pub use telemetry::{TRACEPARENT, TRACESTATE};
pub use typed::TypedEvent;

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

/// The runbook's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/OPERATIONS.md")]
pub struct OperationsDoctests;

/// The observability page's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/OBSERVABILITY.md")]
pub struct ObservabilityDoctests;

/// The guide's page "Getting started": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/getting-started.md")]
pub struct GuideGettingStarted;

/// The guide's page "What at least once asks of a handler": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/delivery-guarantees.md")]
pub struct GuideDeliveryGuarantees;

/// The guide's page "Retries, breakers and dead letters": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/retries-and-dead-letters.md")]
pub struct GuideRetries;

/// The guide's page "Operating durabus": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/operating.md")]
pub struct GuideOperating;

/// The guide's page "Scaling out on PostgreSQL": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/scaling-out.md")]
pub struct GuideScalingOut;

/// The guide's page "Testing your application": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/testing.md")]
pub struct GuideTesting;

/// The guide's page "Moving from an outbox table": its examples compiled (and run where marked) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide/from-an-outbox-table.md")]
pub struct GuideFromAnOutboxTable;

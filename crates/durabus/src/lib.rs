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
//! # Layout
//! - [`bus`](EventBus): publish, enqueue, subscribe, start, shutdown.
//! - `dispatch`: running handlers with timeouts, recording outcomes, the worker loop.
//! - [`retry`]: the retry policy, its merge and the back-off formula.
//! - [`pattern`]: event types and glob patterns.
//! - [`dlq`]: the dead-letter inspector.
//! - [`breaker`]: the per-subscription circuit breaker (a pure state machine).
//! - [`metrics`]: in-process retry metrics.
//! - [`store`]: the [`Store`] trait and the SQLite store.
//! - [`clock`]: injected time.

pub mod breaker;
mod bus;
pub mod clock;
pub mod config;
mod dispatch;
pub mod dlq;
pub mod error;
pub mod event;
pub mod handler;
pub mod history;
pub mod metrics;
#[cfg(feature = "sqlite")]
pub mod outbox;
pub mod pattern;
pub mod retry;
pub mod stats;
pub mod store;

pub use breaker::{BreakerConfig, BreakerSnapshot, BreakerState};
pub use bus::{BusBuilder, EventBus, SubscriptionBreaker, SubscriptionId};
pub use clock::{Clock, ManualClock, SystemClock, Timestamp};
pub use config::BusConfig;
pub use dlq::{DlqInspector, Page};
pub use error::{Error, Result};
pub use event::{Event, EventId, EventStatus, Metadata, NewEvent};
pub use handler::{BoxError, Handler, HandlerResult, SubscribeOptions, Subscription};
pub use history::History;
pub use metrics::{MetricsSnapshot, TypeMetrics};
#[cfg(feature = "sqlite")]
pub use outbox::Outbox;
pub use retry::{RetryOverride, RetryPolicy};
/// The `rusqlite` durabus links, for applications that write events in their own SQLite
/// transactions through an [`Outbox`].
#[cfg(feature = "sqlite")]
pub use rusqlite;
/// The `sqlx` durabus links, for applications that publish inside their own PostgreSQL
/// transactions through a [`PgOutbox`].
#[cfg(feature = "postgres")]
pub use sqlx;
pub use stats::{StoreStats, TypeStats};
#[cfg(feature = "postgres")]
pub use store::postgres::{PgOptions, PgOutbox, PgStore};
#[cfg(feature = "sqlite")]
pub use store::sqlite::{Durability, SqliteOptions, SqliteStore};
pub use store::{EventQuery, InsertMode, Outcome, RetryCount, StatusCount, Store, SubscriptionRow};

/// The README's examples, compiled as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;

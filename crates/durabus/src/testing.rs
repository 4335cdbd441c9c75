//! Helpers for testing an application that uses durabus (feature `test-util`): a bus on a
//! manual clock in one line, [`drain`](TestBus::drain) to run delivery until nothing is due,
//! and assertions whose failure messages say what was there instead.
//!
//! ```no_run
//! use durabus::testing::TestBus;
//! use durabus::{Event, SubscribeOptions};
//!
//! # async fn test() -> durabus::Result<()> {
//! let bus = TestBus::sqlite().await?; // a temp-dir database, a manual clock, not started
//! bus.subscribe("order.*", |e: Event| async move {
//!     // the application's handler
//!     # let _ = e;
//!     Ok(())
//! }, SubscribeOptions::default().name("mailer")).await?;
//!
//! bus.enqueue("order.created", &serde_json::json!({ "id": 7 })).await?;
//! let drained = bus.drain().await?;              // delivery until nothing is due
//! assert_eq!(drained.done, 1);
//! bus.assert_published("order.created", |p| p["id"] == 7).await;
//! assert_eq!(bus.handled_by("mailer").await, 1);
//! bus.close().await;
//! # Ok(()) }
//! ```
//!
//! Retries wait on the manual clock: [`drain_through_backoff`](TestBus::drain_through_backoff)
//! moves it to each retry's due time until every event is done or dead, so a test of a handler
//! that fails three times takes milliseconds.

use std::ops::Deref;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bus::{BusBuilder, EventBus};
use crate::clock::{Clock, ManualClock};
use crate::dlq::DeadLetter;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, EventStatus};
use crate::store::EventQuery;

/// How long a drain waits for due events to settle before it gives up (a handler that hangs).
pub const SETTLE_LIMIT: Duration = Duration::from_secs(10);

/// A bus for tests: on a fresh database, with a [`ManualClock`] (starting at
/// 2026-01-01T00:00:00Z), not started until the first drain. Derefs to [`EventBus`].
pub struct TestBus {
    bus: EventBus,
    clock: ManualClock,
    _dir: Option<tempfile::TempDir>,
    #[cfg(feature = "postgres")]
    pg: Option<(String, String)>,
}

impl std::fmt::Debug for TestBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBus")
            .field("now", &self.clock.now())
            .finish_non_exhaustive()
    }
}

impl Deref for TestBus {
    type Target = EventBus;
    fn deref(&self) -> &EventBus {
        &self.bus
    }
}

/// What a drain did: the application's events (the bus's own `system.*` announcements are
/// left out) that ended in each state since the drain began.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Events that became `done`.
    pub done: u64,
    /// Events that became dead letters.
    pub dead: u64,
    /// Events still `pending` at the end (retries due later; see
    /// [`drain_through_backoff`](TestBus::drain_through_backoff)).
    pub waiting: u64,
    /// How far the manual clock was moved.
    pub advanced: Duration,
}

/// Puts `builder` on a new manual clock with a short poll interval, lets `configure` add to it,
/// and builds the bus.
async fn clocked(
    builder: BusBuilder,
    configure: impl FnOnce(BusBuilder) -> BusBuilder,
) -> Result<(EventBus, ManualClock)> {
    let clock = ManualClock::default();
    let builder = builder
        .clock(Arc::new(clock.clone()))
        .poll_interval(Duration::from_millis(20));
    Ok((configure(builder).build().await?, clock))
}

impl TestBus {
    /// A bus on a new SQLite file in a temp dir (deleted when the `TestBus` is dropped).
    #[cfg(feature = "sqlite")]
    pub async fn sqlite() -> Result<TestBus> {
        TestBus::sqlite_with(|b| b).await
    }

    /// [`sqlite`](Self::sqlite) with more settings: `configure` gets the builder (store and
    /// clock already chosen).
    #[cfg(feature = "sqlite")]
    pub async fn sqlite_with(configure: impl FnOnce(BusBuilder) -> BusBuilder) -> Result<TestBus> {
        let dir = tempfile::tempdir().map_err(|e| Error::Io {
            path: std::env::temp_dir().display().to_string(),
            source: e,
        })?;
        let (bus, clock) = clocked(
            EventBus::builder().sqlite(dir.path().join("test.db")),
            configure,
        )
        .await?;
        Ok(TestBus {
            bus,
            clock,
            _dir: Some(dir),
            #[cfg(feature = "postgres")]
            pg: None,
        })
    }

    /// A bus on a private in-memory SQLite database (nothing on disk; see
    /// [`SqliteStore::in_memory`](crate::SqliteStore::in_memory) for what differs from a file).
    #[cfg(feature = "sqlite")]
    pub async fn in_memory() -> Result<TestBus> {
        TestBus::in_memory_with(|b| b).await
    }

    /// [`in_memory`](Self::in_memory) with more settings.
    #[cfg(feature = "sqlite")]
    pub async fn in_memory_with(
        configure: impl FnOnce(BusBuilder) -> BusBuilder,
    ) -> Result<TestBus> {
        let (bus, clock) = clocked(EventBus::builder().in_memory(), configure).await?;
        Ok(TestBus {
            bus,
            clock,
            _dir: None,
            #[cfg(feature = "postgres")]
            pg: None,
        })
    }

    /// A bus on PostgreSQL at `url`, in a new schema of its own (dropped by
    /// [`close`](Self::close)), so tests run in parallel.
    #[cfg(feature = "postgres")]
    pub async fn postgres(url: &str) -> Result<TestBus> {
        TestBus::postgres_with(url, |b| b).await
    }

    /// [`postgres`](Self::postgres) with more settings.
    #[cfg(feature = "postgres")]
    pub async fn postgres_with(
        url: &str,
        configure: impl FnOnce(BusBuilder) -> BusBuilder,
    ) -> Result<TestBus> {
        let schema = format!("test_{}", EventId::new().0.simple());
        let options = crate::PgOptions {
            schema: schema.clone(),
            max_connections: 4,
            ..crate::PgOptions::default()
        };
        let (bus, clock) =
            clocked(EventBus::builder().postgres_with(url, options), configure).await?;
        Ok(TestBus {
            bus,
            clock,
            _dir: None,
            pg: Some((url.to_owned(), schema)),
        })
    }

    /// The manual clock the bus reads.
    pub fn clock(&self) -> &ManualClock {
        &self.clock
    }

    /// Moves the clock forward.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    async fn count(&self, status: EventStatus) -> Result<u64> {
        Ok(self
            .bus
            .store()
            .counts()
            .await?
            .iter()
            .filter(|c| c.status == status && !c.event_type.starts_with("system."))
            .map(|c| c.count)
            .sum())
    }

    /// Whether something is due or running now.
    async fn busy(&self) -> Result<bool> {
        let processing = self
            .bus
            .store()
            .counts()
            .await?
            .iter()
            .any(|c| c.status == EventStatus::Processing && c.count > 0);
        if self.bus.in_flight() > 0 || processing {
            return Ok(true);
        }
        let now = self.clock.now();
        Ok(self
            .bus
            .store()
            .next_due()
            .await?
            .is_some_and(|due| due <= now))
    }

    /// Waits until nothing is due or running at the clock's current time.
    async fn settle(&self) -> Result<()> {
        self.bus.start().await?;
        let started = Instant::now();
        // Two quiet looks in a row: an outcome is written just after a handler returns.
        let mut quiet = 0;
        while quiet < 2 {
            if self.busy().await? {
                quiet = 0;
                if started.elapsed() > SETTLE_LIMIT {
                    return Err(Error::Internal(format!(
                        "drain: events still due or running after {SETTLE_LIMIT:?}; does a handler hang?"
                    )));
                }
            } else {
                quiet += 1;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// Starts the bus if needed and runs delivery until nothing is due at the clock's current
    /// time (retries due later stay `pending`: see [`Drained::waiting`]). Returns what ended.
    pub async fn drain(&self) -> Result<Drained> {
        self.drain_inner(false).await
    }

    /// [`drain`](Self::drain), moving the manual clock to each retry's due time, until every
    /// event is `done` or a dead letter.
    pub async fn drain_through_backoff(&self) -> Result<Drained> {
        self.drain_inner(true).await
    }

    async fn drain_inner(&self, through_backoff: bool) -> Result<Drained> {
        let (done0, dead0) = (
            self.count(EventStatus::Done).await?,
            self.count(EventStatus::Dlq).await?,
        );
        let start = self.clock.now();
        loop {
            self.settle().await?;
            if !through_backoff {
                break;
            }
            match self.bus.store().next_due().await? {
                Some(due) if due > self.clock.now() => self.clock.set(due),
                _ => break,
            }
        }
        Ok(Drained {
            done: self.count(EventStatus::Done).await?.saturating_sub(done0),
            dead: self.count(EventStatus::Dlq).await?.saturating_sub(dead0),
            waiting: self.count(EventStatus::Pending).await?,
            advanced: start.until(self.clock.now()),
        })
    }

    /// Every stored event of exactly `event_type`, oldest first.
    pub async fn published(&self, event_type: &str) -> Result<Vec<Event>> {
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let page = self
                .bus
                .history()
                .list(EventQuery {
                    event_type: Some(event_type.to_owned()),
                    offset,
                    limit: 1000,
                    ..EventQuery::default()
                })
                .await?;
            offset += page.len() as u64;
            let last = page.len() < 1000;
            all.extend(page);
            if last {
                break;
            }
        }
        all.sort_by_key(|e| (e.created_at, e.id));
        Ok(all)
    }

    /// Asserts that an event of `event_type` whose payload satisfies `matches` was published;
    /// returns it. The failure lists the payloads of that type that were published.
    pub async fn assert_published(
        &self,
        event_type: &str,
        matches: impl Fn(&serde_json::Value) -> bool,
    ) -> Event {
        let events = self.published(event_type).await.unwrap_or_default();
        let payloads: Vec<serde_json::Value> = events.iter().map(Event::payload_value).collect();
        match payloads.iter().position(&matches) {
            Some(i) => events[i].clone(),
            None => panic!(
                "no {event_type:?} event with a matching payload was published; {} were: {}",
                payloads.len(),
                serde_json::to_string(&payloads).unwrap_or_default()
            ),
        }
    }

    /// How many stored events the subscription named `name` has handled successfully.
    pub async fn handled_by(&self, name: &str) -> u64 {
        let mut n = 0;
        let mut offset = 0;
        loop {
            let page = self
                .bus
                .history()
                .list(EventQuery {
                    offset,
                    limit: 1000,
                    ..EventQuery::default()
                })
                .await
                .unwrap_or_default();
            offset += page.len() as u64;
            n += page
                .iter()
                .filter(|e| e.delivered.iter().any(|d| d == name))
                .count() as u64;
            if page.len() < 1000 {
                return n;
            }
        }
    }

    /// Asserts that event `id` is in `status`; returns it.
    pub async fn assert_status(&self, id: EventId, status: EventStatus) -> Event {
        match self.bus.history().get(id).await {
            Ok(e) if e.status == status => e,
            Ok(e) => panic!(
                "event {id} ({}) is {}, not {status}; its errors: {:?}",
                e.event_type, e.status, e.errors
            ),
            Err(e) => panic!("event {id}: {e}"),
        }
    }

    /// Asserts that event `id` is a dead letter whose last error contains `error`; returns its
    /// record.
    pub async fn assert_dead_letter(&self, id: EventId, error: &str) -> DeadLetter {
        let d = match self.bus.dead_letters().get(id).await {
            Ok(d) => d,
            Err(e) => {
                let status = self
                    .bus
                    .history()
                    .get(id)
                    .await
                    .map(|e| e.status.to_string())
                    .unwrap_or_else(|_| "not stored".into());
                panic!("event {id} is not a dead letter (it is {status}): {e}")
            }
        };
        assert!(
            d.last_error.contains(error),
            "dead letter {id}: its last error is {:?}, which does not contain {error:?}",
            d.last_error
        );
        d
    }

    /// Shuts the bus down and removes its database (the PostgreSQL schema; the temp dir goes
    /// when the `TestBus` is dropped).
    pub async fn close(self) {
        let _ = self.bus.shutdown().await;
        #[cfg(feature = "postgres")]
        if let Some((url, schema)) = &self.pg
            && let Ok(pool) = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(url)
                .await
        {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
            )))
            .execute(&pool)
            .await;
            pool.close().await;
        }
    }
}

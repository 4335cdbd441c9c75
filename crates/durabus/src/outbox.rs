//! Publishing inside the application's own SQLite transaction: the transactional outbox.
//!
//! The application keeps its data in SQLite and writes an event in the same transaction as its
//! business rows, through its own [`rusqlite::Connection`]. Both commit or neither does; the
//! event is delivered only after the commit, because until then no other connection can see it.
//! The bus notices commits made on other connections within
//! [`SqliteOptions::watch_interval`](crate::SqliteOptions::watch_interval) (50 ms by default).

use std::sync::Arc;

use rusqlite::Connection;
use serde::Serialize;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::published::Published;
use crate::store::Stored;
use crate::store::sqlite::{Sql, insert_with_snapshots, metadata_texts};

/// The payload limit of an [`Outbox`] unless set: the bus's default, 1 MiB.
const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Writes events into the bus's tables through a connection the application owns, inside
/// whatever transaction is open on it.
///
/// Get one from [`EventBus::outbox`](crate::EventBus::outbox) (same tables, clock and payload
/// limit as the bus) or build one with [`Outbox::new`] / [`Outbox::with_prefix`]. The bus must
/// have opened the database file once (that creates its tables). Use the `rusqlite` that
/// durabus re-exports ([`crate::rusqlite`]) so both sides link the same SQLite.
///
/// ```no_run
/// # async fn demo() -> durabus::Result<()> {
/// use durabus::{EventBus, rusqlite::{Connection, TransactionBehavior}};
/// let bus = EventBus::open("app.db").await?;
/// let outbox = bus.outbox()?;
/// let mut conn = Connection::open("app.db")?;
/// conn.busy_timeout(std::time::Duration::from_secs(5))?;
/// // Immediate: take the write lock up front (the bus writes to the same file).
/// let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
/// tx.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY)", [])?;
/// tx.execute("INSERT INTO orders (id) VALUES (1)", [])?;
/// outbox.publish(&tx, "order.placed", &serde_json::json!({"order": 1}))?;
/// tx.commit()?; // the event exists from here on, and is delivered
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Outbox {
    sql: Arc<Sql>,
    clock: Arc<dyn Clock>,
    max_payload_bytes: usize,
    published: Published,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("table_prefix", &self.sql.prefix)
            .field("max_payload_bytes", &self.max_payload_bytes)
            .finish_non_exhaustive()
    }
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    /// An outbox on the default tables (prefix
    /// [`DEFAULT_PREFIX`](crate::store::sqlite::DEFAULT_PREFIX)), the system clock and a
    /// 1 MiB payload limit.
    pub fn new() -> Outbox {
        Self::from_sql(Arc::new(Sql::default_tables()))
    }

    /// An outbox on tables named with `prefix` (as in
    /// [`SqliteOptions::table_prefix`](crate::SqliteOptions::table_prefix)). Fails with
    /// [`Error::Invalid`] for a prefix that is not letters, digits and `_`.
    pub fn with_prefix(prefix: &str) -> Result<Outbox> {
        Ok(Self::from_sql(Arc::new(Sql::new(prefix)?)))
    }

    pub(crate) fn from_sql(sql: Arc<Sql>) -> Outbox {
        Outbox {
            sql,
            clock: Arc::new(SystemClock),
            max_payload_bytes: DEFAULT_MAX_PAYLOAD,
            published: Published::default(),
        }
    }

    /// Does what the bus's publishes do beside storing: its `published` snapshots and its
    /// count in `events_published_total`.
    pub(crate) fn observed(mut self, published: Published) -> Self {
        self.published = published;
        self
    }

    /// Uses this clock for `created_at` and the due time (the bus's clock, so that a bus on a
    /// [`ManualClock`](crate::ManualClock) sees the events as due).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Sets the payload size limit in bytes.
    #[must_use]
    pub fn max_payload_bytes(mut self, limit: usize) -> Self {
        self.max_payload_bytes = limit;
        self
    }

    /// Writes one event of `event_type` with `payload` on `conn` (a
    /// [`rusqlite::Transaction`] works: it dereferences to a connection) and returns its id.
    /// The event is part of the open transaction: it exists, and is delivered, only if that
    /// transaction commits.
    ///
    /// Fails with [`Error::InvalidEventType`] (also for the reserved `system.*` types),
    /// [`Error::InvalidPayload`], [`Error::PayloadTooLarge`], or [`Error::Database`] (for
    /// example when the bus has never opened this file, so its tables are missing: kind
    /// [`ErrorKind::NotFound`]); nothing is written then.
    pub fn publish<T: Serialize + ?Sized>(
        &self,
        conn: &Connection,
        event_type: &str,
        payload: &T,
    ) -> Result<EventId> {
        self.publish_event(conn, NewEvent::new(event_type, payload)?)
    }

    /// [`publish`](Self::publish) for a prepared [`NewEvent`]. If an event with its id is
    /// already stored, nothing is written and the id is returned (idempotent publish); if its
    /// dedup key is held by an open window, nothing is written and the first event's id is
    /// returned.
    pub fn publish_event(&self, conn: &Connection, event: NewEvent) -> Result<EventId> {
        let id = event.id;
        let ids = self.publish_batch(conn, vec![event])?;
        Ok(ids.first().copied().unwrap_or(id))
    }

    /// Writes many events on `conn`, all or none: every event is checked first, and the
    /// writes run inside a savepoint that is rolled back if one fails, so a failed call leaves
    /// the caller's transaction as it was. Events whose id is already stored are skipped, and
    /// so are events whose dedup key an open window holds. Returns the ids in order (for a
    /// deduplicated event, the first event's id).
    pub fn publish_batch(
        &self,
        conn: &Connection,
        mut events: Vec<NewEvent>,
    ) -> Result<Vec<EventId>> {
        let span = Published::span("outbox", &mut events);
        let _entered = span.enter();
        for e in &events {
            e.check(self.max_payload_bytes)?;
        }
        let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
        if events.is_empty() {
            return Ok(ids);
        }
        let now = self.clock.now();
        // Outside a transaction, the savepoint is the transaction and its RELEASE the commit.
        let own_transaction = conn.is_autocommit();
        conn.execute_batch("SAVEPOINT durabus_outbox")
            .map_err(|e| self.explain_sqlite(conn, e))?;
        let result = self.write(conn, &events, now).and_then(|stored| {
            conn.execute_batch("RELEASE durabus_outbox")
                .map_err(|e| self.explain_sqlite(conn, e))
                .map(|()| stored)
        });
        match result {
            Ok(stored) => {
                // Counted when written: a transaction the application then rolls back was
                // counted all the same (the bus cannot see the application's commit).
                self.published
                    .count(events.iter().map(|e| e.event_type.as_str()), &stored);
                Ok(ids
                    .into_iter()
                    .zip(stored)
                    .map(|(id, s)| s.id(id))
                    .collect())
            }
            Err(e) => {
                let undone =
                    conn.execute_batch("ROLLBACK TO durabus_outbox; RELEASE durabus_outbox");
                if own_transaction && !conn.is_autocommit() {
                    let _ = conn.execute_batch("ROLLBACK");
                }
                match undone {
                    Ok(()) => Err(e),
                    // SQLite already rolled the whole transaction back (disk full, I/O error):
                    // the caller's own writes are gone too.
                    Err(_) if !own_transaction => Err(e.context(
                        "SQLite rolled back the whole transaction, the application's writes in it included: run it again",
                    )),
                    Err(_) => Err(e),
                }
            }
        }
    }

    /// Writes `events` and their `published` snapshots; one [`Stored`] per event.
    fn write(
        &self,
        conn: &Connection,
        events: &[NewEvent],
        now: crate::Timestamp,
    ) -> Result<Vec<Stored>> {
        let snapshots = self.published.snapshots(events, now)?;
        let metadata = metadata_texts(events)?;
        insert_with_snapshots(
            conn,
            &self.sql,
            events,
            &metadata,
            &snapshots,
            EventStatus::Pending,
            now,
        )
        .map_err(|e| self.explain(conn, e))
    }

    fn explain_sqlite(&self, conn: &Connection, e: rusqlite::Error) -> Error {
        self.explain(conn, Error::from(e))
    }

    /// Says what to do about the errors an application's connection commonly meets.
    fn explain(&self, conn: &Connection, e: Error) -> Error {
        if e.kind() == ErrorKind::Locked {
            return e.context(
                "another connection holds the write lock; set a busy_timeout on your connection and begin write transactions with TransactionBehavior::Immediate, so the lock is taken before the transaction reads",
            );
        }
        let table = format!("{}events", self.sql.prefix);
        let missing = matches!(e, Error::Database { .. })
            && conn
                .query_row(
                    "SELECT count(*) = 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [&table],
                    |r| r.get::<_, bool>(0),
                )
                .unwrap_or(false);
        if missing {
            return Error::database(
                ErrorKind::NotFound,
                format!(
                    "the table {table} does not exist: open the bus on this database file first (it creates its tables), with the same table prefix ({:?})",
                    self.sql.prefix
                ),
                e,
            );
        }
        e
    }
}

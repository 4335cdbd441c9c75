//! The SQLite store: a file database in WAL mode, one writer thread with group commit, and a
//! small pool of read connections. No call blocks the async runtime.

mod checkpoint;
mod open;
mod rows;
mod schema;
mod sql;
pub(crate) mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use tokio::sync::{Notify, oneshot};

pub use schema::SCHEMA_VERSION;
pub use sql::{DEFAULT_PREFIX, validate_prefix};
#[doc(hidden)]
pub use sql::{ListFilter, Sql};

use self::open::open_error;
use self::rows::event_from_row;
use self::writer::{Msg, Op, Reply};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, EventStatus, NewEvent};
use crate::store::{
    EventQuery, InsertMode, Outcome, RetryCount, StatusCount, Store, SubscriptionRow,
};

/// How hard a commit works to survive failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=NORMAL` in WAL mode: a committed event survives a crash of the process
    /// (`kill -9`); a power loss may lose the last commits. The default.
    #[default]
    Normal,
    /// `synchronous=FULL`: an fsync per commit, so commits also survive power loss. Group
    /// commit shares each fsync among all waiting publishers.
    Full,
}

/// Options of the SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// Create the file if it does not exist. Defaults to `true`.
    pub create: bool,
    /// Commit durability. Defaults to [`Durability::Normal`].
    pub durability: Durability,
    /// How long one SQLite call waits for a lock held by another connection before our own
    /// back-off takes over. Defaults to 100 ms.
    pub busy_timeout: Duration,
    /// How long a write keeps retrying while another process holds the write lock before it
    /// fails with [`Error::Locked`]. Defaults to 30 s.
    pub lock_timeout: Duration,
    /// Read connections kept open. Defaults to 4.
    pub readers: usize,
    /// Prefix of the store's table names, so they can sit beside an application's own tables
    /// in one file. Defaults to [`DEFAULT_PREFIX`] (`durabus_events`, ...).
    pub table_prefix: String,
    /// How often the store looks for events committed by other connections (an application
    /// writing through its own connection, see [`Outbox`](crate::Outbox), or another
    /// process), with `PRAGMA data_version`, a cheap read of a counter. `None` turns this off;
    /// events written by this store wake the dispatcher at once either way. Defaults to 50 ms.
    pub watch_interval: Option<Duration>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            create: true,
            durability: Durability::Normal,
            busy_timeout: Duration::from_millis(100),
            lock_timeout: Duration::from_secs(30),
            readers: 4,
            table_prefix: DEFAULT_PREFIX.to_owned(),
            watch_interval: Some(Duration::from_millis(50)),
        }
    }
}

/// A [`Store`] on one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    options: SqliteOptions,
    sql: Arc<Sql>,
    tx: Mutex<Option<Sender<Msg>>>,
    readers: Arc<Mutex<Vec<Connection>>>,
    closed: Arc<AtomicBool>,
    wake: Arc<Notify>,
    stats: Arc<WriteStats>,
    /// Callers waiting for the writer's reply.
    waiting: std::sync::atomic::AtomicUsize,
    /// Moving average of how long a lone caller waited for its reply, in µs.
    lone_reply_us: AtomicU64,
}

/// How long a lone caller polls for the writer's reply before parking.
const SPIN: Duration = Duration::from_micros(100);

/// Counts a caller waiting for the writer (uncounted when dropped, also if its future is).
struct Waiting<'a> {
    count: &'a std::sync::atomic::AtomicUsize,
    alone: bool,
}

impl<'a> Waiting<'a> {
    fn enter(count: &'a std::sync::atomic::AtomicUsize) -> Self {
        let alone = count.fetch_add(1, Ordering::AcqRel) == 0;
        Waiting { count, alone }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counters kept by the writer thread.
#[derive(Debug, Default)]
pub(crate) struct WriteStats {
    pub transactions: AtomicU64,
    pub requests: AtomicU64,
    pub synchronous: AtomicU8,
}

impl SqliteStore {
    /// Opens (and by default creates) the database at `path`, in WAL mode, migrating its schema.
    pub async fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let opts = options.clone();
        let p = path.clone();
        tokio::task::spawn_blocking(move || Self::open_blocking(p, opts))
            .await
            .map_err(|e| Error::Database(format!("opening the database panicked: {e}")))?
    }

    /// Transactions and requests the writer has committed so far. With many concurrent writers
    /// there are far fewer transactions than requests: that is group commit at work.
    pub fn write_stats(&self) -> (u64, u64) {
        (
            self.stats.transactions.load(Ordering::Relaxed),
            self.stats.requests.load(Ordering::Relaxed),
        )
    }

    /// The write connection's `PRAGMA synchronous` (1 = NORMAL, 2 = FULL).
    pub fn synchronous(&self) -> u8 {
        self.stats.synchronous.load(Ordering::Relaxed)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The table prefix.
    pub fn table_prefix(&self) -> &str {
        &self.sql.prefix
    }

    /// An [`Outbox`](crate::Outbox) writing into this store's tables from an application's
    /// own connection and transaction.
    pub fn outbox(&self) -> crate::Outbox {
        crate::Outbox::from_sql(self.sql.clone())
    }

    async fn write(&self, op: Op, now: Timestamp) -> Result<Reply> {
        let (reply, mut rx) = oneshot::channel();
        {
            let guard = self.tx.lock().map_err(|_| Error::StoreClosed)?;
            let tx = guard.as_ref().ok_or(Error::StoreClosed)?;
            tx.send(Msg::Write { op, now, reply })
                .map_err(|_| Error::StoreClosed)?;
        }
        let waiting = Waiting::enter(&self.waiting);
        let result = if waiting.alone {
            // The only request in flight: its commit usually takes a few tens of microseconds
            // (NORMAL durability), about what parking this worker thread and waking it again
            // costs. While recent lone commits came back within `SPIN`, poll for the reply,
            // yielding to any other task between polls, before parking. With slower commits
            // (an fsync each) this is skipped.
            let started = std::time::Instant::now();
            let spin = self.lone_reply_us.load(Ordering::Relaxed) <= SPIN.as_micros() as u64;
            let result = loop {
                match rx.try_recv() {
                    Ok(r) => break Some(r),
                    Err(oneshot::error::TryRecvError::Closed) => break None,
                    Err(oneshot::error::TryRecvError::Empty) => {
                        if !spin || started.elapsed() >= SPIN {
                            break rx.await.ok();
                        }
                        tokio::task::yield_now().await;
                    }
                }
            };
            let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
            let average = self.lone_reply_us.load(Ordering::Relaxed);
            self.lone_reply_us
                .store((average * 7 + took) / 8, Ordering::Relaxed);
            result
        } else {
            rx.await.ok()
        };
        drop(waiting);
        result.ok_or(Error::StoreClosed)?
    }

    /// Runs `f` on a pooled read connection, on the blocking thread pool.
    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::StoreClosed);
        }
        let pool = self.readers.clone();
        let path = self.path.clone();
        let busy = self.options.busy_timeout;
        let max = self.options.readers;
        tokio::task::spawn_blocking(move || {
            let conn = match pool.lock().ok().and_then(|mut p| p.pop()) {
                Some(c) => c,
                None => {
                    let c = Connection::open_with_flags(
                        &path,
                        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                    )
                    .map_err(|e| open_error(&path, e))?;
                    c.busy_timeout(busy)?;
                    c
                }
            };
            let out = f(&conn).map_err(Error::from);
            if let Ok(mut p) = pool.lock()
                && p.len() < max
            {
                p.push(conn);
            }
            out
        })
        .await
        .map_err(|e| Error::Database(format!("read task failed: {e}")))?
    }
}

fn parse_status(col: usize, s: &str) -> rusqlite::Result<EventStatus> {
    s.parse().map_err(|e: Error| {
        rusqlite::Error::FromSqlConversionFailure(
            col,
            rusqlite::types::Type::Text,
            e.to_string().into(),
        )
    })
}

fn unexpected(r: Reply) -> Error {
    Error::Database(format!("writer returned an unexpected reply: {r:?}"))
}

#[async_trait]
impl Store for SqliteStore {
    async fn insert(
        &self,
        events: Vec<NewEvent>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<bool>> {
        match self.write(Op::Insert(events, mode), now).await? {
            Reply::Flags(f) => Ok(f),
            r => Err(unexpected(r)),
        }
    }

    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>> {
        match self.write(Op::Claim(limit), now).await? {
            Reply::Events(e) => Ok(e),
            r => Err(unexpected(r)),
        }
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.next_due)?
                .query_row([], |r| r.get::<_, Option<i64>>(0))
                .optional()
                .map(|v| v.flatten().map(Timestamp))
        })
        .await
    }

    async fn record(&self, outcome: Outcome, now: Timestamp) -> Result<bool> {
        match self.write(Op::Record(outcome), now).await? {
            Reply::Flag(f) => Ok(f),
            r => Err(unexpected(r)),
        }
    }

    async fn record_many(&self, outcomes: Vec<Outcome>, now: Timestamp) -> Result<Vec<bool>> {
        match self.write(Op::RecordMany(outcomes), now).await? {
            Reply::Flags(f) => Ok(f),
            r => Err(unexpected(r)),
        }
    }

    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        match self.write(Op::Release(ids), now).await? {
            Reply::Count(n) => Ok(n),
            r => Err(unexpected(r)),
        }
    }

    async fn recover_processing(&self, now: Timestamp) -> Result<u64> {
        match self.write(Op::Recover, now).await? {
            Reply::Count(n) => Ok(n),
            r => Err(unexpected(r)),
        }
    }

    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()> {
        let now = row.created_at;
        match self.write(Op::SaveSubscription(row), now).await? {
            Reply::Unit => Ok(()),
            r => Err(unexpected(r)),
        }
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        match self
            .write(Op::DeleteSubscription(id.to_owned()), Timestamp(0))
            .await?
        {
            Reply::Flag(f) => Ok(f),
            r => Err(unexpected(r)),
        }
    }

    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.subscriptions)?
                .query_map([], |r| {
                    Ok(SubscriptionRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        event_type: r.get(2)?,
                        created_at: Timestamp(r.get(3)?),
                    })
                })?
                .collect()
        })
        .await
    }

    async fn get_event(&self, id: EventId) -> Result<Option<Event>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.get_event)?
                .query_row([id.to_string()], event_from_row)
                .optional()
        })
        .await
    }

    async fn list_events(&self, q: EventQuery) -> Result<Vec<Event>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let text = sql.list(ListFilter {
                status: q.status,
                by_type: q.event_type.is_some(),
                from: q.created_from.is_some(),
                until: q.created_before.is_some(),
            });
            let mut args: Vec<rusqlite::types::Value> = Vec::with_capacity(5);
            if let Some(t) = q.event_type {
                args.push(t.into());
            }
            for bound in [q.created_from, q.created_before].into_iter().flatten() {
                args.push(bound.as_millis().into());
            }
            args.push(i64::try_from(q.limit).unwrap_or(i64::MAX).into());
            args.push(i64::try_from(q.offset).unwrap_or(i64::MAX).into());
            c.prepare_cached(&text)?
                .query_map(rusqlite::params_from_iter(args), event_from_row)?
                .collect()
        })
        .await
    }

    async fn counts(&self) -> Result<Vec<StatusCount>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.counts)?
                .query_map([], |r| {
                    let status: String = r.get(1)?;
                    Ok(StatusCount {
                        event_type: r.get(0)?,
                        status: parse_status(1, &status)?,
                        count: r.get(2)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn retry_counts(&self) -> Result<Vec<RetryCount>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.retry_counts)?
                .query_map([], |r| {
                    let status: String = r.get(0)?;
                    Ok(RetryCount {
                        status: parse_status(1, &status)?,
                        retry_count: r.get(1)?,
                        count: r.get(2)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn dlq_retry(&self, id: EventId, now: Timestamp) -> Result<bool> {
        match self.write(Op::DlqRetry(id), now).await? {
            Reply::Flag(f) => Ok(f),
            r => Err(unexpected(r)),
        }
    }

    async fn dlq_purge(&self, cutoff: Timestamp) -> Result<u64> {
        match self.write(Op::DlqPurge(cutoff), cutoff).await? {
            Reply::Count(n) => Ok(n),
            r => Err(unexpected(r)),
        }
    }

    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        match self.write(Op::PurgeHistory(cutoff, limit), cutoff).await? {
            Reply::Count(n) => Ok(n),
            r => Err(unexpected(r)),
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn wakeups(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    async fn close(&self) -> Result<()> {
        let tx = self.tx.lock().ok().and_then(|mut g| g.take());
        let Some(tx) = tx else {
            return Ok(());
        };
        self.closed.store(true, Ordering::Release);
        let (done, rx) = oneshot::channel();
        if tx.send(Msg::Close(done)).is_ok() {
            let _ = rx.await;
        }
        if let Ok(mut p) = self.readers.lock() {
            p.clear();
        }
        Ok(())
    }
}

//! The SQLite store: a file database in WAL mode, one writer thread with group commit, and a
//! small pool of read connections. No call blocks the async runtime.

mod checkpoint;
mod dead_letters;
mod events;
pub mod gauges;
mod jobs;
mod op;
mod open;
mod operations;
mod payloads;
mod queries;
mod rows;
mod schema;
mod sql;
mod sql_ops;
mod subscriptions;
mod walk;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Notify, oneshot};

pub(crate) use events::insert_events;
pub use schema::SCHEMA_VERSION;
pub use sql::{DEFAULT_PREFIX, validate_prefix};
#[doc(hidden)]
pub use sql::{ListFilter, Sql};

use self::op::{Request, WriteOp};
use self::open::open_error;
use self::writer::Msg;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::store::{Backend, StoreLifecycle, sealed};
use crate::sync::lock;

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
    /// Read connections, and so reads running at once: more concurrent reads wait for a
    /// free connection rather than opening (and parsing the schema into) a new one each.
    /// Defaults to 4; at least 1.
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

/// A [`Store`](crate::Store) on one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    options: SqliteOptions,
    sql: Arc<Sql>,
    tx: Mutex<Option<Sender<Msg>>>,
    readers: Arc<Mutex<Vec<Connection>>>,
    /// One permit per read connection: reads beyond them queue here.
    read_slots: Arc<tokio::sync::Semaphore>,
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
            .map_err(|e| Error::Internal(format!("opening the SQLite database failed: {e}")))?
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

    /// Sends `op` to the writer thread and waits for its committed reply.
    async fn write<O: WriteOp>(&self, op: O, now: Timestamp) -> Result<O::Reply> {
        let (tx, mut rx) = oneshot::channel();
        {
            let guard = lock(&self.tx);
            let sender = guard.as_ref().ok_or(Error::StoreClosed)?;
            let job = Request {
                op,
                now,
                reply: None,
                tx,
            };
            sender
                .send(Msg::Write(Box::new(job)))
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
        let max = self.options.readers.max(1);
        let slot = self
            .read_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::StoreClosed)?;
        tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let pooled = lock(&pool).pop();
            let conn = match pooled {
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
            let mut p = lock(&pool);
            if p.len() < max {
                p.push(conn);
            }
            out
        })
        .await
        .map_err(|e| Error::Internal(format!("an SQLite read task failed: {e}")))?
    }
}

impl sealed::Sealed for SqliteStore {}

#[async_trait]
impl StoreLifecycle for SqliteStore {
    fn backend(&self) -> Backend<'_> {
        Backend::Sqlite(self)
    }

    fn wakeups(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    async fn close(&self) -> Result<()> {
        let Some(tx) = lock(&self.tx).take() else {
            return Ok(());
        };
        self.closed.store(true, Ordering::Release);
        let (done, rx) = oneshot::channel();
        if tx.send(Msg::Close(done)).is_ok() {
            let _ = rx.await;
        }
        lock(&self.readers).clear();
        Ok(())
    }
}

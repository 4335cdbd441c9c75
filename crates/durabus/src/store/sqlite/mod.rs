//! The SQLite store: a file database in WAL mode (or an in-memory one), one writer thread with
//! group commit, and a small pool of read connections. No call blocks the async runtime.

mod breakers;
mod cancels;
mod checkpoint;
mod dead_letter_rows;
mod dead_letter_writes;
mod dead_letters;
mod dedup;
mod error;
mod events;
pub mod gauges;
mod jobs;
mod keys;
mod op;
mod open;
mod operations;
mod outcomes;
mod pauses;
mod payloads;
mod periodic;
mod prepared;
mod queries;
mod rates;
mod row_writes;
mod rows;
mod schema;
mod set_aside;
mod slot_rows;
mod slots;
mod sql;
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

pub(crate) use row_writes::{insert_with_snapshots, metadata_texts};
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
    /// The size, in bytes, the store keeps the WAL file near. Checkpoints are `PASSIVE` and
    /// never wait; under a steady stream of writes or reads they cannot let the WAL start
    /// over, so without a limit it would grow for as long as the load lasts. While writes keep
    /// coming, past half this size the writer runs a `RESTART` checkpoint between two commits:
    /// holding back new writes (10-80 ms on a local disk, with its phase, when no reader is in
    /// the way), it copies back what the last passive checkpoint left and waits up to 1 s for
    /// readers to leave the WAL, and the next write starts the WAL over from the beginning of
    /// the file, cutting a file longer than this back to it. The file can pass the limit while
    /// writes come faster than the checkpoint thread looks (every 100 ms) or while a reader
    /// holds the WAL. When the writer is idle, a WAL past the limit is emptied (`TRUNCATE`).
    /// Defaults to 64 MiB; at least 1 MiB.
    pub wal_limit: u64,
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
            wal_limit: 64 << 20,
        }
    }
}

/// Where the store's connections open: a file, or an in-memory database that the store's
/// connections share by name (SQLite's `memdb` VFS).
#[derive(Debug, Clone)]
pub(super) struct Target {
    /// What the connections open: the file, or the `file:/…?vfs=memdb` URI.
    open: PathBuf,
    /// Whether it is an in-memory database.
    memory: bool,
}

impl Target {
    fn file(path: &Path) -> Target {
        Target {
            open: path.to_path_buf(),
            memory: false,
        }
    }

    fn memory(name: &str) -> Target {
        Target {
            open: PathBuf::from(format!("file:/durabus-{name}?vfs=memdb")),
            memory: true,
        }
    }

    /// Opens a connection with `flags` (plus URI parsing for an in-memory database).
    fn connect(&self, flags: OpenFlags) -> rusqlite::Result<Connection> {
        let flags = if self.memory {
            flags | OpenFlags::SQLITE_OPEN_URI
        } else {
            flags
        };
        Connection::open_with_flags(&self.open, flags)
    }
}

/// The longest name of a shared in-memory database.
const MAX_MEMORY_NAME: usize = 100;

/// A [`Store`](crate::Store) on one SQLite file, or on an in-memory SQLite database (see
/// [`SqliteStore::in_memory`]).
#[derive(Debug)]
pub struct SqliteStore {
    /// The file, or `:memory:` / `memory:{name}` for an in-memory database.
    path: PathBuf,
    target: Target,
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
    /// Events completions claimed for the next claims (see [`set_aside`]).
    set_aside: Arc<set_aside::SetAside>,
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
    /// The path `:memory:` opens a private in-memory database, like [`in_memory`](Self::in_memory).
    pub async fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        if path.to_str() == Some(":memory:") {
            return SqliteStore::in_memory(options).await;
        }
        let target = Target::file(&path);
        Self::open_target(path, target, options).await
    }

    /// Opens a private in-memory database: nothing touches the disk, and the data is gone when
    /// the store closes (or is dropped). Made for tests and throw-away buses; behaviour is the
    /// file store's, with these differences: there is no WAL (SQLite's in-memory journal
    /// instead), so a reader waits while the writer holds a transaction rather than reading
    /// beside it; [`Durability`] does not apply (nothing survives the process); no other
    /// process, and no connection of the application's own, can open it (so no
    /// [`Outbox`](crate::Outbox), and the `durabus` CLI cannot inspect it). `options.create`
    /// must stay `true`.
    pub async fn in_memory(options: SqliteOptions) -> Result<SqliteStore> {
        let name = format!("private-{}", crate::EventId::new().0.simple());
        Self::open_target(PathBuf::from(":memory:"), Target::memory(&name), options).await
    }

    /// Opens the in-memory database called `name` in this process, creating it if no store
    /// has it open. Stores opened with one name share one database for as long as any of them
    /// is open, so a test can stop a bus and start another on the same data (a restart without
    /// a file). `name` is 1 to 100 letters, digits, `-` or `_`. Otherwise as
    /// [`in_memory`](Self::in_memory); with `options.create == false` the database must
    /// already hold durabus's tables.
    pub async fn shared_memory(name: &str, options: SqliteOptions) -> Result<SqliteStore> {
        if name.is_empty()
            || name.len() > MAX_MEMORY_NAME
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(Error::invalid(
                "path",
                format!("{name:?} is not an in-memory database name"),
                format!("1 to {MAX_MEMORY_NAME} letters, digits, '-' or '_' after :memory:"),
            ));
        }
        let target = Target::memory(&format!("shared-{name}"));
        Self::open_target(PathBuf::from(format!("memory:{name}")), target, options).await
    }

    async fn open_target(
        path: PathBuf,
        target: Target,
        options: SqliteOptions,
    ) -> Result<SqliteStore> {
        tokio::task::spawn_blocking(move || Self::open_blocking(path, target, options))
            .await
            .map_err(|e| Error::Internal(format!("opening the SQLite database failed: {e}")))?
    }

    /// Whether the database is in memory (no file).
    pub fn is_memory(&self) -> bool {
        self.target.memory
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

    /// The database file (`:memory:` for a private in-memory database, `memory:{name}` for a
    /// shared one).
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
        let target = self.target.clone();
        // Without WAL a reader waits for the writer's transaction to end; the writer retries
        // its locks for `lock_timeout`, and so does a reader of an in-memory database.
        let busy = if target.memory {
            self.options.lock_timeout
        } else {
            self.options.busy_timeout
        };
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
                    let c = target
                        .connect(OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
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
        // The writer gives back the events set aside for claims when it closes.
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

//! Opening the SQLite store: checks of the path and file, WAL mode, durability, the schema,
//! and the writer and checkpoint threads.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{ErrorCode, OpenFlags};
use tokio::sync::Notify;

use super::sql::Sql;
use super::writer::{Writer, retry_busy};
use super::{Durability, SqliteOptions, SqliteStore, Target, WriteStats, checkpoint, schema};
use crate::error::{Error, ErrorKind, Result};

pub(super) fn display(path: &Path) -> String {
    path.display().to_string()
}

pub(super) fn open_error(path: &Path, e: rusqlite::Error) -> Error {
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => not_a_database(path),
        Some(ErrorCode::CannotOpen) => Error::from(e).context(format!(
            "cannot open {}; check that the path is a readable file in an existing directory",
            display(path)
        )),
        _ => Error::from(e).context(format!("cannot open {}", display(path))),
    }
}

fn not_a_database(path: &Path) -> Error {
    Error::NotADatabase {
        path: display(path),
        reason: "the file is not an SQLite database".into(),
    }
}

/// A file that turned out not to be an SQLite database (SQLite says so on the first read):
/// the error says which file.
fn name_the_file(path: &Path, e: Error) -> Error {
    match e.kind() {
        ErrorKind::Corrupt if matches!(e, Error::Database { .. }) => not_a_database(path),
        _ => e,
    }
}

impl SqliteStore {
    pub(super) fn open_blocking(
        path: PathBuf,
        target: Target,
        options: SqliteOptions,
    ) -> Result<SqliteStore> {
        let sql = Arc::new(Sql::new(&options.table_prefix)?);
        if options
            .watch_interval
            .is_some_and(|d| d < Duration::from_millis(1))
        {
            return Err(Error::invalid(
                "watch_interval",
                "below 1 ms",
                "at least 1 ms, or None to turn it off",
            ));
        }
        if options.wal_limit < 1 << 20 {
            return Err(Error::invalid(
                "wal_limit",
                format!("{} bytes", options.wal_limit),
                "at least 1 MiB (1048576 bytes)",
            ));
        }
        if path.as_os_str().is_empty() {
            return Err(Error::invalid(
                "path",
                "the SQLite store's path is empty",
                "a file path, or :memory:",
            ));
        }
        if target.memory && !options.create && path.to_str() == Some(":memory:") {
            return Err(Error::invalid(
                "create",
                "false for a private in-memory database, which is always new",
                "true",
            ));
        }
        if !target.memory && !options.create && !path.exists() {
            return Err(Error::DatabaseMissing(display(&path)));
        }
        if !target.memory && path.is_dir() {
            return Err(Error::NotADatabase {
                path: display(&path),
                reason: "it is a directory".into(),
            });
        }
        let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if options.create {
            flags |= OpenFlags::SQLITE_OPEN_CREATE;
        }
        let conn = target.connect(flags).map_err(|e| open_error(&path, e))?;
        conn.busy_timeout(options.busy_timeout)
            .map_err(|e| open_error(&path, e))?;
        if !options.create {
            // Opening an existing database (the CLI's inspection commands): never change a
            // file that durabus did not make.
            let ours: bool = conn
                .query_row(
                    "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
                    [&sql.meta],
                    |r| r.get(0),
                )
                .map_err(|e| open_error(&path, e))?;
            if !ours {
                return Err(Error::NotADatabase {
                    path: display(&path),
                    reason: format!(
                        "it is an SQLite database without durabus tables (looked for {}; is the table prefix right?)",
                        sql.meta
                    ),
                });
            }
        }
        // An in-memory database has no WAL (it needs shared memory between files): its
        // journal is kept in memory too.
        let want = if target.memory { "memory" } else { "wal" };
        let mode: String = retry_busy(options.lock_timeout, || {
            conn.query_row(&format!("PRAGMA journal_mode = {want}"), [], |r| r.get(0))
        })
        .map_err(|e| name_the_file(&path, e))?;
        if !mode.eq_ignore_ascii_case(want) {
            return Err(Error::database(
                ErrorKind::Unsupported,
                format!("could not switch {} to {want} journal mode", display(&path)),
                format!("the journal mode stayed {mode}"),
            ));
        }
        let sync = match options.durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        };
        // Checkpoints run on their own thread (checkpoint.rs), not inside the writer's commits.
        // When the writer starts the WAL over, a file longer than `wal_limit` is cut back to it
        // (otherwise it keeps its largest size, written over from the start).
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;
             PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {};",
            options.wal_limit
        ))?;
        retry_busy(options.lock_timeout, || {
            conn.execute_batch("BEGIN IMMEDIATE")
        })?;
        if let Err(e) = schema::migrate(&conn, &sql) {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(name_the_file(&path, e));
        }
        retry_busy(options.lock_timeout, || conn.execute_batch("COMMIT"))?;

        let stats = Arc::new(WriteStats::default());
        let synchronous: u8 = conn.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
        stats.synchronous.store(synchronous, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let (checkpoint_tx, checkpoint_rx) = mpsc::channel();
        let cp_target = target.clone();
        let busy = options.busy_timeout;
        let committed = Arc::new(AtomicBool::new(false));
        let flag = committed.clone();
        let wake = Arc::new(Notify::new());
        let watch = options.watch_interval.map(|every| checkpoint::Watch {
            every,
            wake: wake.clone(),
        });
        let limit = options.wal_limit;
        let wal_reset = Arc::new(checkpoint::WalReset::new(busy));
        let ask = wal_reset.clone();
        let checkpoint_thread = std::thread::Builder::new()
            .name("durabus-sqlite-checkpoint".into())
            .spawn(move || checkpoint::run(cp_target, busy, limit, flag, ask, checkpoint_rx, watch))
            .map_err(|e| Error::Internal(format!("cannot start the checkpoint thread: {e}")))?;
        let set_aside = Arc::new(super::set_aside::SetAside::new(wake.clone()));
        let writer = Writer {
            conn,
            sql: sql.clone(),
            rx,
            lock_timeout: options.lock_timeout,
            wake: wake.clone(),
            set_aside: set_aside.clone(),
            stats: stats.clone(),
            checkpoint: checkpoint_tx,
            checkpoint_thread,
            committed,
            wal_reset,
        };
        std::thread::Builder::new()
            .name("durabus-sqlite-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::Internal(format!("cannot start the writer thread: {e}")))?;
        let read_slots = Arc::new(tokio::sync::Semaphore::new(options.readers.max(1)));
        Ok(SqliteStore {
            path,
            target,
            options,
            sql,
            tx: Mutex::new(Some(tx)),
            readers: Arc::new(Mutex::new(Vec::new())),
            read_slots,
            closed: Arc::new(AtomicBool::new(false)),
            wake,
            stats,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            lone_reply_us: AtomicU64::new(0),
            set_aside,
        })
    }
}

//! The one writer thread. It owns the write connection and commits every request waiting in its
//! channel in one transaction (group commit), so many concurrent publishers share one fsync.
//! Requests are typed ops ([`super::op::WriteOp`]); the thread only runs, commits and answers
//! them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode};
use tokio::sync::{Notify, oneshot};

use super::op::Job;
use super::sql::Sql;
use crate::error::{Error, Result};

/// Most requests committed in one transaction.
const MAX_GROUP: usize = 512;

/// A message on the writer's channel.
pub(super) enum Msg {
    /// A write to run.
    Write(Box<dyn Job>),
    /// Stop after the writes already queued; answered once the store's connections are closed
    /// (the writer's and the checkpoint thread's).
    Close(oneshot::Sender<()>),
}

pub(super) struct Writer {
    pub conn: Connection,
    pub sql: Arc<Sql>,
    pub rx: Receiver<Msg>,
    pub lock_timeout: Duration,
    pub wake: Arc<Notify>,
    pub stats: Arc<super::WriteStats>,
    pub checkpoint: std::sync::mpsc::Sender<super::checkpoint::Stop>,
    /// The checkpoint thread, joined at close: an in-memory database lives, and a file's WAL
    /// stays, while any connection has it open.
    pub checkpoint_thread: std::thread::JoinHandle<()>,
    pub committed: Arc<std::sync::atomic::AtomicBool>,
    /// Asked for by the checkpoint thread when the WAL is past half its limit: a `RESTART`
    /// checkpoint between two groups, so the next write starts the WAL over (checkpoint.rs).
    pub wal_reset: Arc<super::checkpoint::WalReset>,
}

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Runs `f`, retrying with back-off while another process holds the write lock, for at most
/// `limit` in all.
pub(super) fn retry_busy<T>(
    limit: Duration,
    mut f: impl FnMut() -> rusqlite::Result<T>,
) -> Result<T> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(e) if is_busy(&e) => {
                if start.elapsed() >= limit {
                    return Err(Error::Locked(limit));
                }
                tracing::debug!(?pause, "database locked by another connection; retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other.map_err(Error::from),
        }
    }
}

/// Why a group transaction did not commit.
enum GroupError {
    /// A request failed (its error): the caller reruns the others one by one.
    Request(Error),
    /// Beginning or committing failed: every request fails with this.
    Transaction(Error),
}

impl Writer {
    /// Serves requests until closed or until every sender is gone.
    pub fn run(self) {
        let mut batch: Vec<Box<dyn Job>> = Vec::new();
        let mut close: Option<oneshot::Sender<()>> = None;
        while close.is_none() {
            match self.rx.recv() {
                Ok(msg) => push(msg, &mut batch, &mut close),
                Err(_) => break,
            }
            while batch.len() < MAX_GROUP && close.is_none() {
                match self.rx.try_recv() {
                    Ok(msg) => push(msg, &mut batch, &mut close),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if !batch.is_empty() {
                self.commit_group(std::mem::take(&mut batch));
            }
            self.wal_reset.serve(&self.conn);
        }
        // Fail whatever raced with the close, then drop the connection (which closes it).
        while let Ok(msg) = self.rx.try_recv() {
            if let Msg::Write(job) = msg {
                job.answer(Err(Error::StoreClosed));
            }
        }
        let _ = self.checkpoint.send(super::checkpoint::Stop);
        let _ = self.checkpoint_thread.join();
        let _ = self.conn.execute_batch("PRAGMA optimize");
        // The last connection to close checkpoints the whole WAL back into the database.
        let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
        drop(self.conn);
        if let Some(done) = close {
            let _ = done.send(());
        }
    }

    fn commit_group(&self, mut batch: Vec<Box<dyn Job>>) {
        // Optimistic: the whole group in one transaction. If any request fails, the group is
        // rolled back and each request runs alone, so one bad request fails only itself.
        let results: Vec<Result<()>> = match self.transaction(&mut batch) {
            Ok(()) => batch.iter().map(|_| Ok(())).collect(),
            Err(GroupError::Request(e)) if batch.len() == 1 => vec![Err(e)],
            Err(GroupError::Request(_)) => batch
                .iter_mut()
                .map(|job| match self.transaction(std::slice::from_mut(job)) {
                    Ok(()) => Ok(()),
                    Err(GroupError::Request(e) | GroupError::Transaction(e)) => Err(e),
                })
                .collect(),
            Err(GroupError::Transaction(e)) => {
                let shared = Arc::new(e);
                batch
                    .iter()
                    .map(|_| Err(Error::duplicate(&shared)))
                    .collect()
            }
        };
        let committed = results.iter().filter(|r| r.is_ok()).count() as u64;
        if committed > 0 {
            self.committed.store(true, Ordering::Release);
            self.stats.transactions.fetch_add(1, Ordering::Relaxed);
            self.stats.requests.fetch_add(committed, Ordering::Relaxed);
            let wake = batch
                .iter()
                .zip(&results)
                .any(|(job, r)| r.is_ok() && job.wakes());
            if wake {
                self.wake.notify_one();
            }
        }
        for (job, result) in batch.into_iter().zip(results) {
            job.answer(result);
        }
    }

    /// Runs `jobs` in one transaction: committed, or why it was rolled back.
    fn transaction(&self, jobs: &mut [Box<dyn Job>]) -> std::result::Result<(), GroupError> {
        retry_busy(self.lock_timeout, || {
            self.conn.execute_batch("BEGIN IMMEDIATE")
        })
        .map_err(GroupError::Transaction)?;
        for job in jobs.iter_mut() {
            if let Err(e) = job.run(&self.conn, &self.sql) {
                let _ = self.conn.execute_batch("ROLLBACK");
                return Err(GroupError::Request(e));
            }
        }
        if let Err(e) = retry_busy(self.lock_timeout, || self.conn.execute_batch("COMMIT")) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(GroupError::Transaction(e));
        }
        Ok(())
    }
}

fn push(msg: Msg, batch: &mut Vec<Box<dyn Job>>, close: &mut Option<oneshot::Sender<()>>) {
    match msg {
        Msg::Write(job) => batch.push(job),
        Msg::Close(done) => *close = Some(done),
    }
}

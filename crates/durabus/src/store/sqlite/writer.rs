//! The one writer thread. It owns the write connection and commits every request waiting in its
//! channel in one transaction (group commit), so many concurrent publishers share one fsync.
//! Requests are typed ops ([`super::op::WriteOp`]); the thread only runs, commits and answers
//! them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvError, TryRecvError};
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
    /// Told of every commit that wakes the dispatcher (a claim trusts a dry table until one).
    pub set_aside: Arc<super::set_aside::SetAside>,
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
        let mut idle = IdleWait::default();
        while close.is_none() {
            match idle.next(&self.rx) {
                Ok(msg) => push(msg, &mut batch, &mut close),
                Err(_) => break,
            }
            while batch.len() < MAX_GROUP && close.is_none() {
                match self.rx.try_recv() {
                    Ok(msg) => push(msg, &mut batch, &mut close),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            idle.last_group = batch.len();
            if !batch.is_empty() {
                self.commit_group(std::mem::take(&mut batch));
            }
            self.wal_reset.serve(&self.conn);
        }
        // Events set aside and never claimed go back to pending, here on the writer's thread
        // after its last group: no completion can set another aside after this.
        if let Some((back, now)) = super::set_aside::GiveBack::all_of(&self.set_aside) {
            let (tx, _rx) = oneshot::channel();
            let job: Box<dyn Job> = Box::new(super::op::Request {
                op: back,
                now,
                reply: None,
                tx,
            });
            self.commit_group(vec![job]);
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
        for (job, result) in batch.iter_mut().zip(&results) {
            if result.is_ok() {
                job.committed();
            }
        }
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
                self.set_aside.table_changed();
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

/// How long the idle writer polls its channel before it sleeps in the channel's blocking
/// receive. A caller awaiting each commit sends its next request a few microseconds after the
/// reply; found by polling, the request skips waking a sleeping thread, which on a virtual
/// machine costs about as much as the commit (one caller's publish: 0.65× → 0.9× a raw
/// one-row commit, see docs/BENCHMARKS.md).
const IDLE_POLL: Duration = Duration::from_micros(60);

/// After this many waits without polling, the writer polls once more to see whether requests
/// come quickly again.
const PROBE_EVERY: u8 = 64;

/// The writer's wait for its next request. It polls for at most [`IDLE_POLL`] only after a
/// group of one request (a lone caller: with many callers the group holds several, and a
/// polling writer would take a core from the tasks making the next requests), and only while a
/// recent poll found a request, else it sleeps at once (so a bus whose requests come slowly
/// spends no CPU on polling but one probe in [`PROBE_EVERY`] waits).
#[derive(Debug, Default)]
struct IdleWait {
    /// Whether each of the last 8 polls found a request, newest in the lowest bit.
    hits: u8,
    /// Waits since the last poll.
    unpolled: u8,
    /// How many requests the last group held.
    last_group: usize,
}

impl IdleWait {
    /// Whether the next wait polls first.
    fn polls(&self) -> bool {
        self.last_group == 1 && (self.hits != 0 || self.unpolled >= PROBE_EVERY)
    }

    /// Counts a wait: polled and found a request (`Some(true)`), polled in vain
    /// (`Some(false)`), or slept at once (`None`).
    fn count(&mut self, polled: Option<bool>) {
        match polled {
            Some(hit) => {
                self.hits = (self.hits << 1) | u8::from(hit);
                self.unpolled = 0;
            }
            None => self.unpolled = self.unpolled.saturating_add(1),
        }
    }

    /// The next message: polled for, then waited for.
    fn next(&mut self, rx: &Receiver<Msg>) -> std::result::Result<Msg, RecvError> {
        if !self.polls() {
            self.count(None);
            return rx.recv();
        }
        let started = Instant::now();
        let mut spins = 0u32;
        loop {
            match rx.try_recv() {
                Ok(msg) => {
                    self.count(Some(true));
                    return Ok(msg);
                }
                Err(TryRecvError::Disconnected) => return Err(RecvError),
                Err(TryRecvError::Empty) => {}
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(16) {
                if started.elapsed() >= IDLE_POLL {
                    self.count(Some(false));
                    return rx.recv();
                }
                // Lets a thread that is ready to run on this core (the caller's) go first.
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

fn push(msg: Msg, batch: &mut Vec<Box<dyn Job>>, close: &mut Option<oneshot::Sender<()>>) {
    match msg {
        Msg::Write(job) => batch.push(job),
        Msg::Close(done) => *close = Some(done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_writer_polls_while_polling_finds_requests() {
        let mut w = IdleWait {
            last_group: 1,
            ..IdleWait::default()
        };
        assert!(!w.polls(), "a new writer sleeps until a probe");
        for _ in 0..PROBE_EVERY {
            w.count(None);
        }
        assert!(w.polls(), "it probes after {PROBE_EVERY} waits");
        w.count(Some(true));
        assert!(w.polls(), "a poll that found a request keeps it polling");
        for _ in 0..7 {
            w.count(Some(false));
        }
        assert!(w.polls(), "one hit in the last 8 polls is enough");
        w.count(Some(false));
        assert!(!w.polls(), "8 polls in vain: it sleeps at once");
        w.count(None);
        assert!(!w.polls());
        w.count(Some(true));
        assert!(w.polls());
        w.last_group = 2;
        assert!(
            !w.polls(),
            "after a group of several requests it sleeps at once"
        );
    }

    #[test]
    fn a_wait_returns_what_is_sent_and_sees_the_senders_gone() {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut w = IdleWait {
            hits: 1,
            unpolled: 0,
            last_group: 1,
        };
        let (done, _) = oneshot::channel();
        tx.send(Msg::Close(done)).ok();
        assert!(matches!(w.next(&rx), Ok(Msg::Close(_))));
        assert!(w.polls());
        drop(tx);
        assert!(w.next(&rx).is_err(), "every sender gone ends the wait");
    }
}

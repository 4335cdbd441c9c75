//! WAL checkpoints on their own thread and connection. SQLite's automatic checkpoint runs inside
//! whichever commit crosses the threshold, and a checkpoint syncs the database file: that
//! commit (and every caller waiting on it) stalls. Here the writer only sets a flag after
//! commits (no wake-up per commit); this thread looks at it every 100 ms and runs `PASSIVE`
//! checkpoints, which never block the writer or readers.
//!
//! A passive checkpoint copies back only the frames no reader still needs, and the WAL starts
//! over only when a writer finds it fully copied back while no reader uses it. Under a steady
//! stream of writes or reads that moment never comes (the writer has always appended more
//! since the checkpoint began) and the file grows without end (2 GB after a million events in
//! the reliability suite). So while the writer is busy, once the WAL passes half the store's
//! `wal_limit`, this thread asks the writer thread to run a `RESTART` checkpoint between two
//! of its groups (their callers are answered first; this thread could wait forever for the
//! write lock between back-to-back transactions). Holding back new writes, it copies back
//! the frames written since the last passive checkpoint and waits (up to 1 s) for readers
//! still in the WAL to finish; the next write then starts the WAL over from the beginning of
//! the file, written over in place, and SQLite's `journal_size_limit` cuts a file longer than
//! the limit back to it. So the WAL stays near the limit: it passes it only while writes come
//! faster than this thread looks (every 100 ms), or while a reader holds it. A reset holds
//! writes back 10-80 ms on a local disk, with its phase (mostly a sync of the database file),
//! where emptying the file (`TRUNCATE`) took 150-190 ms, also giving the file system back tens
//! of megabytes it would allocate again at once. When the writer is idle and the WAL is past
//! the limit, this thread runs a `TRUNCATE` checkpoint itself and empties the file.
//!
//! After a reset that held writes back for a time, the next comes at least nine times as late
//! (and no sooner than 200 ms), so resets take at most a tenth of the writer's time. After one
//! that a reader held up past the wait, the next comes twice as late (up to 30 s), so a
//! reader that never lets go costs writes at most a thirtieth of their time.
//!
//! The same thread watches for commits made by other connections (an application writing
//! events in its own transactions, another process): `PRAGMA data_version` changes when another
//! connection has committed, and a change wakes the dispatcher. That read touches no table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Notify;

/// Fewest WAL frames worth a checkpoint.
const MIN_FRAMES: i64 = 1000;
/// How often the thread looks for new commits.
const PAUSE: Duration = Duration::from_millis(100);
/// Least time between two checkpoints that start the WAL over.
const RESET_EVERY: Duration = Duration::from_millis(200);
/// After a reset that held writes back for a time, the next waits at least this many times as
/// long, so resets take at most a tenth of the writer's time.
const RESET_SPACING: u32 = 9;
/// Most time between two such checkpoints while readers keep holding the WAL.
const RESET_EVERY_MAX: Duration = Duration::from_secs(30);
/// How long a `RESTART` or `TRUNCATE` checkpoint waits for readers to leave the WAL (holding
/// back writes).
const RESET_WAIT: Duration = Duration::from_secs(1);

/// How a checkpoint meant to start the WAL over went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reset {
    /// Done: the WAL starts over at the next write. It held writes back this long.
    Done(Duration),
    /// A reader kept the WAL in use past [`RESET_WAIT`].
    HeldByReader,
    /// It could not start: another checkpoint was running (SQLite does not wait for that).
    Contended,
    /// It failed otherwise (logged).
    Failed,
}

/// A `RESTART` checkpoint asked of the writer thread by the checkpoint thread, and how it went.
#[derive(Debug)]
pub(super) struct WalReset {
    state: AtomicU8,
    /// How long the last one done held writes back, in µs.
    held_us: AtomicU64,
    /// The connections' usual busy timeout, restored after the checkpoint's longer wait.
    busy: Duration,
}

impl WalReset {
    const IDLE: u8 = 0;
    const ASKED: u8 = 1;
    const DONE: u8 = 2;
    const FAILED: u8 = 3;

    pub(super) fn new(busy: Duration) -> WalReset {
        WalReset {
            state: AtomicU8::new(Self::IDLE),
            held_us: AtomicU64::new(0),
            busy,
        }
    }

    /// The writer, between two groups: runs the checkpoint on its connection if it was asked.
    /// One that could not start because the checkpoint thread's own was running stays asked,
    /// for after the next group.
    pub(super) fn serve(&self, conn: &Connection) {
        let asked = self.state.compare_exchange(
            Self::ASKED,
            Self::IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if asked.is_ok() {
            let state = match reset(conn, "RESTART", self.busy) {
                Reset::Done(held) => {
                    let us = u64::try_from(held.as_micros()).unwrap_or(u64::MAX);
                    self.held_us.store(us, Ordering::Release);
                    Self::DONE
                }
                Reset::Contended => Self::ASKED,
                Reset::HeldByReader | Reset::Failed => Self::FAILED,
            };
            // Only from idle: a result must not overwrite a request made meanwhile.
            let _ =
                self.state
                    .compare_exchange(Self::IDLE, state, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    /// Asks the writer for a reset, unless one is asked already or its result is unread.
    fn ask(&self) {
        let _ = self.state.compare_exchange(
            Self::IDLE,
            Self::ASKED,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn withdraw(&self) {
        let _ = self.state.compare_exchange(
            Self::ASKED,
            Self::IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// How the last checkpoint the writer ran went, once: `Some(Some(held))` if the WAL
    /// starts over (it held writes back for `held`), `Some(None)` if it did not.
    fn outcome(&self) -> Option<Option<Duration>> {
        let took = |state| {
            self.state
                .compare_exchange(state, Self::IDLE, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        };
        if took(Self::DONE) {
            let held = Duration::from_micros(self.held_us.load(Ordering::Acquire));
            return Some(Some(held));
        }
        took(Self::FAILED).then_some(None)
    }
}

/// The wait before the next reset after one that held writes back for `held`.
fn spacing(held: Duration) -> Duration {
    RESET_EVERY.max(held.saturating_mul(RESET_SPACING))
}

/// A checkpoint in `mode` (`RESTART`: the next write starts the WAL over; `TRUNCATE`: the
/// file is emptied too) on `conn`, waiting up to [`RESET_WAIT`] for readers; the busy timeout
/// is `busy` again afterwards.
fn reset(conn: &Connection, mode: &str, busy: Duration) -> Reset {
    let started = Instant::now();
    let _ = conn.busy_timeout(RESET_WAIT);
    let result = run_checkpoint(conn, mode);
    let _ = conn.busy_timeout(busy);
    let held = started.elapsed();
    match result {
        Some((0, _, _)) => {
            tracing::debug!(took = ?held, mode, "the WAL was copied back to start over");
            Reset::Done(held)
        }
        // Busy before it could copy anything (the frame counts are -1): another checkpoint
        // holds the checkpoint lock.
        Some((_, -1, _)) => Reset::Contended,
        Some(_) => {
            tracing::warn!(
                waited = ?held,
                mode,
                "a checkpoint could not start the WAL over: a reader kept it in use; a long query \
                 or an open read transaction on this database keeps the WAL file growing until it \
                 ends"
            );
            Reset::HeldByReader
        }
        None => Reset::Failed,
    }
}

/// Sent when the store closes.
pub(super) struct Stop;

/// Watching for commits made by other connections.
pub(super) struct Watch {
    /// How often to look.
    pub every: Duration,
    /// Notified when another connection has committed.
    pub wake: Arc<Notify>,
}

fn data_version(conn: &Connection) -> Option<i64> {
    conn.query_row("PRAGMA data_version", [], |r| r.get(0)).ok()
}

/// Runs a checkpoint in `mode` and returns (WAL frames, frames copied back), or `None` when
/// another connection held a lock it needed.
fn checkpoint(conn: &Connection, mode: &str) -> Option<(i64, i64)> {
    match run_checkpoint(conn, mode) {
        Some((0, frames, done)) => Some((frames, done)),
        _ => None,
    }
}

/// `PRAGMA wal_checkpoint(mode)`'s row: (busy, WAL frames, frames copied back); `None` (logged)
/// if the statement failed.
fn run_checkpoint(conn: &Connection, mode: &str) -> Option<(i64, i64, i64)> {
    let sql = format!("PRAGMA wal_checkpoint({mode})");
    conn.query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .inspect_err(|e| tracing::debug!(error = %e, mode, "checkpoint did not run"))
        .ok()
}

/// How many WAL frames make `limit` bytes.
fn frame_limit(conn: &Connection, limit: u64) -> i64 {
    let page: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap_or(4096)
        .max(512);
    // A frame is a page plus its 24-byte header.
    i64::try_from(limit).unwrap_or(i64::MAX) / (page + 24)
}

pub(super) fn run(
    target: super::Target,
    busy: Duration,
    wal_limit: u64,
    committed: Arc<AtomicBool>,
    reset_asked: Arc<WalReset>,
    rx: Receiver<Stop>,
    watch: Option<Watch>,
) {
    let conn = match target
        .connect(OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot open the checkpoint connection: the WAL grows until the store closes, and commits by other connections are found only by polling");
            return;
        }
    };
    let _ = conn.busy_timeout(busy);
    let mut behind = false;
    let tick = watch.as_ref().map_or(PAUSE, |w| w.every.min(PAUSE));
    let max_frames = frame_limit(&conn, wal_limit);
    let mut version = data_version(&conn);
    let mut last_checkpoint = Instant::now();
    let mut last_reset: Option<Instant> = None;
    let mut reset_every = RESET_EVERY;
    let slower = |every: Duration| (every * 2).min(RESET_EVERY_MAX);
    let mut last_watch = Instant::now();
    loop {
        match rx.recv_timeout(tick) {
            Ok(Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(w) = watch.as_ref().filter(|w| last_watch.elapsed() >= w.every) {
            last_watch = Instant::now();
            let now = data_version(&conn);
            if now != version {
                version = now;
                w.wake.notify_one();
            }
        }
        if target.memory || last_checkpoint.elapsed() < PAUSE {
            continue;
        }
        let fresh = committed.swap(false, Ordering::AcqRel);
        if !(fresh || behind) {
            continue;
        }
        last_checkpoint = Instant::now();
        let Some((frames, done)) = checkpoint(&conn, "PASSIVE") else {
            behind = true;
            continue;
        };
        // Look again next time while the WAL is long and not fully copied back, or past its
        // limit.
        let over = frames > max_frames;
        behind = over || (frames >= MIN_FRAMES && done < frames);
        match reset_asked.outcome() {
            Some(Some(held)) => reset_every = spacing(held),
            Some(None) => reset_every = slower(reset_every),
            None => {}
        }
        let due = last_reset.is_none_or(|t| t.elapsed() >= reset_every);
        if fresh && frames > max_frames / 2 && due {
            // The writer is busy: it starts the WAL over between two of its groups, from half
            // the limit, so the file stays near it.
            last_reset = Some(Instant::now());
            reset_asked.ask();
        } else if !fresh && over && due {
            // The writer is idle (a request it has not served is taken back): empty the file.
            last_reset = Some(Instant::now());
            reset_asked.withdraw();
            match reset(&conn, "TRUNCATE", busy) {
                Reset::Done(_) => {
                    behind = false;
                    reset_every = RESET_EVERY;
                }
                // The writer's own reset, asked just before it went idle, is still running.
                Reset::Contended => {}
                Reset::HeldByReader | Reset::Failed => reset_every = slower(reset_every),
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// How many frames the WAL holds, from a passive checkpoint's report.
    fn frames(conn: &Connection) -> i64 {
        checkpoint(conn, "PASSIVE")
            .map(|(frames, _)| frames)
            .unwrap()
    }

    // Without a reader: a reader that reads in a tight loop can keep a reset waiting past
    // its wait (it keeps taking the same stale read mark between the busy handler's sleeps),
    // which the checkpoint thread answers by asking later; `tests/integration/sqlite_wal.rs` covers the
    // WAL staying bounded with such a reader.
    #[test]
    fn a_reset_served_by_the_writer_starts_the_wal_over() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t (x BLOB NOT NULL);",
        )
        .unwrap();
        let write = |conn: &Connection| {
            conn.execute("INSERT INTO t (x) VALUES (zeroblob(4000))", [])
                .unwrap();
        };
        // Nothing checkpoints these 300 commits: the WAL holds a frame or more for each.
        for _ in 0..300 {
            write(&conn);
        }

        let reset = WalReset::new(Duration::from_millis(100));
        // Unasked, the writer does nothing between groups.
        reset.serve(&conn);
        assert_eq!(reset.outcome(), None);
        reset.ask();
        reset.ask(); // asked twice before it runs: still one request
        reset.serve(&conn);
        let held = reset
            .outcome()
            .expect("the writer reports how its reset went");
        assert!(held.is_some(), "the reset did not complete");
        assert_eq!(reset.outcome(), None, "an outcome is reported once");

        // The next write starts the WAL over: it holds only that commit's frames.
        write(&conn);
        let after = frames(&conn);
        assert!(
            (1..10).contains(&after),
            "after the reset and one more commit the WAL holds {after} frames"
        );
    }

    #[test]
    fn a_slow_reset_spaces_out_the_next() {
        assert_eq!(spacing(Duration::ZERO), RESET_EVERY);
        assert_eq!(spacing(Duration::from_millis(10)), RESET_EVERY);
        assert_eq!(
            spacing(Duration::from_millis(60)),
            Duration::from_millis(540)
        );
    }
}

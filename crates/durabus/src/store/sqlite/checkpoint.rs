//! WAL checkpoints on their own thread and connection. SQLite's automatic checkpoint runs inside
//! whichever commit crosses the threshold, and a checkpoint syncs the database file: that
//! commit (and every caller waiting on it) stalls. Here the writer only sets a flag after
//! commits (no wake-up per commit); this thread looks at it every 100 ms and runs `PASSIVE`
//! checkpoints, which never block the writer or readers.
//!
//! A passive checkpoint copies back only the frames no reader still needs, and the WAL starts
//! over only when a writer finds it fully copied back while no reader uses it. Under a steady
//! stream of reads that moment never comes and the file grows without end (2 GB after a
//! million events in the reliability suite). So once the WAL passes the store's `wal_limit`,
//! a `TRUNCATE` checkpoint runs: holding back new writes, it waits (up to 1 s) for the readers
//! still in the WAL to finish, copies the rest back and empties the file. While the writer is
//! busy, this thread could wait forever for the write lock between its back-to-back
//! transactions, so it asks the writer thread to run it between two groups (their callers are
//! answered first); when the writer is idle, this thread runs it itself. After a checkpoint
//! that a reader held up past the wait, the next request comes twice as late (up to 30 s), so
//! a reader that never lets go costs writes at most a thirtieth of their time.
//!
//! The same thread watches for commits made by other connections (an application writing
//! events in its own transactions, another process): `PRAGMA data_version` changes when another
//! connection has committed, and a change wakes the dispatcher. That read touches no table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Notify;

/// Fewest WAL frames worth a checkpoint.
const MIN_FRAMES: i64 = 1000;
/// How often the thread looks for new commits.
const PAUSE: Duration = Duration::from_millis(100);
/// Least time between two `TRUNCATE` checkpoints.
const TRUNCATE_EVERY: Duration = Duration::from_secs(1);
/// Most time between two `TRUNCATE` checkpoints while readers keep holding the WAL.
const TRUNCATE_EVERY_MAX: Duration = Duration::from_secs(30);
/// How long a `TRUNCATE` checkpoint waits for readers to leave the WAL (holding back writes).
const TRUNCATE_WAIT: Duration = Duration::from_secs(1);

/// A `TRUNCATE` checkpoint asked of the writer thread by the checkpoint thread, and how it went.
#[derive(Debug)]
pub(super) struct Truncation {
    state: AtomicU8,
    /// The connections' usual busy timeout, restored after the checkpoint's longer wait.
    busy: Duration,
}

impl Truncation {
    const IDLE: u8 = 0;
    const ASKED: u8 = 1;
    const DONE: u8 = 2;
    const FAILED: u8 = 3;

    pub(super) fn new(busy: Duration) -> Truncation {
        Truncation {
            state: AtomicU8::new(Self::IDLE),
            busy,
        }
    }

    /// The writer, between two groups: runs the checkpoint on its connection if it was asked.
    pub(super) fn serve(&self, conn: &Connection) {
        let asked = self.state.compare_exchange(
            Self::ASKED,
            Self::IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if asked.is_ok() {
            let done = truncate(conn, self.busy).is_some();
            let state = if done { Self::DONE } else { Self::FAILED };
            self.state.store(state, Ordering::Release);
        }
    }

    fn ask(&self) {
        self.state.store(Self::ASKED, Ordering::Release);
    }

    fn withdraw(&self) {
        let _ = self.state.compare_exchange(
            Self::ASKED,
            Self::IDLE,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// How the last checkpoint the writer ran went, once: `Some(true)` if it emptied the WAL.
    fn outcome(&self) -> Option<bool> {
        for (state, done) in [(Self::DONE, true), (Self::FAILED, false)] {
            let took =
                self.state
                    .compare_exchange(state, Self::IDLE, Ordering::AcqRel, Ordering::Acquire);
            if took.is_ok() {
                return Some(done);
            }
        }
        None
    }
}

/// A `TRUNCATE` checkpoint on `conn`, waiting up to [`TRUNCATE_WAIT`] for readers; the busy
/// timeout is `busy` again afterwards. `None` if a reader held the WAL past the wait.
fn truncate(conn: &Connection, busy: Duration) -> Option<(i64, i64)> {
    let started = Instant::now();
    let _ = conn.busy_timeout(TRUNCATE_WAIT);
    let result = checkpoint(conn, "TRUNCATE");
    let _ = conn.busy_timeout(busy);
    if result.is_some() {
        tracing::debug!(took = ?started.elapsed(), "the WAL passed its limit and was emptied");
    } else {
        tracing::warn!(
            waited = ?started.elapsed(),
            "the WAL is past its limit and a reader kept it in use: a long query or an open read \
             transaction on this database keeps the WAL file growing until it ends"
        );
    }
    result
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
    let sql = format!("PRAGMA wal_checkpoint({mode})");
    match conn.query_row(&sql, [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    }) {
        Ok((0, frames, done)) => Some((frames, done)),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!(error = %e, mode, "checkpoint did not run");
            None
        }
    }
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
    truncation: Arc<Truncation>,
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
    let mut last_truncate: Option<Instant> = None;
    let mut truncate_every = TRUNCATE_EVERY;
    let slower = |every: Duration| (every * 2).min(TRUNCATE_EVERY_MAX);
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
        match truncation.outcome() {
            Some(true) => truncate_every = TRUNCATE_EVERY,
            Some(false) => truncate_every = slower(truncate_every),
            None => {}
        }
        if over && last_truncate.is_none_or(|t| t.elapsed() >= truncate_every) {
            last_truncate = Some(Instant::now());
            if fresh {
                // The writer is busy: it truncates between two of its groups.
                truncation.ask();
            } else {
                // The writer is idle (a request it has not served is taken back).
                truncation.withdraw();
                if truncate(&conn, busy).is_some() {
                    behind = false;
                    truncate_every = TRUNCATE_EVERY;
                } else {
                    truncate_every = slower(truncate_every);
                }
            }
        }
    }
}

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
//! still in the WAL to finish; the next write then starts the WAL over from its beginning,
//! written over in place, so the file stays within the limit (SQLite's `journal_size_limit`
//! cuts a longer one back when it starts over). That holds writes back 40-80 ms (mostly a
//! sync of the database file), where emptying the file (`TRUNCATE`) took 150-190 ms, also
//! giving the file system back tens of megabytes it would allocate again at once. When the
//! writer is idle and the WAL is past the limit, this thread runs a `TRUNCATE` checkpoint
//! itself and empties the file. After a checkpoint that a reader held up past the wait, the
//! next request comes twice as late (up to 30 s), so a reader that never lets go costs
//! writes at most a thirtieth of their time.
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
/// Least time between two checkpoints that start the WAL over.
const RESET_EVERY: Duration = Duration::from_millis(200);
/// Most time between two such checkpoints while readers keep holding the WAL.
const RESET_EVERY_MAX: Duration = Duration::from_secs(30);
/// How long a `RESTART` or `TRUNCATE` checkpoint waits for readers to leave the WAL (holding
/// back writes).
const RESET_WAIT: Duration = Duration::from_secs(1);

/// A `RESTART` checkpoint asked of the writer thread by the checkpoint thread, and how it went.
#[derive(Debug)]
pub(super) struct WalReset {
    state: AtomicU8,
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
            let done = reset(conn, "RESTART", self.busy).is_some();
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

    /// How the last checkpoint the writer ran went, once: `Some(true)` if the WAL starts over.
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

/// A checkpoint in `mode` (`RESTART`: the next write starts the WAL over; `TRUNCATE`: the
/// file is emptied too) on `conn`, waiting up to [`RESET_WAIT`] for readers; the busy timeout
/// is `busy` again afterwards. `None` if a reader held the WAL past the wait.
fn reset(conn: &Connection, mode: &str, busy: Duration) -> Option<(i64, i64)> {
    let started = Instant::now();
    let _ = conn.busy_timeout(RESET_WAIT);
    let result = checkpoint(conn, mode);
    let _ = conn.busy_timeout(busy);
    if result.is_some() {
        tracing::debug!(took = ?started.elapsed(), mode, "the WAL was copied back to start over");
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
            Some(true) => reset_every = RESET_EVERY,
            Some(false) => reset_every = slower(reset_every),
            None => {}
        }
        let due = last_reset.is_none_or(|t| t.elapsed() >= reset_every);
        if fresh && frames > max_frames / 2 && due {
            // The writer is busy: it starts the WAL over between two of its groups, from half
            // the limit, so the file stays within it.
            last_reset = Some(Instant::now());
            reset_asked.ask();
        } else if !fresh && over && due {
            // The writer is idle (a request it has not served is taken back): empty the file.
            last_reset = Some(Instant::now());
            reset_asked.withdraw();
            if reset(&conn, "TRUNCATE", busy).is_some() {
                behind = false;
                reset_every = RESET_EVERY;
            } else {
                reset_every = slower(reset_every);
            }
        }
    }
}

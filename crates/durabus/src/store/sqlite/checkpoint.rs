//! WAL checkpoints on their own thread and connection. SQLite's automatic checkpoint runs inside
//! whichever commit crosses the threshold, and a checkpoint syncs the database file: that
//! commit (and every caller waiting on it) stalls. Here the writer only sets a flag after
//! commits (no wake-up per commit); this thread looks at it every 100 ms and runs `PASSIVE`
//! checkpoints, which never block the writer or readers.
//!
//! The same thread watches for commits made by other connections (an application writing
//! events in its own transactions, another process): `PRAGMA data_version` changes when another
//! connection has committed, and a change wakes the dispatcher. That read touches no table.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Notify;

/// Fewest WAL frames worth a checkpoint.
const MIN_FRAMES: i64 = 1000;
/// How often the thread looks for new commits.
const PAUSE: Duration = Duration::from_millis(100);

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

pub(super) fn run(
    target: super::Target,
    busy: Duration,
    committed: Arc<AtomicBool>,
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
    let mut version = data_version(&conn);
    let mut last_checkpoint = Instant::now();
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
        if target.memory
            || last_checkpoint.elapsed() < PAUSE
            || !(committed.swap(false, Ordering::AcqRel) || behind)
        {
            continue;
        }
        last_checkpoint = Instant::now();
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        }) {
            // Look again next time while the WAL is long and not fully copied back.
            Ok((frames, done)) => behind = frames >= MIN_FRAMES && done < frames,
            Err(e) => tracing::debug!(error = %e, "passive checkpoint did not run"),
        }
    }
}

//! WAL checkpoints on their own thread and connection. SQLite's automatic checkpoint runs inside
//! whichever commit crosses the threshold, and a checkpoint syncs the database file: that
//! commit (and every caller waiting on it) stalls. Here the writer only signals after commits;
//! this thread runs `PASSIVE` checkpoints, which never block the writer or readers.

use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

/// Fewest WAL frames worth a checkpoint.
const MIN_FRAMES: i64 = 1000;
/// At most one checkpoint per this long while commits keep coming.
const PAUSE: Duration = Duration::from_millis(100);

/// What the writer tells the checkpointer.
pub(super) enum Signal {
    Committed,
    Stop,
}

pub(super) fn run(path: PathBuf, busy: Duration, rx: Receiver<Signal>) {
    let conn = match Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    ) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot open the checkpoint connection; the WAL grows until the store closes");
            return;
        }
    };
    let _ = conn.busy_timeout(busy);
    let mut dirty = false;
    let mut last = Instant::now();
    loop {
        match rx.recv_timeout(PAUSE) {
            Ok(Signal::Committed) => dirty = true,
            Ok(Signal::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if dirty && last.elapsed() >= PAUSE {
            last = Instant::now();
            match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            }) {
                Ok((frames, done)) => {
                    // Keep checking while the WAL is long or not fully copied back.
                    dirty = frames >= MIN_FRAMES && done < frames;
                }
                Err(e) => tracing::debug!(error = %e, "passive checkpoint did not run"),
            }
        }
    }
}

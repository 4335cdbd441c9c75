//! When a pooled connection is pinged before it is handed out.
//!
//! sqlx pings every connection it hands out by default: a round trip before each statement,
//! which costs one caller awaiting each publish about a fifth of its rate. The pool that
//! [`PgStore::connect`](super::PgStore::connect) opens pings only a connection that may have
//! broken while it sat in the pool (a pool passed to `from_pool` keeps its own settings):
//! - one idle for [`PING_IDLE`] or longer (as connection pools commonly do: HikariCP's
//!   alive-bypass window), and
//! - every one that went idle before a connection of this process last broke: a statement
//!   or ping failed with an I/O error or with the server's "connection ended" codes, or the
//!   `LISTEN` connection dropped. A database restart or a network cut breaks all of them at
//!   once, so after the first failure every idle connection is checked and replaced if dead.
//!   Callers that use idle connections at the same moment, before any failure is seen, may
//!   each fail one statement.
//!
//! A connection that broke while in use is closed when it comes back (sqlx tests it on
//! release), so the pool never keeps one known to be dead.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A pooled connection used within this long is handed out without a ping first.
pub(crate) const PING_IDLE: Duration = Duration::from_millis(500);

/// How much earlier than computed a connection may have gone idle (clock reads, rounding).
const MARGIN_US: u64 = 1_000;

/// When a connection last broke, in µs since [`base`] (0: never).
static LOST_AT_US: AtomicU64 = AtomicU64::new(0);

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn now_us() -> u64 {
    u64::try_from(base().elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Records that a connection broke: every connection idle since before now is pinged before
/// its next use.
pub(crate) fn connection_lost() {
    LOST_AT_US.fetch_max(now_us().max(1), Ordering::Relaxed);
}

/// Whether a server error code says the connection ended: connection exceptions (class 08),
/// and the server shutting down (57P01), crashing (57P02), not accepting connections yet
/// (57P03) or ending an idle session (57P05).
pub(crate) fn connection_ended(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "57P05")
}

/// Whether the driver's `err` says its connection broke.
fn broke(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(e) => e.code().is_some_and(|c| connection_ended(&c)),
        _ => false,
    }
}

/// Records a lost connection if `err` says one broke.
pub(crate) fn note(err: &sqlx::Error) {
    if broke(err) {
        connection_lost();
    }
}

/// Whether `err` (what a store call returned) or one of its sources is a driver error that
/// says a connection broke.
fn broken(err: &crate::error::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = next {
        if let Some(driver) = e.downcast_ref::<sqlx::Error>() {
            return broke(driver);
        }
        next = e.source();
    }
    false
}

/// Records a lost connection if a store call's `err` says one broke.
pub(crate) fn note_error(err: &crate::error::Error) {
    if broken(err) {
        connection_lost();
    }
}

/// Whether a connection idle for `idle_for` must be pinged before it is handed out.
pub(crate) fn must_ping(idle_for: Duration) -> bool {
    suspect(idle_for, LOST_AT_US.load(Ordering::Relaxed), now_us())
}

/// [`must_ping`] with the last loss and the present (µs since [`base`]) given.
fn suspect(idle_for: Duration, lost_at_us: u64, now_us: u64) -> bool {
    if idle_for >= PING_IDLE {
        return true;
    }
    let idle_since = now_us.saturating_sub(u64::try_from(idle_for.as_micros()).unwrap_or(u64::MAX));
    // sqlx read the clock for `idle_for` a moment before this: a margin keeps a loss in
    // between on the side of pinging.
    lost_at_us != 0 && lost_at_us.saturating_add(MARGIN_US) >= idle_since
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;

    #[test]
    fn a_connection_idle_long_is_pinged_whatever_happened() {
        assert!(suspect(PING_IDLE, 0, 10_000 * MS));
        assert!(suspect(Duration::from_secs(60), 0, 10_000 * MS));
    }

    #[test]
    fn a_connection_used_a_moment_ago_is_not_pinged_while_nothing_broke() {
        assert!(!suspect(Duration::from_millis(1), 0, 10_000 * MS));
        assert!(!suspect(Duration::from_millis(499), 0, 10_000 * MS));
    }

    #[test]
    fn a_connection_idle_when_another_broke_is_pinged_one_released_after_is_not() {
        // Lost at 9,990 ms; now 10,000 ms.
        let lost = 9_990 * MS;
        // Idle since 9,980 ms: it sat in the pool when the other one broke.
        assert!(suspect(Duration::from_millis(20), lost, 10_000 * MS));
        // Idle since 9,995 ms: released after the loss (and tested on release), so alive.
        assert!(!suspect(Duration::from_millis(5), lost, 10_000 * MS));
        // Idle since 9,990.5 ms, within the margin of the loss: pinged, to be safe.
        assert!(suspect(Duration::from_micros(9_500), lost, 10_000 * MS));
    }

    #[test]
    fn a_recorded_loss_makes_a_connection_idle_since_before_it_suspect() {
        connection_lost();
        let lost = LOST_AT_US.load(Ordering::Relaxed);
        assert!(lost > 0);
        assert!(suspect(Duration::from_millis(1), lost, lost));
    }

    #[test]
    fn a_store_error_says_whether_its_connection_broke_however_it_was_passed_on() {
        use crate::error::{Error, ErrorKind};
        let io = || sqlx::Error::Io(std::io::Error::other("connection reset"));
        let converted = Error::from(io());
        assert_eq!(converted.kind(), ErrorKind::Unavailable);
        assert!(broken(&converted));
        // One failure answering many callers (a group commit) keeps it as a source.
        let shared = Error::duplicate(&std::sync::Arc::new(Error::from(io())));
        assert!(broken(&shared));
        assert!(!broken(&Error::from(sqlx::Error::PoolTimedOut)));
        assert!(!broken(&Error::from(sqlx::Error::RowNotFound)));
        assert!(!broken(&Error::StoreClosed));
    }

    #[test]
    fn the_server_codes_that_end_a_connection_count_as_lost_ones() {
        for code in ["08006", "08003", "57P01", "57P02", "57P03", "57P05"] {
            assert!(connection_ended(code), "{code}");
        }
        for code in ["23505", "40001", "57014", "53100"] {
            assert!(!connection_ended(code), "{code}");
        }
    }
}

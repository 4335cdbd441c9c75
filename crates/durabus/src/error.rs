//! The library's error type.

use std::time::Duration;

/// Everything that can go wrong in durabus. Each variant says what happened and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The payload could not be serialised to JSON.
    #[error("invalid payload: {0}; pass a value that serialises to JSON (maps need string keys)")]
    InvalidPayload(String),

    /// The serialised payload is larger than the configured limit.
    #[error(
        "payload is {size} bytes, over the limit of {limit} bytes; send a smaller payload or raise `max_payload_bytes`"
    )]
    PayloadTooLarge {
        /// Size of the serialised payload in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },

    /// The event type is empty or malformed.
    #[error(
        "invalid event type {0:?}: {1}; use dot-separated segments of letters, digits, '_', '-', ':' or '/' such as \"order.shipped\""
    )]
    InvalidEventType(String, &'static str),

    /// A subscription pattern is empty or malformed.
    #[error(
        "invalid pattern {0:?}: {1}; use an event type where '*' stands for any run of characters, such as \"order.*\""
    )]
    InvalidPattern(String, &'static str),

    /// A configuration value is out of range.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),

    /// The bus has been shut down: it accepts no new publishes or subscriptions.
    #[error("the event bus has been shut down; create a new bus to publish or subscribe")]
    Shutdown,

    /// No event with this id exists (in the state the operation needs).
    #[error("event {0} not found{1}")]
    EventNotFound(String, &'static str),

    /// No subscription with this id exists.
    #[error("subscription {0} not found; it may already have been removed")]
    SubscriptionNotFound(String),

    /// An id could not be parsed.
    #[error("invalid id {0:?}: expected a UUID such as 0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70")]
    InvalidId(String),

    /// The database file does not exist and the store was opened without creating it.
    #[error("database {0} does not exist; check the path or run a command that creates it")]
    DatabaseMissing(String),

    /// The file exists but is not a database this store can use.
    #[error("{path} is not a durabus database: {reason}")]
    NotADatabase {
        /// The path that was opened.
        path: String,
        /// What the database engine said.
        reason: String,
    },

    /// The database stayed locked by another process for longer than the configured limit.
    #[error(
        "database stayed locked for {0:?}; another process holds a long write transaction, or raise `lock_timeout`"
    )]
    Locked(Duration),

    /// The database was written by a newer version of durabus.
    #[error(
        "database schema version {found} is newer than this build supports ({supported}); upgrade durabus"
    )]
    SchemaTooNew {
        /// Version found in the database.
        found: i64,
        /// Highest version this build knows.
        supported: i64,
    },

    /// The database could not be reached in time (PostgreSQL down, network gone).
    #[error("the database is unavailable: {0}; check that it is running and reachable, then retry")]
    Unavailable(String),

    /// The event is not held by this worker: it was already finalized, or its lease expired
    /// and another worker took it over (fencing).
    #[error(
        "event {0} is not held by this worker: it was already finalized, or it was recovered or taken over by another worker (a restart, or an expired lease on PostgreSQL)"
    )]
    NotHeld(String),

    /// The store has been closed.
    #[error("the store is closed")]
    StoreClosed,

    /// A database operation failed.
    #[error("database error: {0}")]
    Database(String),

    /// Reading or writing a file failed.
    #[error("I/O error on {path}: {source}")]
    Io {
        /// The path involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Result with durabus's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Self {
        Error::Database(err.to_string())
    }
}

#[cfg(feature = "postgres")]
impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::PoolTimedOut => {
                Error::Unavailable("no connection became available in time".into())
            }
            sqlx::Error::PoolClosed => Error::StoreClosed,
            sqlx::Error::Io(e) => Error::Unavailable(e.to_string()),
            sqlx::Error::Database(e)
                if e.code()
                    .is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "57P03") =>
            {
                Error::Unavailable(e.to_string())
            }
            other => Error::Database(other.to_string()),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Database(format!("stored JSON is corrupt: {err}"))
    }
}

//! The library's error type: a variant per situation, each with what happened and what to do,
//! and an [`ErrorKind`] to branch on. Database errors keep their source.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

/// Any error a lower layer produced, kept as the source of ours.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What kind of failure an [`Error`] is: branch on this, never on message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller's input is wrong (a payload, type, pattern, id, filter or setting). Nothing
    /// was changed; fix the input.
    InvalidInput,
    /// What the call names does not exist.
    NotFound,
    /// The call conflicts with the current state (an event no longer held by this worker, a
    /// dead letter whose status does not allow the action). Read the state and decide again.
    Conflict,
    /// Another process held a database lock for too long.
    Locked,
    /// The database could not be reached. Retry later.
    Unavailable,
    /// Stored data (or the file) is not what durabus wrote.
    Corrupt,
    /// The database or the request needs something this build does not have (a newer schema,
    /// a store that is not compiled in).
    Unsupported,
    /// The bus has been shut down or the store closed.
    Closed,
    /// Reading or writing a file failed (disk full, permissions).
    Io,
    /// Anything else: a database error of no known kind, a task that panicked.
    Internal,
    /// A subscriber's handler failed (an error, a timeout or a panic): only the error hook
    /// sees these, when it asks to ([`BusBuilder::report_handler_failures`](crate::BusBuilder::report_handler_failures)).
    Handler,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::InvalidInput => "invalid input",
            ErrorKind::NotFound => "not found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Locked => "locked",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Closed => "closed",
            ErrorKind::Io => "I/O",
            ErrorKind::Internal => "internal",
            ErrorKind::Handler => "handler",
        })
    }
}

/// Everything that can go wrong in durabus. Each variant says what happened and what to do;
/// [`Error::kind`] says which kind of failure it is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The payload (or metadata) could not be serialised to, or parsed as, JSON.
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

    /// The event type is empty, malformed, or reserved for the bus (`system.*`).
    #[error(
        "invalid event type {0:?}: {1}; use dot-separated segments of letters, digits, '_', '-', ':' or '/' such as \"order.shipped\""
    )]
    InvalidEventType(String, &'static str),

    /// A subscription pattern is empty or malformed.
    #[error(
        "invalid pattern {0:?}: {1}; use an event type where '*' stands for any run of characters, such as \"order.*\""
    )]
    InvalidPattern(String, &'static str),

    /// A setting or a request parameter is refused: [`Invalid`] names the field, what is
    /// wrong with the value given and what is accepted.
    #[error("{}: {}; accepted: {}", .0.field, .0.problem, .0.accepted)]
    Invalid(Box<Invalid>),

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
        /// What is wrong with it.
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
    #[error(
        "the database is unavailable: {source}; check that it is running and reachable, then retry"
    )]
    Unavailable {
        /// What the driver said.
        #[source]
        source: BoxError,
    },

    /// The event is not held by this worker: it was already finalized, or its lease expired
    /// and another worker took it over (fencing).
    #[error(
        "event {0} is not held by this worker: it was already finalized, or it was recovered or taken over by another worker (a restart, or an expired lease on PostgreSQL)"
    )]
    NotHeld(String),

    /// The store has been closed.
    #[error("the store is closed")]
    StoreClosed,

    /// The action conflicts with the current state of what it names (a dead letter that is
    /// already resolved, one being retried, an operation that has finished).
    #[error("{message}")]
    Conflict {
        /// What the action named.
        what: String,
        /// Its current status.
        status: String,
        /// What is wrong and what to do.
        message: String,
    },

    /// A resource other than an event or a subscription does not exist (a dead letter, an
    /// operation, a job).
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },

    /// Stored data could not be read back: it is not what durabus wrote.
    #[error("stored data is corrupt: {what}: {source}")]
    Corrupt {
        /// What was being read.
        what: String,
        /// Why it could not be read.
        #[source]
        source: BoxError,
    },

    /// A database operation failed.
    #[error("{context}: {source}")]
    Database {
        /// What kind of failure the database reported.
        kind: ErrorKind,
        /// What durabus was doing.
        context: String,
        /// The driver's error.
        #[source]
        source: BoxError,
    },

    /// Something inside durabus failed that should not (a task panicked, a thread could not
    /// start).
    #[error("internal error: {0}")]
    Internal(String),

    /// A subscriber's handler failed a delivery attempt (what the error hook hears when it
    /// asks for handler failures; a caller never gets it).
    #[error("handler {subscription} failed: {message}")]
    HandlerFailed {
        /// The subscription whose handler failed.
        subscription: String,
        /// Its error (an error, `timed out after …` or `handler panicked: …`).
        message: String,
    },

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

/// A value refused by validation (carried by [`Error::Invalid`]; [`Error::invalid_value`] gives
/// one for every input error): the admin API sends it as the error's `details`, the CLI prints
/// it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Invalid {
    /// The setting, field or parameter, by its name in the library and the API (`note`,
    /// `limit`, `max_delay`, `filter.from`).
    pub field: String,
    /// What is wrong with the value given (quoting it when it helps).
    pub problem: String,
    /// What would be accepted: a range, a form, a list of values.
    pub accepted: String,
}

/// Result with durabus's [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::InvalidPayload(_)
            | Error::PayloadTooLarge { .. }
            | Error::InvalidEventType(..)
            | Error::InvalidPattern(..)
            | Error::Invalid(_)
            | Error::InvalidId(_) => ErrorKind::InvalidInput,
            Error::EventNotFound(..)
            | Error::SubscriptionNotFound(_)
            | Error::DatabaseMissing(_)
            | Error::NotFound { .. } => ErrorKind::NotFound,
            Error::NotHeld(_) | Error::Conflict { .. } => ErrorKind::Conflict,
            Error::Locked(_) => ErrorKind::Locked,
            Error::Unavailable { .. } => ErrorKind::Unavailable,
            Error::NotADatabase { .. } | Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::SchemaTooNew { .. } => ErrorKind::Unsupported,
            Error::Shutdown | Error::StoreClosed => ErrorKind::Closed,
            Error::Database { kind, .. } => *kind,
            Error::Internal(_) => ErrorKind::Internal,
            Error::HandlerFailed { .. } => ErrorKind::Handler,
            Error::Io { .. } => ErrorKind::Io,
        }
    }

    /// A refused value: `field` (its name in the library and the API), what is wrong with the
    /// value given, what is accepted.
    pub fn invalid(
        field: impl Into<String>,
        problem: impl Into<String>,
        accepted: impl Into<String>,
    ) -> Error {
        Error::Invalid(Box::new(Invalid {
            field: field.into(),
            problem: problem.into(),
            accepted: accepted.into(),
        }))
    }

    /// The refused value of an input error (every [`ErrorKind::InvalidInput`]), with its field,
    /// problem and accepted range; `None` for other errors.
    pub fn invalid_value(&self) -> Option<Invalid> {
        let value = |field: &str, problem: String, accepted: &str| Invalid {
            field: field.to_owned(),
            problem,
            accepted: accepted.to_owned(),
        };
        Some(match self {
            Error::Invalid(i) => (**i).clone(),
            Error::InvalidPayload(why) => value(
                "payload",
                why.clone(),
                "a value that serialises to JSON (maps need string keys)",
            ),
            Error::PayloadTooLarge { size, limit } => Invalid {
                field: "payload".to_owned(),
                problem: format!("{size} bytes"),
                accepted: format!("at most {limit} bytes (max_payload_bytes)"),
            },
            Error::InvalidEventType(t, why) => value(
                "event_type",
                format!("{t:?}: {why}"),
                "dot-separated segments of letters, digits, '_', '-', ':' or '/', such as \"order.shipped\"; not system.*",
            ),
            Error::InvalidPattern(p, why) => value(
                "pattern",
                format!("{p:?}: {why}"),
                "an event type where '*' stands for any run of characters, such as \"order.*\"",
            ),
            Error::InvalidId(id) => value(
                "id",
                format!("{id:?} is not a UUID"),
                "a UUID such as 0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70",
            ),
            _ => return None,
        })
    }

    /// A database error of `kind` while doing `context`.
    pub(crate) fn database(
        kind: ErrorKind,
        context: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Error {
        Error::Database {
            kind,
            context: context.into(),
            source: source.into(),
        }
    }

    /// Stored data that does not decode.
    pub(crate) fn corrupt(what: impl Into<String>, source: impl Into<BoxError>) -> Error {
        Error::Corrupt {
            what: what.into(),
            source: source.into(),
        }
    }

    /// A value that did not serialise to JSON: the caller's input is wrong.
    pub(crate) fn unserialisable(what: &str, e: &serde_json::Error) -> Error {
        Error::InvalidPayload(format!("{what}: {e}"))
    }

    /// The same error for another caller, when one failure answers many requests (a group
    /// commit that could not commit). Plain variants are copied; the others share the original
    /// as their source.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn duplicate(shared: &Arc<Error>) -> Error {
        match shared.as_ref() {
            Error::Locked(d) => Error::Locked(*d),
            Error::StoreClosed => Error::StoreClosed,
            Error::Shutdown => Error::Shutdown,
            other => Error::Database {
                kind: other.kind(),
                context: "the group transaction failed".into(),
                source: Box::new(Shared(shared.clone())),
            },
        }
    }

    /// Adds what durabus was doing to a database error; other errors pass unchanged.
    #[must_use]
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) fn context(self, what: impl Into<String>) -> Error {
        match self {
            Error::Database { kind, source, .. } => Error::Database {
                kind,
                context: what.into(),
                source,
            },
            other => other,
        }
    }
}

/// An error shared by several callers.
#[derive(Debug)]
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
struct Shared(Arc<Error>);

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Shared {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_has_the_kind_callers_branch_on() {
        let cases: Vec<(Error, ErrorKind)> = vec![
            (Error::InvalidPayload("x".into()), ErrorKind::InvalidInput),
            (Error::InvalidId("x".into()), ErrorKind::InvalidInput),
            (Error::EventNotFound("x".into(), ""), ErrorKind::NotFound),
            (Error::NotHeld("x".into()), ErrorKind::Conflict),
            (Error::Locked(Duration::from_secs(1)), ErrorKind::Locked),
            (
                Error::Unavailable {
                    source: "down".into(),
                },
                ErrorKind::Unavailable,
            ),
            (
                Error::corrupt("x", "not json".to_owned()),
                ErrorKind::Corrupt,
            ),
            (
                Error::SchemaTooNew {
                    found: 9,
                    supported: 1,
                },
                ErrorKind::Unsupported,
            ),
            (Error::Shutdown, ErrorKind::Closed),
            (Error::StoreClosed, ErrorKind::Closed),
            (Error::Internal("x".into()), ErrorKind::Internal),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }

    #[test]
    fn a_serialisation_failure_is_invalid_input_not_corruption() {
        let mut map = std::collections::HashMap::new();
        map.insert(vec![1u8], 1);
        let Err(e) = serde_json::to_string(&map) else {
            panic!("a map with non-string keys serialised");
        };
        assert_eq!(
            Error::unserialisable("metadata", &e).kind(),
            ErrorKind::InvalidInput
        );
    }

    #[test]
    fn database_errors_keep_their_source() {
        let e = Error::database(ErrorKind::Internal, "doing x", "driver said y".to_owned());
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("driver said y"));
        assert_eq!(e.to_string(), "doing x: driver said y");
    }

    #[test]
    fn a_duplicated_error_keeps_kind_and_source() {
        let shared = Arc::new(Error::database(
            ErrorKind::Io,
            "commit",
            "disk full".to_owned(),
        ));
        let copy = Error::duplicate(&shared);
        assert_eq!(copy.kind(), ErrorKind::Io);
        assert!(copy.to_string().contains("disk full"), "{copy}");
        let locked = Error::duplicate(&Arc::new(Error::Locked(Duration::from_secs(3))));
        assert!(matches!(locked, Error::Locked(d) if d == Duration::from_secs(3)));
    }
}

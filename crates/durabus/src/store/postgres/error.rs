//! PostgreSQL's errors (SQLSTATEs and the driver's own), as the kinds of [`Error`] callers
//! branch on. Converting has no side effect: the store records a lost connection where a call
//! ends ([`PgStore::noted`](super::PgStore)), not here.

use crate::error::{Error, ErrorKind};

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::PoolTimedOut => Error::Unavailable {
                source: "no connection became available in time".into(),
            },
            sqlx::Error::PoolClosed => Error::StoreClosed,
            // The driver's error is kept whole as the source: the store finds a lost
            // connection in it (see `liveness::noted`).
            e @ sqlx::Error::Io(_) => Error::Unavailable {
                source: Box::new(e),
            },
            sqlx::Error::Database(e) => {
                let code = e.code().map(|c| c.into_owned()).unwrap_or_default();
                let kind = match code.as_str() {
                    c if super::liveness::connection_ended(c) => {
                        return Error::Unavailable {
                            source: Box::new(sqlx::Error::Database(e)),
                        };
                    }
                    "23505" | "40001" | "40P01" => ErrorKind::Conflict,
                    c if c.starts_with("22") || c.starts_with("23") => ErrorKind::InvalidInput,
                    "53100" => {
                        return Error::database(
                            ErrorKind::Io,
                            "PostgreSQL is out of disk space (nothing of this call was stored; \
                             free space on the database server's volume and durabus goes on \
                             by itself)",
                            e,
                        );
                    }
                    "55P03" => ErrorKind::Locked,
                    _ => ErrorKind::Internal,
                };
                Error::database(kind, "PostgreSQL error", e)
            }
            e @ (sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_)) => {
                Error::corrupt("a PostgreSQL column", e)
            }
            sqlx::Error::RowNotFound => Error::database(ErrorKind::NotFound, "PostgreSQL", err),
            other => Error::database(ErrorKind::Internal, "PostgreSQL error", other),
        }
    }
}

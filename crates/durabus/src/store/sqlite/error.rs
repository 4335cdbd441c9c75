//! SQLite's result codes, as the kinds of [`Error`] callers branch on. Converting has no side
//! effect.

use crate::error::{Error, ErrorKind};

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        let kind = match &err {
            rusqlite::Error::SqliteFailure(e, _) => match e.code {
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => ErrorKind::Locked,
                ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt => ErrorKind::Corrupt,
                ErrorCode::ConstraintViolation => match e.extended_code {
                    // SQLITE_CONSTRAINT_PRIMARYKEY, SQLITE_CONSTRAINT_UNIQUE
                    1555 | 2067 => ErrorKind::Conflict,
                    _ => ErrorKind::InvalidInput,
                },
                ErrorCode::DiskFull
                | ErrorCode::SystemIoFailure
                | ErrorCode::ReadOnly
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied => ErrorKind::Io,
                ErrorCode::TooBig => ErrorKind::InvalidInput,
                _ => ErrorKind::Internal,
            },
            rusqlite::Error::QueryReturnedNoRows => ErrorKind::NotFound,
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::Utf8Error(..) => ErrorKind::Corrupt,
            _ => ErrorKind::Internal,
        };
        Error::database(kind, "SQLite error", err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_codes_map_to_kinds() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert_eq!(Error::from(busy).kind(), ErrorKind::Locked);
        let notadb = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
            None,
        );
        assert_eq!(Error::from(notadb).kind(), ErrorKind::Corrupt);
        let unique = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE),
            None,
        );
        assert_eq!(Error::from(unique).kind(), ErrorKind::Conflict);
        let check = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_CHECK),
            None,
        );
        assert_eq!(Error::from(check).kind(), ErrorKind::InvalidInput);
        let full = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_FULL),
            None,
        );
        assert_eq!(Error::from(full).kind(), ErrorKind::Io);
    }
}

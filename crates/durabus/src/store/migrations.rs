//! The schema history of each store: versioned SQL files under `migrations/<store>/`, embedded
//! in the binary. Version `N` is the `N`th file; a store records the highest version applied in
//! its meta table and applies the files after it, in order, inside one transaction.

use crate::error::{Error, Result};

/// One schema change.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    /// Its version: 1, 2, 3, … without gaps.
    pub version: i64,
    /// A short name (the file name without number and extension).
    pub name: &'static str,
    /// The SQL, with the store's placeholder for table names (`{p}` SQLite, `{s}` PostgreSQL).
    pub sql: &'static str,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
macro_rules! migration {
    ($version:literal, $store:literal, $file:literal, $name:literal) => {
        Migration {
            version: $version,
            name: $name,
            sql: include_str!(concat!("../../migrations/", $store, "/", $file)),
        }
    };
}

/// The SQLite store's migrations, in order.
#[cfg(feature = "sqlite")]
pub(crate) const SQLITE: &[Migration] = &[
    migration!(1, "sqlite", "0001_events.sql", "events"),
    migration!(2, "sqlite", "0002_dead_letters.sql", "dead_letters"),
    migration!(3, "sqlite", "0003_payloads.sql", "payloads"),
    migration!(4, "sqlite", "0004_replay.sql", "replay"),
    migration!(5, "sqlite", "0005_shared_snapshots.sql", "shared_snapshots"),
    migration!(6, "sqlite", "0006_group_trends.sql", "group_trends"),
    migration!(7, "sqlite", "0007_publish_options.sql", "publish_options"),
    migration!(8, "sqlite", "0008_dedup.sql", "dedup"),
    migration!(9, "sqlite", "0009_periodic.sql", "periodic"),
    migration!(10, "sqlite", "0010_ordering_keys.sql", "ordering_keys"),
    migration!(
        11,
        "sqlite",
        "0011_dead_letter_types.sql",
        "dead_letter_types"
    ),
    migration!(12, "sqlite", "0012_pauses.sql", "pauses"),
    migration!(13, "sqlite", "0013_breakers.sql", "breakers"),
    migration!(14, "sqlite", "0014_rate_limits.sql", "rate_limits"),
    migration!(
        15,
        "sqlite",
        "0015_concurrency_limits.sql",
        "concurrency_limits"
    ),
    migration!(
        16,
        "sqlite",
        "0016_partition_limits.sql",
        "partition_limits"
    ),
    migration!(
        17,
        "sqlite",
        "0017_key_queue_in_events.sql",
        "key_queue_in_events"
    ),
    migration!(18, "sqlite", "0018_key_links.sql", "key_links"),
    migration!(19, "sqlite", "0019_key_queued.sql", "key_queued"),
];

/// The PostgreSQL store's migrations, in order.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES: &[Migration] = &[
    migration!(1, "postgres", "0001_events.sql", "events"),
    migration!(2, "postgres", "0002_dead_letters.sql", "dead_letters"),
    migration!(3, "postgres", "0003_payloads.sql", "payloads"),
    migration!(4, "postgres", "0004_replay.sql", "replay"),
    migration!(5, "postgres", "0005_group_trends.sql", "group_trends"),
    migration!(6, "postgres", "0006_publish_options.sql", "publish_options"),
    migration!(7, "postgres", "0007_dedup.sql", "dedup"),
    migration!(8, "postgres", "0008_periodic.sql", "periodic"),
    migration!(9, "postgres", "0009_ordering_keys.sql", "ordering_keys"),
    migration!(
        10,
        "postgres",
        "0010_dead_letter_types.sql",
        "dead_letter_types"
    ),
    migration!(11, "postgres", "0011_pauses.sql", "pauses"),
    migration!(12, "postgres", "0012_breakers.sql", "breakers"),
    migration!(13, "postgres", "0013_rate_limits.sql", "rate_limits"),
    migration!(
        14,
        "postgres",
        "0014_concurrency_limits.sql",
        "concurrency_limits"
    ),
    migration!(
        15,
        "postgres",
        "0015_partition_limits.sql",
        "partition_limits"
    ),
];

/// The newest version in `migrations`.
pub(crate) const fn latest(migrations: &[Migration]) -> i64 {
    migrations.len() as i64
}

/// Reads a stored schema version. A value that is not a whole number ≥ 0 is an error: it must
/// never be taken for 0 (that would run every migration again over existing tables).
pub(crate) fn parse_version(stored: Option<&str>) -> Result<i64> {
    let Some(text) = stored else {
        return Ok(0);
    };
    match text.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(v),
        Ok(v) => Err(Error::corrupt(
            "the schema version in the meta table",
            format!("{v} is negative"),
        )),
        Err(e) => Err(Error::corrupt(
            format!("the schema version {text:?} in the meta table"),
            e,
        )),
    }
}

/// The migrations to apply to a database at `current`, or [`Error::SchemaTooNew`].
pub(crate) fn pending(
    migrations: &'static [Migration],
    current: i64,
) -> Result<&'static [Migration]> {
    let latest = latest(migrations);
    if current > latest {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: latest,
        });
    }
    Ok(&migrations[usize::try_from(current).unwrap_or(0)..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn numbered(list: &[Migration]) {
        for (i, m) in list.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{} is out of sequence", m.name);
            assert!(!m.sql.trim().is_empty(), "{} is empty", m.name);
        }
    }

    #[test]
    fn migrations_are_numbered_without_gaps() {
        #[cfg(feature = "sqlite")]
        numbered(SQLITE);
        #[cfg(feature = "postgres")]
        numbered(POSTGRES);
    }

    #[test]
    fn a_garbled_version_is_an_error_never_zero() {
        assert_eq!(parse_version(None).ok(), Some(0));
        assert_eq!(parse_version(Some("3")).ok(), Some(3));
        for bad in ["", "x", "1.5", "-1", "99999999999999999999"] {
            let e = parse_version(Some(bad)).err();
            assert_eq!(e.map(|e| e.kind()), Some(ErrorKind::Corrupt), "{bad:?}");
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn a_newer_database_is_refused_and_an_older_one_gets_the_rest() {
        let latest = latest(SQLITE);
        assert!(matches!(
            pending(SQLITE, latest + 1),
            Err(Error::SchemaTooNew { .. })
        ));
        assert_eq!(pending(SQLITE, 0).map(<[_]>::len).ok(), Some(SQLITE.len()));
        assert_eq!(pending(SQLITE, latest).map(<[_]>::len).ok(), Some(0));
    }
}

//! The SQLite schema and its versioned migrations, applied on open.

use rusqlite::{Connection, OptionalExtension};

use super::sql::Sql;
use crate::error::{Error, Result};

/// Each migration, in order; the schema version is the number applied. `{p}` is the table
/// prefix.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: events, subscriptions.
    "CREATE TABLE IF NOT EXISTS {p}events (
        id TEXT PRIMARY KEY NOT NULL,
        -- Events may also be written by applications through their own connections (the
        -- outbox): the table itself refuses an empty type or a payload that is not JSON.
        type TEXT NOT NULL CHECK (type <> ''),
        payload TEXT NOT NULL CHECK (json_valid(payload)),
        status TEXT NOT NULL DEFAULT 'pending',
        retry_count INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        metadata TEXT,
        delivered TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        next_attempt_at INTEGER,
        dlq_at INTEGER
    );
    -- As few indexes as the queries need: every index is another page written per commit.
    -- Serves the claim (due pending events, earliest first) and nothing else.
    CREATE INDEX IF NOT EXISTS {p}events_due ON {p}events(next_attempt_at) WHERE status = 'pending';
    -- Serves the dead-letter listing, newest first.
    CREATE INDEX IF NOT EXISTS {p}events_dlq ON {p}events(created_at, id) WHERE status = 'dlq';
    -- Serves crash recovery and releases.
    CREATE INDEX IF NOT EXISTS {p}events_processing ON {p}events(id) WHERE status = 'processing';
    CREATE TABLE IF NOT EXISTS {p}subscriptions (
        id TEXT PRIMARY KEY NOT NULL,
        name TEXT UNIQUE,
        event_type TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
];

/// Databases written before table prefixes existed have unprefixed tables (`events`,
/// `subscriptions`) under `durabus_meta` version 1. They are renamed to the default prefix's
/// names; their indexes are rebuilt under the new names by migration 1. (Their tables keep the
/// old column definitions, without the CHECK constraints on type and payload.)
const LEGACY_RENAME: &str = "ALTER TABLE events RENAME TO durabus_events;
    ALTER TABLE subscriptions RENAME TO durabus_subscriptions;
    DROP INDEX IF EXISTS events_due;
    DROP INDEX IF EXISTS events_dlq;
    DROP INDEX IF EXISTS events_processing;";

fn table_exists(conn: &Connection, name: &str) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?1",
        [name],
        |r| r.get(0),
    )?)
}

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`SCHEMA_VERSION`], inside the caller's write transaction.
pub fn migrate(conn: &Connection, sql: &Sql) -> Result<()> {
    let meta = &sql.meta;
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {meta} (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)"
    ))?;
    let current: i64 = conn
        .query_row(
            &format!("SELECT value FROM {meta} WHERE key = 'schema_version'"),
            [],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .map(|v| v.parse().unwrap_or(0))
        .unwrap_or(0);
    let legacy = sql.prefix == super::sql::DEFAULT_PREFIX
        && current >= 1
        && table_exists(conn, "events")?
        && !table_exists(conn, "durabus_events")?;
    if legacy {
        tracing::info!("renaming the tables of an older durabus database to the durabus_ prefix");
        conn.execute_batch(LEGACY_RENAME)?;
        if let Some(first) = sql.migrations().first() {
            conn.execute_batch(first)?;
        }
    }
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, migration) in sql
        .migrations()
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        conn.execute_batch(migration)?;
        conn.execute(
            &format!(
                "INSERT INTO {meta} (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value"
            ),
            [(i + 1).to_string()],
        )?;
    }
    Ok(())
}

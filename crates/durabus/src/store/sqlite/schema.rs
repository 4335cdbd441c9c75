//! The SQLite schema and its versioned migrations, applied on open.

use rusqlite::{Connection, OptionalExtension};

use crate::error::{Error, Result};

/// Each migration, in order; the schema version is the number applied.
const MIGRATIONS: &[&str] = &[
    // 1: events, subscriptions.
    "CREATE TABLE IF NOT EXISTS events (
        id TEXT PRIMARY KEY NOT NULL,
        type TEXT NOT NULL,
        payload TEXT NOT NULL,
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
    CREATE INDEX IF NOT EXISTS events_due ON events(next_attempt_at) WHERE status = 'pending';
    -- Serves the dead-letter listing, newest first.
    CREATE INDEX IF NOT EXISTS events_dlq ON events(created_at, id) WHERE status = 'dlq';
    -- Serves crash recovery and releases.
    CREATE INDEX IF NOT EXISTS events_processing ON events(id) WHERE status = 'processing';
    CREATE TABLE IF NOT EXISTS subscriptions (
        id TEXT PRIMARY KEY NOT NULL,
        name TEXT UNIQUE,
        event_type TEXT NOT NULL,
        created_at INTEGER NOT NULL
    );",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database up to [`SCHEMA_VERSION`], inside the caller's write transaction.
pub fn migrate(conn: &Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS durabus_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    )?;
    let current: i64 = conn
        .query_row(
            "SELECT value FROM durabus_meta WHERE key = 'schema_version'",
            [],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .map(|v| v.parse().unwrap_or(0))
        .unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        conn.execute_batch(sql)?;
        conn.execute(
            "INSERT INTO durabus_meta (key, value) VALUES ('schema_version', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [(i + 1).to_string()],
        )?;
    }
    Ok(())
}

//! Applying the SQLite schema's migrations (`migrations/sqlite/*.sql`) on open.

use rusqlite::{Connection, OptionalExtension};

use super::sql::Sql;
use crate::error::Result;
use crate::store::migrations;

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
pub const SCHEMA_VERSION: i64 = migrations::latest(migrations::SQLITE);

/// The version recorded in the meta table (0 for a new database). Fails with
/// [`Error::Corrupt`](crate::Error::Corrupt) if it is not a number.
pub(super) fn stored_version(conn: &Connection, sql: &Sql) -> Result<i64> {
    let text: Option<String> = conn
        .query_row(
            &format!(
                "SELECT value FROM {} WHERE key = 'schema_version'",
                sql.meta
            ),
            [],
            |r| r.get(0),
        )
        .optional()?;
    migrations::parse_version(text.as_deref())
}

/// Brings the database up to [`SCHEMA_VERSION`], inside the caller's write transaction.
pub fn migrate(conn: &Connection, sql: &Sql) -> Result<()> {
    let meta = &sql.meta;
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {meta} (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)"
    ))?;
    let current = stored_version(conn, sql)?;
    let todo = migrations::pending(migrations::SQLITE, current)?;
    let all = sql.migrations();
    let legacy = sql.prefix == super::sql::DEFAULT_PREFIX
        && current >= 1
        && table_exists(conn, "events")?
        && !table_exists(conn, "durabus_events")?;
    if legacy {
        tracing::info!("renaming the tables of an older durabus database to the durabus_ prefix");
        conn.execute_batch(LEGACY_RENAME)?;
        if let Some((_, first)) = all.first() {
            conn.execute_batch(first)?;
        }
    }
    // Migration 2's records of old dead events are written in Rust with today's statements,
    // so after every migration of this run (in the same transaction).
    let mut backfill = false;
    for m in todo {
        let Some((_, text)) = all.iter().find(|(v, _)| *v == m.version) else {
            continue;
        };
        tracing::info!(
            version = m.version,
            name = m.name,
            "migrating the SQLite schema"
        );
        conn.execute_batch(text)?;
        backfill |= m.version == 2;
        conn.execute(
            &format!(
                "INSERT INTO {meta} (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value"
            ),
            [m.version.to_string()],
        )?;
    }
    if backfill {
        backfill_dead_letters(conn, sql)?;
    }
    Ok(())
}

/// Migration 2: dead events of earlier versions get dead-letter records (and groups), as if
/// they had just died, but announce nothing and are retried by hand only (an upgrade must not
/// send old dead letters back on its own).
fn backfill_dead_letters(conn: &Connection, sql: &Sql) -> Result<()> {
    use crate::clock::Timestamp;
    use crate::dlq::{DeadLetterPolicy, Death, split_error};
    use crate::event::EventId;

    /// id, type, errors, retry count, dead since, last change.
    type Dead = (String, String, Option<String>, u32, Option<i64>, i64);
    let dead: Vec<Dead> = conn
        .prepare(&format!(
            "SELECT id, type, last_error, retry_count, dlq_at, updated_at FROM {p}events
             WHERE status = 'dlq' ORDER BY coalesce(dlq_at, updated_at), id",
            p = sql.prefix
        ))?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (id, event_type, errors, retry_count, dlq_at, updated_at) in &dead {
        let id: EventId = id.parse()?;
        let errors: Vec<String> = match errors {
            Some(text) => serde_json::from_str(text).map_err(|e| {
                crate::error::Error::corrupt(format!("the errors of event {id}"), e)
            })?,
            None => Vec::new(),
        };
        let last = errors.last().map_or("unknown error", String::as_str);
        let (key, message) = split_error(last);
        let mut death = Death::new(
            id,
            event_type,
            key,
            message,
            Vec::new(),
            errors.clone(),
            *retry_count,
            DeadLetterPolicy::manual_only(),
        );
        death.announcement = None;
        death.new_group = None;
        super::dead_letter_writes::write_death(
            conn,
            sql,
            id,
            &death,
            Timestamp(dlq_at.unwrap_or(*updated_at)),
        )?;
    }
    conn.execute(
        &format!(
            "UPDATE {}events SET dlq_count = 1 WHERE status = 'dlq'",
            sql.prefix
        ),
        [],
    )?;
    if !dead.is_empty() {
        tracing::info!(
            records = dead.len(),
            "dead events of an earlier version got dead-letter records"
        );
    }
    Ok(())
}

//! The PostgreSQL schema and its versioned migrations. Many workers may start at once: the
//! migration runs in one transaction under an advisory lock keyed by the schema name, so
//! exactly one of them applies each version and the others wait, then see it applied.

use sqlx::{PgPool, Row};

use super::q;

use crate::error::{Error, Result};

/// Each migration, in order; `{s}` is the quoted schema name. The schema version is the number
/// applied.
const MIGRATIONS: &[&str] = &[
    // 1: live events, the event log, subscriptions.
    "CREATE TABLE IF NOT EXISTS {s}.events (
        id uuid PRIMARY KEY,
        type text NOT NULL CHECK (type <> ''),
        payload json NOT NULL,
        status text NOT NULL,
        retry_count integer NOT NULL DEFAULT 0,
        attempts integer NOT NULL DEFAULT 0,
        last_error text,
        metadata text,
        delivered text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL,
        next_attempt_at bigint,
        dlq_at bigint,
        lease_owner text,
        lease_token uuid,
        lease_expires_at bigint,
        processing_started_at bigint
    );
    -- Due events: the claim walks this small partial index, never past claimed or finished rows.
    CREATE INDEX IF NOT EXISTS events_due ON {s}.events (next_attempt_at) WHERE status = 'pending';
    -- Held events by lease expiry: rescue of a dead worker's events, and heartbeats.
    CREATE INDEX IF NOT EXISTS events_lease ON {s}.events (lease_expires_at) WHERE status = 'processing';
    CREATE INDEX IF NOT EXISTS events_dlq ON {s}.events (created_at, id) WHERE status = 'dlq';
    CREATE INDEX IF NOT EXISTS events_created ON {s}.events (created_at, id);
    -- Completed events move here with their terminal status (the event log), so the live table
    -- holds only work in progress and dead letters.
    CREATE TABLE IF NOT EXISTS {s}.event_log (
        id uuid PRIMARY KEY,
        type text NOT NULL,
        payload json NOT NULL,
        status text NOT NULL,
        retry_count integer NOT NULL,
        attempts integer NOT NULL,
        last_error text,
        metadata text,
        delivered text,
        created_at bigint NOT NULL,
        updated_at bigint NOT NULL
    );
    CREATE INDEX IF NOT EXISTS event_log_created ON {s}.event_log (created_at, id);
    CREATE INDEX IF NOT EXISTS event_log_updated ON {s}.event_log (updated_at);
    -- Every id stored, live or in the log: publishing is idempotent even while an event moves
    -- from the live table to the log. Purges remove ids with their events.
    CREATE TABLE IF NOT EXISTS {s}.event_ids (id uuid PRIMARY KEY);
    CREATE TABLE IF NOT EXISTS {s}.subscriptions (
        id text PRIMARY KEY,
        name text UNIQUE,
        event_type text NOT NULL,
        created_at bigint NOT NULL
    );",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Fails with [`Error::SchemaTooNew`] if a newer build migrated the schema.
pub async fn check_version(pool: &PgPool, quoted: &str) -> Result<()> {
    let found: i64 = q(&format!(
        "SELECT value FROM {quoted}.meta WHERE key = 'schema_version'"
    ))
    .fetch_optional(pool)
    .await?
    .map(|r| r.try_get::<String, _>(0))
    .transpose()?
    .map_or(0, |v| v.parse().unwrap_or(0));
    if found > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Creates the schema if needed and brings it up to [`SCHEMA_VERSION`].
pub async fn migrate(pool: &PgPool, schema: &str, quoted: &str) -> Result<()> {
    let mut tx = pool.begin().await?;
    // One lock per schema: concurrent starts of many workers serialise here.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(format!("durabus:{schema}"))
        .execute(&mut *tx)
        .await?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA IF NOT EXISTS {quoted};
         CREATE TABLE IF NOT EXISTS {quoted}.meta (key text PRIMARY KEY, value text NOT NULL);"
    )))
    .execute(&mut *tx)
    .await?;
    let current: i64 = q(&format!(
        "SELECT value FROM {quoted}.meta WHERE key = 'schema_version'"
    ))
    .fetch_optional(&mut *tx)
    .await?
    .map(|r| r.try_get::<String, _>(0))
    .transpose()?
    .map(|v| v.parse().unwrap_or(0))
    .unwrap_or(0);
    if current > SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        sqlx::raw_sql(sqlx::AssertSqlSafe(migration.replace("{s}", quoted)))
            .execute(&mut *tx)
            .await?;
        q(&format!(
            "INSERT INTO {quoted}.meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ))
        .bind((i + 1).to_string())
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

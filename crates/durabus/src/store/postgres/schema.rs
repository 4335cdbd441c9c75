//! Applying the PostgreSQL schema's migrations (`migrations/postgres/*.sql`). Many workers may
//! start at once: the migration runs in one transaction under an advisory lock keyed by the
//! schema name, so exactly one of them applies each version and the others wait, then see it
//! applied.

use sqlx::Row;

use super::q;
use crate::error::Result;
use crate::store::migrations;

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = migrations::latest(migrations::POSTGRES);

/// The version recorded in `meta` (0 if none). Fails with
/// [`Error::Corrupt`](crate::Error::Corrupt) if it is not a number.
async fn stored_version<'c, E>(exec: E, quoted: &str) -> Result<i64>
where
    E: sqlx::Executor<'c, Database = sqlx::Postgres>,
{
    let text: Option<String> = q(&format!(
        "SELECT value FROM {quoted}.meta WHERE key = 'schema_version'"
    ))
    .fetch_optional(exec)
    .await?
    .map(|r| r.try_get::<String, _>(0))
    .transpose()?;
    migrations::parse_version(text.as_deref())
}

/// Creates the schema if needed and brings it up to [`SCHEMA_VERSION`].
pub(super) async fn migrate(pool: &super::pool::Pool, schema: &str, quoted: &str) -> Result<()> {
    let mut tx = super::tx::begin(pool).await?;
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
    let current = stored_version(&mut *tx, quoted).await?;
    // Migration 2's records of old dead events are written in Rust with today's statements,
    // so after every migration of this run (in the same transaction).
    let mut backfill = false;
    for m in migrations::pending(migrations::POSTGRES, current)? {
        tracing::info!(
            version = m.version,
            name = m.name,
            schema,
            "migrating the PostgreSQL schema"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(m.sql.replace("{s}", quoted)))
            .execute(&mut *tx)
            .await?;
        backfill |= m.version == 2;
        q(&format!(
            "INSERT INTO {quoted}.meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value"
        ))
        .bind(m.version.to_string())
        .execute(&mut *tx)
        .await?;
    }
    if backfill {
        backfill_dead_letters(&mut tx, quoted).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Migration 2: dead events of earlier versions get dead-letter records (and groups), as if
/// they had just died, but announce nothing and are retried by hand only (an upgrade must not
/// send old dead letters back on its own).
async fn backfill_dead_letters(tx: &mut sqlx::PgConnection, quoted: &str) -> Result<()> {
    use crate::clock::Timestamp;
    use crate::dlq::{DeadLetterPolicy, Death, split_error};
    use crate::event::EventId;

    let sql = super::sql::PgSql::new(quoted);
    let dead = q(&format!(
        "SELECT id, type, last_error, retry_count, dlq_at, updated_at FROM {quoted}.events
         WHERE status = 'dlq' ORDER BY coalesce(dlq_at, updated_at), id"
    ))
    .fetch_all(&mut *tx)
    .await?;
    for row in &dead {
        let id = EventId(row.try_get::<uuid::Uuid, _>("id")?);
        let event_type: String = row.try_get("type")?;
        let errors: Vec<String> = match row.try_get::<Option<String>, _>("last_error")? {
            Some(text) => serde_json::from_str(&text).map_err(|e| {
                crate::error::Error::corrupt(format!("the errors of event {id}"), e)
            })?,
            None => Vec::new(),
        };
        let last = errors.last().map_or("unknown error", String::as_str);
        let (key, message) = split_error(last);
        let retry_count = u32::try_from(row.try_get::<i32, _>("retry_count")?).unwrap_or(0);
        let mut death = Death::new(
            id,
            &event_type,
            key,
            message,
            Vec::new(),
            errors.clone(),
            retry_count,
            DeadLetterPolicy::manual_only(),
        );
        death.announcement = None;
        death.new_group = None;
        let at = row
            .try_get::<Option<i64>, _>("dlq_at")?
            .unwrap_or(row.try_get::<i64, _>("updated_at")?);
        super::dead_letter_writes::write_death(&mut *tx, &sql, "", id, &death, Timestamp(at))
            .await?;
    }
    q(&format!(
        "UPDATE {quoted}.events SET dlq_count = 1 WHERE status = 'dlq'"
    ))
    .execute(&mut *tx)
    .await?;
    Ok(())
}

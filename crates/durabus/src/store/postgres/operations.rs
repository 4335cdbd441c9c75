//! Durable operations on PostgreSQL.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use super::insert::{Notice, Rows, insert_rows};
use super::sql::PgSql;
use super::{PgStore, q, tx};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::operation::state::{self, CancelEffect};
use crate::operation::{Advance, NewOperation, Operation, OperationKind, OperationStatus};
use crate::store::OperationStore;

fn count(row: &PgRow, col: &str) -> Result<u64> {
    Ok(u64::try_from(row.try_get::<i64, _>(col)?).unwrap_or(0))
}

/// Decodes a row selected with `OP_COLUMNS`.
fn operation(row: &PgRow) -> Result<Operation> {
    let params: String = row.try_get("params")?;
    let kind: String = row.try_get("actor_kind")?;
    Ok(Operation {
        id: row.try_get("id")?,
        kind: row.try_get::<String, _>("kind")?.parse()?,
        status: row.try_get::<String, _>("status")?.parse()?,
        params: serde_json::from_str(&params)
            .map_err(|e| Error::corrupt("an operation's parameters", e))?,
        bound: row.try_get("bound")?,
        cursor: row.try_get("cursor")?,
        total: count(row, "total")?,
        processed: count(row, "processed")?,
        skipped: count(row, "skipped")?,
        errors: count(row, "errors")?,
        actor: Actor::new(
            row.try_get::<String, _>("actor")?,
            serde_json::from_value::<ActorKind>(serde_json::Value::String(kind))
                .map_err(|e| Error::corrupt("an operation's actor", e))?,
        ),
        cancel_requested: row.try_get("cancel_requested")?,
        holder: row.try_get("holder")?,
        lease_expires_at: row
            .try_get::<Option<i64>, _>("lease_expires_at")?
            .map(Timestamp),
        created_at: Timestamp(row.try_get("created_at")?),
        started_at: row.try_get::<Option<i64>, _>("started_at")?.map(Timestamp),
        finished_at: row.try_get::<Option<i64>, _>("finished_at")?.map(Timestamp),
        updated_at: Timestamp(row.try_get("updated_at")?),
        last_error: row.try_get("last_error")?,
        cursor_key: row.try_get("cursor_key")?,
        summary: row
            .try_get::<Option<String>, _>("summary")?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| Error::corrupt("an operation's summary", e))?,
    })
}

/// Refuses an id that is not a UUID before PostgreSQL does (it would say so less clearly).
fn check_id(id: &str) -> Result<()> {
    uuid::Uuid::parse_str(id)
        .map(|_| ())
        .map_err(|_| Error::InvalidId(id.to_owned()))
}

#[async_trait]
impl OperationStore for PgStore {
    async fn operation_create(&self, op: NewOperation, now: Timestamp) -> Result<Operation> {
        self.noted(async {
            self.check()?;
            check_id(&op.id)?;
            let params = serde_json::to_string(&op.params)
                .map_err(|e| Error::unserialisable("an operation's parameters", &e))?;
            q(&self.sql.ops.op_insert)
                .bind(&op.id)
                .bind(op.kind.as_str())
                .bind(params)
                .bind(op.bound)
                .bind(i64::try_from(op.total).unwrap_or(i64::MAX))
                .bind(&op.actor.name)
                .bind(op.actor.kind.as_str())
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            self.operation_get(&op.id)
                .await?
                .ok_or_else(|| Error::Internal("a new operation vanished".into()))
        })
        .await
    }

    async fn operation_get(&self, id: &str) -> Result<Option<Operation>> {
        self.noted(async {
            self.check()?;
            if uuid::Uuid::parse_str(id).is_err() {
                return Ok(None);
            }
            q(&self.sql.ops.op_get)
                .bind(id)
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?
                .as_ref()
                .map(operation)
                .transpose()
        })
        .await
    }

    async fn operation_list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<OperationKind>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.op_list)
                .bind(status.map(OperationStatus::as_str))
                .bind(kind.map(OperationKind::as_str))
                .bind(i64::from(limit))
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(operation)
                .collect()
        })
        .await
    }

    async fn operation_claim(
        &self,
        id: &str,
        holder: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Result<Option<Operation>> {
        self.noted(async {
            self.check()?;
            check_id(id)?;
            let ops = &self.sql.ops;
            let mut tx = tx::begin(&self.pool).await?;
            let Some(row) = q(&ops.op_lock).bind(id).fetch_optional(&mut *tx).await? else {
                return Ok(None);
            };
            let op = operation(&row)?;
            if !state::may_claim(
                op.status,
                op.holder.as_deref(),
                op.lease_expires_at,
                holder,
                now,
            ) {
                return Ok(None);
            }
            let row = q(&ops.op_claim)
                .bind(id)
                .bind(holder)
                .bind(now.plus(lease).as_millis())
                .bind(now.as_millis())
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            operation(&row).map(Some)
        })
        .await
    }

    async fn operation_open(&self, limit: u32) -> Result<Vec<Operation>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.op_open)
                .bind(i64::from(limit))
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(operation)
                .collect()
        })
        .await
    }

    async fn operation_cancel(&self, id: &str, now: Timestamp) -> Result<Operation> {
        self.noted(async {
            self.check()?;
            let missing = || Error::NotFound {
                what: format!("operation {id}"),
            };
            if uuid::Uuid::parse_str(id).is_err() {
                return Err(missing());
            }
            let ops = &self.sql.ops;
            let mut tx = tx::begin(&self.pool).await?;
            let row = q(&ops.op_lock)
                .bind(id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(missing)?;
            let effect = state::cancel(id, operation(&row)?.status)?;
            let row = q(&ops.op_cancel)
                .bind(id)
                .bind(now.as_millis())
                .bind(effect.status().as_str())
                .bind((effect == CancelEffect::Now).then_some(now.as_millis()))
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            operation(&row)
        })
        .await
    }

    async fn operation_advance(
        &self,
        id: &str,
        holder: &str,
        advance: Advance,
        lease: Duration,
        now: Timestamp,
    ) -> Result<Operation> {
        self.noted(async {
            self.check()?;
            check_id(id)?;
            let mut tx = tx::begin(&self.pool).await?;
            let chunk = Chunk {
                id,
                holder,
                lease_until: now.plus(lease),
            };
            let op =
                write_advance(&mut tx, &self.sql, &self.channel, &chunk, &advance, now).await?;
            tx.commit().await?;
            Ok(op)
        })
        .await
    }

    async fn operation_release(&self, id: &str, holder: &str, now: Timestamp) -> Result<()> {
        self.noted(async {
            self.check()?;
            check_id(id)?;
            q(&self.sql.ops.op_release)
                .bind(id)
                .bind(holder)
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn operation_fail(
        &self,
        id: &str,
        holder: &str,
        error: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.noted(async {
            self.check()?;
            check_id(id)?;
            q(&self.sql.ops.op_fail)
                .bind(id)
                .bind(holder)
                .bind(error)
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }
}

/// Which operation a chunk is written for: its id, its runner, and the runner's new lease.
pub(super) struct Chunk<'a> {
    pub(super) id: &'a str,
    pub(super) holder: &'a str,
    pub(super) lease_until: Timestamp,
}

/// Writes one chunk of an operation in the caller's transaction (see
/// [`OperationStore::operation_advance`]): its progress and its events. Fails with
/// [`Error::Conflict`] when the runner does not hold it running (or its cursor is not the
/// one expected); the caller's transaction must then be rolled back.
pub(super) async fn write_advance(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    chunk: &Chunk<'_>,
    advance: &Advance,
    now: Timestamp,
) -> Result<Operation> {
    let id = chunk.id;
    let summary = advance
        .summary
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| Error::unserialisable("an operation's summary", &e))?;
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let (expect_at, expect_key) = match &advance.expect_cursor {
        Some((at, key)) => (Some(*at), Some(key.as_str())),
        None => (None, None),
    };
    let row = q(&sql.ops.op_advance)
        .bind(id)
        .bind(advance.cursor)
        .bind(&advance.cursor_key)
        .bind(n(advance.processed))
        .bind(n(advance.skipped))
        .bind(n(advance.errors))
        .bind(summary)
        .bind(advance.finish.map(OperationStatus::as_str))
        .bind(&advance.error)
        .bind(chunk.lease_until.as_millis())
        .bind(now.as_millis())
        .bind(chunk.holder)
        .bind(expect_at)
        .bind(expect_key)
        .fetch_optional(&mut *conn)
        .await?;
    let Some(row) = row else {
        let status = q(&sql.ops.op_get)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
            .as_ref()
            .map(operation)
            .transpose()?
            .ok_or_else(|| Error::NotFound {
                what: format!("operation {id}"),
            })?
            .status;
        return Err(Error::Conflict {
            what: format!("operation {id}"),
            status: status.as_str().to_owned(),
            message: format!(
                "operation {id} is not running in this process (another took it over, it ended, or another runner wrote this chunk)"
            ),
        });
    };
    let op = operation(&row)?;
    if !advance.events.is_empty() {
        let rows = Rows {
            events: advance.events.iter().collect(),
            created: vec![now.as_millis(); advance.events.len()],
            snapshots: Vec::new(),
            parked: Vec::new(),
        };
        insert_rows(conn, sql, &rows, None, Some(Notice::to_all(channel))).await?;
    }
    Ok(op)
}

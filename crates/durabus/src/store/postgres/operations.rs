//! Durable operations on PostgreSQL.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::insert::{Notice, Rows, insert_rows};
use super::{PgStore, q, tx};
use crate::clock::Timestamp;
use crate::dlq::{Actor, ActorKind};
use crate::error::{Error, Result};
use crate::operation::{Advance, NewOperation, Operation, OperationStatus};
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
        kind: row.try_get("kind")?,
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
        self.check()?;
        check_id(&op.id)?;
        let params = serde_json::to_string(&op.params)
            .map_err(|e| Error::unserialisable("an operation's parameters", &e))?;
        q(&self.sql.ops.op_insert)
            .bind(&op.id)
            .bind(&op.kind)
            .bind(params)
            .bind(op.bound)
            .bind(i64::try_from(op.total).unwrap_or(i64::MAX))
            .bind(&op.actor.name)
            .bind(op.actor.kind.as_str())
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?;
        self.operation_get(&op.id)
            .await?
            .ok_or_else(|| Error::Internal("a new operation vanished".into()))
    }

    async fn operation_get(&self, id: &str) -> Result<Option<Operation>> {
        self.check()?;
        if uuid::Uuid::parse_str(id).is_err() {
            return Ok(None);
        }
        q(&self.sql.ops.op_get)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(operation)
            .transpose()
    }

    async fn operation_list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        self.check()?;
        q(&self.sql.ops.op_list)
            .bind(status.map(OperationStatus::as_str))
            .bind(kind)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(operation)
            .collect()
    }

    async fn operation_claim(
        &self,
        id: &str,
        holder: &str,
        lease: Duration,
        now: Timestamp,
    ) -> Result<Option<Operation>> {
        self.check()?;
        check_id(id)?;
        q(&self.sql.ops.op_claim)
            .bind(id)
            .bind(holder)
            .bind(now.plus(lease).as_millis())
            .bind(now.as_millis())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(operation)
            .transpose()
    }

    async fn operation_claimable(&self, now: Timestamp, limit: u32) -> Result<Vec<Operation>> {
        self.check()?;
        q(&self.sql.ops.op_claimable)
            .bind(now.as_millis())
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(operation)
            .collect()
    }

    async fn operation_cancel(&self, id: &str, now: Timestamp) -> Result<Operation> {
        self.check()?;
        let missing = || Error::NotFound {
            what: format!("operation {id}"),
        };
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(missing());
        }
        let n = q(&self.sql.ops.op_cancel)
            .bind(id)
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?
            .rows_affected();
        let op = self.operation_get(id).await?.ok_or_else(missing)?;
        if n == 0 {
            return Err(Error::Conflict {
                what: format!("operation {id}"),
                status: op.status.as_str().to_owned(),
                message: format!("operation {id} is {} and cannot be cancelled", op.status),
            });
        }
        Ok(op)
    }

    async fn operation_advance(
        &self,
        id: &str,
        holder: &str,
        advance: Advance,
        lease: Duration,
        now: Timestamp,
    ) -> Result<Operation> {
        self.check()?;
        check_id(id)?;
        let summary = advance
            .summary
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| Error::unserialisable("an operation's summary", &e))?;
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut tx = tx::begin(&self.pool).await?;
        let row = q(&self.sql.ops.op_advance)
            .bind(id)
            .bind(advance.cursor)
            .bind(&advance.cursor_key)
            .bind(n(advance.processed))
            .bind(n(advance.skipped))
            .bind(n(advance.errors))
            .bind(summary)
            .bind(advance.finish.map(OperationStatus::as_str))
            .bind(&advance.error)
            .bind(now.plus(lease).as_millis())
            .bind(now.as_millis())
            .bind(holder)
            .fetch_optional(&mut *tx)
            .await?;
        let Some(row) = row else {
            tx.rollback().await?;
            let op = self
                .operation_get(id)
                .await?
                .ok_or_else(|| Error::NotFound {
                    what: format!("operation {id}"),
                })?;
            return Err(Error::Conflict {
                what: format!("operation {id}"),
                status: op.status.as_str().to_owned(),
                message: format!(
                    "operation {id} is not running in this process (another took it over, or it ended)"
                ),
            });
        };
        let op = operation(&row)?;
        if !advance.events.is_empty() {
            let rows = Rows {
                events: advance.events.iter().collect(),
                created: vec![now.as_millis(); advance.events.len()],
                snapshots: Vec::new(),
            };
            insert_rows(
                &mut tx,
                &self.sql,
                &rows,
                None,
                Some(Notice::to_all(&self.channel)),
            )
            .await?;
        }
        tx.commit().await?;
        Ok(op)
    }

    async fn operation_release(&self, id: &str, holder: &str, now: Timestamp) -> Result<()> {
        self.check()?;
        check_id(id)?;
        q(&self.sql.ops.op_release)
            .bind(id)
            .bind(holder)
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn operation_fail(
        &self,
        id: &str,
        holder: &str,
        error: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.check()?;
        check_id(id)?;
        q(&self.sql.ops.op_fail)
            .bind(id)
            .bind(holder)
            .bind(error)
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

//! Durable operations on SQLite.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::row_writes::insert_events;
use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventStatus;
use crate::operation::state::{self, CancelEffect};
use crate::operation::{NewOperation, Operation, OperationKind, OperationStatus};
use crate::store::OperationStore;

/// Decodes a row selected with `OP_COLUMNS`.
pub(super) fn operation_from_row(row: &Row<'_>) -> rusqlite::Result<Operation> {
    let status: String = row.get(2)?;
    let params: String = row.get(3)?;
    let kind: String = row.get(11)?;
    let op_kind: String = row.get(1)?;
    Ok(Operation {
        id: row.get(0)?,
        kind: op_kind
            .parse()
            .map_err(|e: Error| corrupt(1, e.to_string()))?,
        status: status
            .parse()
            .map_err(|e: Error| corrupt(2, e.to_string()))?,
        params: serde_json::from_str(&params).map_err(|e| corrupt(3, e.to_string()))?,
        bound: row.get(4)?,
        cursor: row.get(5)?,
        total: row.get(6)?,
        processed: row.get(7)?,
        skipped: row.get(8)?,
        errors: row.get(9)?,
        actor: Actor::new(
            row.get::<_, String>(10)?,
            serde_json::from_value::<ActorKind>(serde_json::Value::String(kind))
                .map_err(|e| corrupt(11, e.to_string()))?,
        ),
        cancel_requested: row.get(12)?,
        holder: row.get(20)?,
        lease_expires_at: row.get::<_, Option<i64>>(21)?.map(Timestamp),
        created_at: Timestamp(row.get(13)?),
        started_at: row.get::<_, Option<i64>>(14)?.map(Timestamp),
        finished_at: row.get::<_, Option<i64>>(15)?.map(Timestamp),
        updated_at: Timestamp(row.get(16)?),
        last_error: row.get(17)?,
        cursor_key: row.get(18)?,
        summary: row
            .get::<_, Option<String>>(19)?
            .map(|t| serde_json::from_str(&t))
            .transpose()
            .map_err(|e| corrupt(19, e.to_string()))?,
    })
}

fn get(conn: &Connection, sql: &Sql, id: &str) -> Result<Option<Operation>> {
    Ok(conn
        .prepare_cached(&sql.op_get)?
        .query_row([id], operation_from_row)
        .optional()?)
}

fn kind_name(kind: ActorKind) -> &'static str {
    kind.as_str()
}

struct Create(NewOperation);

impl WriteOp for Create {
    type Reply = Operation;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Operation> {
        let op = &self.0;
        let params = serde_json::to_string(&op.params)
            .map_err(|e| Error::unserialisable("an operation's parameters", &e))?;
        conn.prepare_cached(&sql.op_insert)?.execute(params![
            op.id,
            op.kind.as_str(),
            params,
            op.bound,
            op.total,
            op.actor.name,
            kind_name(op.actor.kind),
            now.as_millis()
        ])?;
        get(conn, sql, &op.id)?.ok_or_else(|| Error::Internal("a new operation vanished".into()))
    }
}

struct Claim {
    id: String,
    holder: String,
    lease: Duration,
}

impl WriteOp for Claim {
    type Reply = Option<Operation>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Option<Operation>> {
        let Some(op) = get(conn, sql, &self.id)? else {
            return Ok(None);
        };
        let free = state::may_claim(
            op.status,
            op.holder.as_deref(),
            op.lease_expires_at,
            &self.holder,
            now,
        );
        if !free {
            return Ok(None);
        }
        conn.prepare_cached(&sql.op_claim)?.execute(params![
            self.id,
            self.holder,
            now.plus(self.lease).as_millis(),
            now.as_millis()
        ])?;
        get(conn, sql, &self.id)
    }
}

struct Cancel(String);

impl WriteOp for Cancel {
    type Reply = Operation;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Operation> {
        let op = get(conn, sql, &self.0)?.ok_or_else(|| Error::NotFound {
            what: format!("operation {}", self.0),
        })?;
        let effect = state::cancel(&self.0, op.status)?;
        let finished = (effect == CancelEffect::Now).then_some(now.as_millis());
        conn.prepare_cached(&sql.op_cancel)?.execute(params![
            self.0,
            now.as_millis(),
            effect.status().as_str(),
            finished
        ])?;
        get(conn, sql, &self.0)?.ok_or_else(|| Error::Internal("an operation vanished".into()))
    }
}

struct Release {
    id: String,
    holder: String,
}

impl WriteOp for Release {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<()> {
        conn.prepare_cached(&sql.op_release)?.execute(params![
            self.id,
            self.holder,
            now.as_millis()
        ])?;
        Ok(())
    }
}

struct Fail {
    id: String,
    holder: String,
    error: String,
}

impl WriteOp for Fail {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<()> {
        conn.prepare_cached(&sql.op_fail)?.execute(params![
            self.id,
            self.holder,
            self.error,
            now.as_millis()
        ])?;
        Ok(())
    }
}

/// Writes one chunk of operation `id` held by `holder` in the writer's transaction (see
/// [`OperationStore::operation_advance`]): its progress, its events, and its lease renewed
/// until `lease_until`. Fails with [`Error::Conflict`] when `holder` does not hold it running
/// (or its cursor is not the one expected).
pub(super) fn write_advance(
    conn: &Connection,
    sql: &Sql,
    id: &str,
    holder: &str,
    a: &crate::operation::Advance,
    lease_until: Timestamp,
    now: Timestamp,
) -> Result<Operation> {
    let summary = a
        .summary
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| Error::unserialisable("an operation's summary", &e))?;
    let (expect_at, expect_key) = match &a.expect_cursor {
        Some((at, key)) => (Some(*at), Some(key.as_str())),
        None => (None, None),
    };
    let n = conn.prepare_cached(&sql.op_advance)?.execute(params![
        id,
        a.cursor,
        a.cursor_key,
        a.processed,
        a.skipped,
        a.errors,
        summary,
        a.finish.map(OperationStatus::as_str),
        a.error,
        lease_until.as_millis(),
        now.as_millis(),
        holder,
        expect_at,
        expect_key,
    ])?;
    if n == 0 {
        let op = get(conn, sql, id)?.ok_or_else(|| Error::NotFound {
            what: format!("operation {id}"),
        })?;
        return Err(Error::Conflict {
            what: format!("operation {id}"),
            status: op.status.as_str().to_owned(),
            message: format!(
                "operation {id} is not running in this process (another took it over, it ended, or another runner wrote this chunk)"
            ),
        });
    }
    if !a.events.is_empty() {
        insert_events(conn, sql, &a.events, EventStatus::Pending, now)?;
    }
    get(conn, sql, id)?.ok_or_else(|| Error::Internal("an operation vanished".into()))
}

struct Advance {
    id: String,
    holder: String,
    advance: crate::operation::Advance,
    lease: Duration,
}

impl WriteOp for Advance {
    type Reply = Operation;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Operation> {
        write_advance(
            conn,
            sql,
            &self.id,
            &self.holder,
            &self.advance,
            now.plus(self.lease),
            now,
        )
    }

    fn wakes(&self, _: &Operation) -> bool {
        !self.advance.events.is_empty()
    }
}

#[async_trait]
impl OperationStore for SqliteStore {
    async fn operation_create(&self, op: NewOperation, now: Timestamp) -> Result<Operation> {
        self.write(Create(op), now).await
    }

    async fn operation_get(&self, id: &str) -> Result<Option<Operation>> {
        let sql = self.sql.clone();
        let id = id.to_owned();
        self.read(move |c| {
            c.prepare_cached(&sql.op_get)?
                .query_row([id], operation_from_row)
                .optional()
        })
        .await
    }

    async fn operation_list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<OperationKind>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        let sql = self.sql.clone();
        let kind = kind.map(OperationKind::as_str);
        self.read(move |c| {
            c.prepare_cached(&sql.op_list)?
                .query_map(
                    params![status.map(OperationStatus::as_str), kind, i64::from(limit)],
                    operation_from_row,
                )?
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
        self.write(
            Claim {
                id: id.to_owned(),
                holder: holder.to_owned(),
                lease,
            },
            now,
        )
        .await
    }

    async fn operation_open(&self, limit: u32) -> Result<Vec<Operation>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.op_open)?
                .query_map(params![i64::from(limit)], operation_from_row)?
                .collect()
        })
        .await
    }

    async fn operation_cancel(&self, id: &str, now: Timestamp) -> Result<Operation> {
        self.write(Cancel(id.to_owned()), now).await
    }

    async fn operation_advance(
        &self,
        id: &str,
        holder: &str,
        advance: crate::operation::Advance,
        lease: Duration,
        now: Timestamp,
    ) -> Result<Operation> {
        self.write(
            Advance {
                id: id.to_owned(),
                holder: holder.to_owned(),
                advance,
                lease,
            },
            now,
        )
        .await
    }

    async fn operation_release(&self, id: &str, holder: &str, now: Timestamp) -> Result<()> {
        self.write(
            Release {
                id: id.to_owned(),
                holder: holder.to_owned(),
            },
            now,
        )
        .await
    }

    async fn operation_fail(
        &self,
        id: &str,
        holder: &str,
        error: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.write(
            Fail {
                id: id.to_owned(),
                holder: holder.to_owned(),
                error: error.to_owned(),
            },
            now,
        )
        .await
    }
}

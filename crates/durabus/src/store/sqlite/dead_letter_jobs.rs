//! The dead-letter queue's maintenance and bulk work on SQLite: the auto retry, retention,
//! the purge of old dead events, and one chunk of a bulk operation, each a write op.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::dead_letters::apply_action;
use super::op::WriteOp;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::dlq::{Action, Actor, ActorKind, DeadLetterFilter};
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventId;
use crate::operation::{ChunkReport, OperationStatus};

fn ids(conn: &Connection, text: &str, args: impl rusqlite::Params) -> Result<Vec<EventId>> {
    let raw: Vec<String> = conn
        .prepare_cached(text)?
        .query_map(args, |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    raw.iter().map(|s| s.parse()).collect()
}

pub(super) struct AutoRetry(pub(super) usize);

impl WriteOp for AutoRetry {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let due = ids(
            conn,
            &sql.ops.dl_auto_due,
            params![now.as_millis(), i64::try_from(self.0).unwrap_or(i64::MAX)],
        )?;
        let actor = Actor::auto_retry();
        let mut n = 0;
        for id in due {
            match apply_action(conn, sql, id, &Action::Retry, &actor, now) {
                Ok(_) => n += 1,
                Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                    tracing::warn!(event_id = %id, error = %e, "auto retry skipped");
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

pub(super) struct Cleanup {
    pub(super) cutoff: Timestamp,
    pub(super) limit: usize,
}

impl WriteOp for Cleanup {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let old = ids(
            conn,
            &sql.ops.dl_closed_before,
            params![
                self.cutoff.as_millis(),
                i64::try_from(self.limit).unwrap_or(i64::MAX)
            ],
        )?;
        let actor = Actor::new("retention", ActorKind::Auto);
        let mut n = 0;
        for id in old {
            apply_action(conn, sql, id, &Action::Purge, &actor, now)?;
            n += 1;
        }
        Ok(n)
    }
}

pub(super) struct PurgeDead(pub(super) Timestamp);

impl WriteOp for PurgeDead {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let dead = ids(conn, &sql.ops.dl_dead_before, [self.0.as_millis()])?;
        let actor = Actor::new("purge", ActorKind::Library);
        let mut n = 0;
        for id in dead {
            match apply_action(conn, sql, id, &Action::Purge, &actor, now) {
                Ok(_) => {}
                // An event without a record (never expected): delete it alone.
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    super::payloads::keep_shared(conn, sql, &id.to_string())?;
                    conn.prepare_cached(&sql.ops.dl_delete_event)?
                        .execute([id.to_string()])?;
                }
                Err(e) => return Err(e),
            }
            n += 1;
        }
        Ok(n)
    }
}

/// The parameters of a bulk dead-letter operation, as stored.
#[derive(serde::Deserialize)]
pub(super) struct BulkParams {
    pub(super) filter: DeadLetterFilter,
    pub(super) action: Action,
}

pub(super) struct BulkChunk {
    pub(super) id: String,
    pub(super) holder: String,
    pub(super) limit: usize,
    pub(super) lease: Duration,
}

impl WriteOp for BulkChunk {
    type Reply = ChunkReport;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<ChunkReport> {
        let ops = &sql.ops;
        type Head = (
            String,
            Option<String>,
            bool,
            i64,
            i64,
            String,
            String,
            String,
            String,
        );
        let head: Option<Head> = conn
            .prepare_cached(&ops.op_holder)?
            .query_row([&self.id], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                    r.get(7)?,
                    r.get(8)?,
                ))
            })
            .optional()?;
        let (status, holder, cancel, bound, cursor, params_text, _kind, actor_name, actor_kind) =
            head.ok_or_else(|| Error::NotFound {
                what: format!("operation {}", self.id),
            })?;
        if status != OperationStatus::Running.as_str() || holder.as_deref() != Some(&self.holder) {
            return Err(Error::Conflict {
                what: format!("operation {}", self.id),
                status,
                message: format!(
                    "operation {} is not running in this process (another took it over, or it ended)",
                    self.id
                ),
            });
        }
        let expires = now.plus(self.lease).as_millis();
        let progress = |cursor: i64, r: &ChunkReport, st: OperationStatus| -> Result<()> {
            conn.prepare_cached(&ops.op_progress)?.execute(params![
                self.id,
                cursor,
                r.processed,
                r.skipped,
                r.errors,
                st.as_str(),
                expires,
                now.as_millis()
            ])?;
            Ok(())
        };
        if cancel {
            progress(cursor, &ChunkReport::default(), OperationStatus::Cancelled)?;
            return Ok(ChunkReport {
                finished: true,
                ..ChunkReport::default()
            });
        }
        let params: BulkParams = serde_json::from_str(&params_text)
            .map_err(|e| Error::corrupt(format!("the parameters of operation {}", self.id), e))?;
        let kind: ActorKind = serde_json::from_value(serde_json::Value::String(actor_kind))
            .map_err(|e| Error::corrupt(format!("the actor of operation {}", self.id), e))?;
        let actor = Actor::new(actor_name, kind);
        let (text, args) = ops.dl_chunk(&params.filter, cursor, bound, self.limit);
        let rows: Vec<(String, i64)> = conn
            .prepare_cached(&text)?
            .query_map(rusqlite::params_from_iter(args), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut report = ChunkReport::default();
        let mut last = cursor;
        for (i, (id, seq)) in rows.iter().enumerate() {
            if i == rows.len() / 2 {
                crate::fail_point!("bulk.chunk");
            }
            let id: EventId = id.parse()?;
            match apply_action(conn, sql, id, &params.action, &actor, now) {
                Ok(_) => report.processed += 1,
                Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                    report.skipped += 1;
                }
                Err(e) => return Err(e),
            }
            last = *seq;
        }
        report.finished = rows.len() < self.limit;
        let (cursor, st) = if report.finished {
            (bound, OperationStatus::Completed)
        } else {
            (last, OperationStatus::Running)
        };
        progress(cursor, &report, st)?;
        Ok(report)
    }

    fn wakes(&self, r: &ChunkReport) -> bool {
        r.processed > 0
    }
}

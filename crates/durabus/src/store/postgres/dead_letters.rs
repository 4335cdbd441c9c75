//! Dead-letter records on PostgreSQL: written in the transaction of the outcome that
//! dead-letters an event, read, and acted on; each action applies
//! [`crate::dlq::apply`] to the record locked `FOR UPDATE` in one transaction.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::dead_letter_act::{act, act_many};
use super::dead_letter_rows::{dead_letter, json, summary};
use super::insert::{Notice, Rows, insert_rows};
use super::sql::PgSql;
use super::sql_ops::{Arg, PgOpsSql};
use super::{PgStore, json_list, q, tx};
use crate::clock::Timestamp;
use crate::dlq::{
    Action, Actor, ActorKind, DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterStatus,
    DeadLetterSummary, Death, ErrorRound, Existing, GROUP_TYPES_LISTED, GroupDelta, Keyset, State,
    group_delta, plan_death,
};
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventId;
use crate::operation::{ChunkReport, OperationStatus};
use crate::store::DeadLetterStore;

pub(super) fn state_of(d: &DeadLetter, rounds: u32) -> State {
    State {
        status: d.status,
        auto_retry_count: d.auto_retry_count,
        manual_retry_count: d.manual_retry_count,
        next_auto_retry_at: d.next_auto_retry_at,
        created_at: d.created_at,
        last_retry_at: d.last_retry_at,
        last_retry_by: d.last_retry_by.clone(),
        resolved_at: d.resolved_at,
        resolved_by: d.resolved_by.clone(),
        resolution_note: d.resolution_note.clone(),
        rounds,
    }
}

pub(super) fn i32_of(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

pub(super) async fn lock(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
) -> Result<Option<(DeadLetter, u32)>> {
    q(&ops.dl_lock)
        .bind(id.0)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(dead_letter)
        .transpose()
}

pub(super) async fn get(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
) -> Result<Option<DeadLetter>> {
    Ok(q(&ops.dl_get)
        .bind(id.0)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(dead_letter)
        .transpose()?
        .map(|(d, _)| d))
}

pub(super) async fn adjust(conn: &mut PgConnection, ops: &PgOpsSql, d: &GroupDelta) -> Result<()> {
    if d.count == 0 && d.open == 0 {
        return Ok(());
    }
    q(&ops.group_adjust)
        .bind(&d.fingerprint)
        .bind(d.count)
        .bind(d.open)
        .execute(&mut *conn)
        .await?;
    if d.count < 0 {
        q(&ops.group_prune)
            .bind(&d.fingerprint)
            .execute(conn)
            .await?;
    }
    Ok(())
}

pub(super) fn history_json(history: &[ErrorRound]) -> Result<String> {
    serde_json::to_string(history).map_err(|e| Error::unserialisable("an error history", &e))
}

/// Writes the record of event `id`, which just died in the caller's transaction: a new record
/// or a new round of its existing one; its group; for a new record, the `system.dead_letter`
/// event (its `NOTIFY` goes out on commit).
pub(super) async fn write_death(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    id: EventId,
    death: &Death,
    now: Timestamp,
) -> Result<()> {
    let ops = &sql.ops;
    let existing = lock(&mut *conn, ops, id)
        .await?
        .map(|(d, rounds)| Existing {
            state: state_of(&d, rounds),
            fingerprint: d.fingerprint,
            history: d.error_history,
        });
    let fresh = existing.is_none();
    let plan = plan_death(existing, death, now);
    let s = &plan.state;
    let causes = json_list(&death.causes)?;
    let history = history_json(&plan.history)?;
    if fresh {
        q(&ops.dl_insert)
            .bind(id.0)
            .bind(&death.subscription)
            .bind(&death.error)
            .bind(causes)
            .bind(history)
            .bind(&death.fingerprint)
            .bind(i32_of(death.attempts))
            .bind(s.status.as_str())
            .bind(i32_of(s.auto_retry_count))
            .bind(i32_of(s.manual_retry_count))
            .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
            .bind(now.as_millis())
            .bind(s.last_retry_at.map(Timestamp::as_millis))
            .bind(&s.last_retry_by)
            .bind(s.resolved_at.map(Timestamp::as_millis))
            .bind(&s.resolved_by)
            .bind(&s.resolution_note)
            .bind(i32_of(s.rounds))
            .execute(&mut *conn)
            .await?;
    } else {
        q(&ops.dl_died_again)
            .bind(id.0)
            .bind(&death.subscription)
            .bind(&death.error)
            .bind(causes)
            .bind(history)
            .bind(&death.fingerprint)
            .bind(i32_of(death.attempts))
            .bind(s.status.as_str())
            .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
            .bind(i32_of(s.rounds))
            .bind(now.as_millis())
            .execute(&mut *conn)
            .await?;
    }
    if let Some(old) = &plan.old_group {
        adjust(&mut *conn, ops, old).await?;
    }
    q(&ops.group_upsert)
        .bind(&death.fingerprint)
        .bind(&death.subscription)
        .bind(&death.signature)
        .bind(&death.error)
        .bind(plan.group.count)
        .bind(plan.group.open)
        .bind(now.as_millis())
        .bind(&death.event_type)
        .bind(GROUP_TYPES_LISTED as i32)
        .execute(&mut *conn)
        .await?;
    // Announced when the record is created, not again at each later round.
    if fresh && let Some(a) = &death.announcement {
        let rows = Rows {
            events: vec![a],
            created: vec![now.as_millis()],
            snapshots: Vec::new(),
        };
        insert_rows(conn, sql, &rows, None, Some(Notice::to_all(channel))).await?;
    }
    Ok(())
}

/// A revived dead letter was delivered (in the caller's transaction): its record is resolved
/// by whoever sent it back.
pub(super) async fn write_delivered(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
    now: Timestamp,
) -> Result<()> {
    let Some((d, rounds)) = lock(&mut *conn, ops, id).await? else {
        return Ok(());
    };
    if d.status != DeadLetterStatus::Retrying {
        return Ok(());
    }
    let after = state_of(&d, rounds).delivered(now);
    set_state(&mut *conn, ops, id, &after, now).await?;
    adjust(
        conn,
        ops,
        &group_delta(&d.fingerprint, Some(d.status), Some(after.status)),
    )
    .await
}

pub(super) async fn set_state(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
    s: &State,
    now: Timestamp,
) -> Result<()> {
    q(&ops.dl_set_state)
        .bind(id.0)
        .bind(s.status.as_str())
        .bind(i32_of(s.auto_retry_count))
        .bind(i32_of(s.manual_retry_count))
        .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
        .bind(s.last_retry_at.map(Timestamp::as_millis))
        .bind(&s.last_retry_by)
        .bind(s.resolved_at.map(Timestamp::as_millis))
        .bind(&s.resolved_by)
        .bind(&s.resolution_note)
        .bind(i32_of(s.rounds))
        .bind(now.as_millis())
        .execute(conn)
        .await?;
    Ok(())
}

fn bind_args<'q>(
    mut query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    args: Vec<Arg>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    for a in args {
        query = match a {
            Arg::Text(t) => query.bind(t),
            Arg::Int(i) => query.bind(i),
        };
    }
    query
}

async fn event_ids(
    conn: &mut PgConnection,
    text: &str,
    at: i64,
    limit: i64,
) -> Result<Vec<EventId>> {
    Ok(q(text)
        .bind(at)
        .bind(limit)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0).map(EventId))
        .collect::<std::result::Result<_, _>>()?)
}

impl PgStore {
    /// Runs `act` in a transaction of its own; wakes workers if it sent events back.
    async fn acting<T: Send>(
        &self,
        f: impl for<'c> FnOnce(&'c mut PgConnection) -> futures_like::BoxFuture<'c, Result<(T, bool)>>
        + Send,
    ) -> Result<T> {
        self.check()?;
        let mut tx = tx::begin(&self.pool).await?;
        let (out, requeued) = f(&mut tx).await?;
        tx.commit().await?;
        if requeued {
            self.notify_others().await;
            self.wake.notify_one();
        }
        Ok(out)
    }
}

/// A boxed future (what an async closure borrowing a connection returns).
mod futures_like {
    pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;
}

#[derive(serde::Deserialize)]
struct BulkParams {
    filter: DeadLetterFilter,
    action: Action,
}

#[async_trait]
impl DeadLetterStore for PgStore {
    async fn dlq_list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<Vec<DeadLetter>> {
        self.check()?;
        let (text, args) = self.sql.ops.dl_list(&filter, &page);
        bind_args(q(&text), args)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| dead_letter(r).map(|(d, _)| d))
            .collect()
    }

    async fn dlq_list_summaries(
        &self,
        filter: DeadLetterFilter,
        page: Keyset,
    ) -> Result<Vec<DeadLetterSummary>> {
        self.check()?;
        let (text, args) = self.sql.ops.dl_list_summaries(&filter, &page);
        bind_args(q(&text), args)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(summary)
            .collect()
    }

    async fn dlq_get(&self, event_id: EventId) -> Result<Option<DeadLetter>> {
        self.check()?;
        let mut conn = self.pool.acquire().await?;
        get(&mut conn, &self.sql.ops, event_id).await
    }

    async fn dlq_count(&self, filter: DeadLetterFilter, bound: Option<i64>) -> Result<u64> {
        self.check()?;
        let (text, args) = self.sql.ops.dl_count(&filter, bound);
        let n: i64 = bind_args(q(&text), args)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    async fn dlq_max_seq(&self) -> Result<i64> {
        self.check()?;
        Ok(q(&self.sql.ops.dl_max_seq)
            .fetch_one(&self.pool)
            .await?
            .try_get(0)?)
    }

    async fn dlq_groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>> {
        self.check()?;
        q(&self.sql.ops.groups)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(DeadLetterGroup {
                    fingerprint: r.try_get("fingerprint")?,
                    subscription: r.try_get("subscription")?,
                    signature: r.try_get("signature")?,
                    sample_error: r.try_get("sample_error")?,
                    count: u64::try_from(r.try_get::<i64, _>("count")?).unwrap_or(0),
                    open: u64::try_from(r.try_get::<i64, _>("open")?).unwrap_or(0),
                    first_seen: Timestamp(r.try_get("first_seen")?),
                    last_seen: Timestamp(r.try_get("last_seen")?),
                    event_types: json(r, "event_types")?,
                })
            })
            .collect()
    }

    async fn dlq_act(
        &self,
        event_id: EventId,
        action: Action,
        actor: Actor,
        now: Timestamp,
    ) -> Result<Option<DeadLetter>> {
        let sql = self.sql.clone();
        self.acting(move |conn| {
            Box::pin(async move { act(conn, &sql.ops, event_id, &action, &actor, now).await })
        })
        .await
    }

    async fn dlq_auto_retry(&self, now: Timestamp, limit: usize) -> Result<u64> {
        let sql = self.sql.clone();
        self.acting(move |conn| {
            Box::pin(async move {
                let ops = &sql.ops;
                let due = event_ids(
                    &mut *conn,
                    &ops.dl_auto_due,
                    now.as_millis(),
                    i64::try_from(limit).unwrap_or(i64::MAX),
                )
                .await?;
                let many = act_many(
                    &mut *conn,
                    ops,
                    &due,
                    &Action::Retry,
                    &Actor::auto_retry(),
                    now,
                )
                .await?;
                for (id, e) in &many.skipped {
                    tracing::warn!(event_id = %id, error = %e, "auto retry skipped");
                }
                Ok((many.processed, many.requeued))
            })
        })
        .await
    }

    async fn dlq_cleanup(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        let sql = self.sql.clone();
        self.acting(move |conn| {
            Box::pin(async move {
                let ops = &sql.ops;
                let old = event_ids(
                    &mut *conn,
                    &ops.dl_closed_before,
                    cutoff.as_millis(),
                    i64::try_from(limit).unwrap_or(i64::MAX),
                )
                .await?;
                let actor = Actor::new("retention", ActorKind::Auto);
                let many = act_many(&mut *conn, ops, &old, &Action::Purge, &actor, cutoff).await?;
                Ok((many.processed, false))
            })
        })
        .await
    }

    async fn dlq_purge(&self, cutoff: Timestamp) -> Result<u64> {
        let sql = self.sql.clone();
        self.acting(move |conn| {
            Box::pin(async move {
                let ops = &sql.ops;
                let dead: Vec<EventId> = q(&ops.dl_dead_before)
                    .bind(cutoff.as_millis())
                    .fetch_all(&mut *conn)
                    .await?
                    .iter()
                    .map(|r| r.try_get::<Uuid, _>(0).map(EventId))
                    .collect::<std::result::Result<_, _>>()?;
                let actor = Actor::new("purge", ActorKind::Library);
                let many = act_many(&mut *conn, ops, &dead, &Action::Purge, &actor, cutoff).await?;
                // Events without a record (never expected): deleted alone.
                let orphans: Vec<Uuid> = many
                    .skipped
                    .iter()
                    .filter(|(_, e)| e.kind() == ErrorKind::NotFound)
                    .map(|(id, _)| id.0)
                    .collect();
                if !orphans.is_empty() {
                    q(&ops.dl_delete_many)
                        .bind(&orphans)
                        .execute(&mut *conn)
                        .await?;
                }
                Ok((dead.len() as u64, false))
            })
        })
        .await
    }

    async fn dlq_bulk_chunk(
        &self,
        id: &str,
        holder: &str,
        limit: usize,
        lease: Duration,
        now: Timestamp,
    ) -> Result<ChunkReport> {
        let sql = self.sql.clone();
        let (id, holder) = (id.to_owned(), holder.to_owned());
        let limit = limit.max(1);
        self.acting(move |conn| {
            Box::pin(async move {
                let ops = &sql.ops;
                let head = q(&ops.op_head)
                    .bind(&id)
                    .fetch_optional(&mut *conn)
                    .await?
                    .ok_or_else(|| Error::NotFound {
                        what: format!("operation {id}"),
                    })?;
                let status: String = head.try_get("status")?;
                let held: Option<String> = head.try_get("holder")?;
                if status != OperationStatus::Running.as_str() || held.as_deref() != Some(&holder) {
                    return Err(Error::Conflict {
                        what: format!("operation {id}"),
                        status,
                        message: format!(
                            "operation {id} is not running in this process (another took it over, or it ended)"
                        ),
                    });
                }
                let cancel: bool = head.try_get("cancel_requested")?;
                let bound: i64 = head.try_get("bound")?;
                let cursor: i64 = head.try_get("cursor")?;
                let expires = now.plus(lease).as_millis();
                let progress = |cursor: i64, r: ChunkReport, st: OperationStatus| {
                    q(&ops.op_progress)
                        .bind(id.clone())
                        .bind(cursor)
                        .bind(i64::try_from(r.processed).unwrap_or(i64::MAX))
                        .bind(i64::try_from(r.skipped).unwrap_or(i64::MAX))
                        .bind(i64::try_from(r.errors).unwrap_or(i64::MAX))
                        .bind(st.as_str())
                        .bind(expires)
                        .bind(now.as_millis())
                };
                if cancel {
                    progress(cursor, ChunkReport::default(), OperationStatus::Cancelled)
                        .execute(&mut *conn)
                        .await?;
                    return Ok((
                        ChunkReport {
                            finished: true,
                            ..ChunkReport::default()
                        },
                        false,
                    ));
                }
                let params: BulkParams =
                    serde_json::from_str(&head.try_get::<String, _>("params")?).map_err(|e| {
                        Error::corrupt(format!("the parameters of operation {id}"), e)
                    })?;
                let kind: ActorKind = serde_json::from_value(serde_json::Value::String(
                    head.try_get("actor_kind")?,
                ))
                .map_err(|e| Error::corrupt(format!("the actor of operation {id}"), e))?;
                let actor = Actor::new(head.try_get::<String, _>("actor")?, kind);
                let (text, args) = ops.dl_chunk(&params.filter, cursor, bound, limit);
                let rows: Vec<(Uuid, i64)> = bind_args(q(&text), args)
                    .fetch_all(&mut *conn)
                    .await?
                    .iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect::<Result<_>>()?;
                let ids: Vec<EventId> = rows.iter().map(|(id, _)| EventId(*id)).collect();
                let many = act_many(&mut *conn, ops, &ids, &params.action, &actor, now).await?;
                // The chunk is one set-based statement: "halfway" is after it, before commit.
                crate::fail_point!("bulk.chunk");
                let mut report = ChunkReport {
                    processed: many.processed,
                    skipped: many.skipped.len() as u64,
                    ..ChunkReport::default()
                };
                let requeued = many.requeued;
                let last = rows.last().map_or(cursor, |(_, seq)| *seq);
                report.finished = rows.len() < limit;
                let (cursor, st) = if report.finished {
                    (bound, OperationStatus::Completed)
                } else {
                    (last, OperationStatus::Running)
                };
                progress(cursor, report, st).execute(&mut *conn).await?;
                Ok((report, requeued))
            })
        })
        .await
    }
}

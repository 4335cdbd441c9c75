//! Dead-letter records on SQLite: written with the outcome that dead-letters an event, read,
//! and acted on, each action applying [`crate::dlq::apply`] inside one writer
//! transaction.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::dead_letter_jobs::{AutoRetry, BulkChunk, Cleanup, PurgeDead};
use super::dead_letter_rows::{dead_letter_from_row, json, status, summary_from_row, ts};
use super::events::insert_events;
use super::op::WriteOp;
use super::rows::json_list;
use super::sql::Sql;
use super::sql_ops::OpsSql;
use crate::clock::Timestamp;
use crate::dlq::{
    Action, Actor, Change, DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterStatus,
    DeadLetterSummary, Death, ErrorRound, Existing, GROUP_TYPES_LISTED, GroupDelta, Keyset, State,
    apply, group_delta, plan_death,
};
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus};
use crate::operation::ChunkReport;
use crate::store::DeadLetterStore;
use crate::store::recovery::requeue;

fn state_of(d: &DeadLetter, rounds: u32) -> State {
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

/// One record and its round count, inside the writer's transaction.
fn load(conn: &Connection, sql: &OpsSql, id: EventId) -> Result<Option<(DeadLetter, u32)>> {
    Ok(conn
        .prepare_cached(&sql.dl_get)?
        .query_row([id.to_string()], |r| {
            Ok((dead_letter_from_row(r)?, r.get::<_, u32>(21)?))
        })
        .optional()?)
}

fn history_json(history: &[ErrorRound]) -> Result<String> {
    serde_json::to_string(history).map_err(|e| Error::unserialisable("an error history", &e))
}

fn adjust(conn: &Connection, sql: &OpsSql, d: &GroupDelta) -> Result<()> {
    if d.count == 0 && d.open == 0 {
        return Ok(());
    }
    conn.prepare_cached(&sql.group_adjust)?
        .execute(params![d.fingerprint, d.count, d.open])?;
    if d.count < 0 {
        conn.prepare_cached(&sql.group_prune)?
            .execute([&d.fingerprint])?;
    }
    Ok(())
}

/// Writes the record of event `id`, which just died: a new record, or a new round of its
/// existing one; its group; and, for a new record, the `system.dead_letter` event.
pub(super) fn write_death(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    death: &Death,
    now: Timestamp,
) -> Result<()> {
    let ops = &sql.ops;
    let existing = load(conn, ops, id)?.map(|(d, rounds)| Existing {
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
        conn.prepare_cached(&ops.dl_insert)?.execute(params![
            id.to_string(),
            death.subscription,
            death.error,
            causes,
            history,
            death.fingerprint,
            death.attempts,
            s.status.as_str(),
            s.auto_retry_count,
            s.manual_retry_count,
            s.next_auto_retry_at.map(Timestamp::as_millis),
            now.as_millis(),
            s.last_retry_at.map(Timestamp::as_millis),
            s.last_retry_by,
            s.resolved_at.map(Timestamp::as_millis),
            s.resolved_by,
            s.resolution_note,
            s.rounds,
        ])?;
    } else {
        conn.prepare_cached(&ops.dl_died_again)?.execute(params![
            id.to_string(),
            death.subscription,
            death.error,
            causes,
            history,
            death.fingerprint,
            death.attempts,
            s.status.as_str(),
            s.next_auto_retry_at.map(Timestamp::as_millis),
            s.rounds,
            now.as_millis(),
        ])?;
    }
    if let Some(old) = &plan.old_group {
        adjust(conn, ops, old)?;
    }
    conn.prepare_cached(&ops.group_upsert)?.execute(params![
        death.fingerprint,
        death.subscription,
        death.signature,
        death.error,
        plan.group.count,
        plan.group.open,
        now.as_millis(),
        death.event_type,
        GROUP_TYPES_LISTED as i64,
    ])?;
    // Announced when the record is created, not again at each later round.
    if fresh && let Some(announcement) = &death.announcement {
        insert_events(
            conn,
            sql,
            std::slice::from_ref(announcement),
            EventStatus::Pending,
            now,
        )?;
    }
    Ok(())
}

fn set_state(
    conn: &Connection,
    ops: &OpsSql,
    id: EventId,
    s: &State,
    now: Timestamp,
) -> Result<()> {
    conn.prepare_cached(&ops.dl_set_state)?.execute(params![
        id.to_string(),
        s.status.as_str(),
        s.auto_retry_count,
        s.manual_retry_count,
        s.next_auto_retry_at.map(Timestamp::as_millis),
        s.last_retry_at.map(Timestamp::as_millis),
        s.last_retry_by,
        s.resolved_at.map(Timestamp::as_millis),
        s.resolved_by,
        s.resolution_note,
        s.rounds,
        now.as_millis(),
    ])?;
    Ok(())
}

/// A revived dead letter was delivered: its record is resolved by whoever sent it back.
pub(super) fn write_delivered(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    now: Timestamp,
) -> Result<()> {
    let ops = &sql.ops;
    let Some((d, rounds)) = load(conn, ops, id)? else {
        return Ok(());
    };
    if d.status != DeadLetterStatus::Retrying {
        return Ok(());
    }
    let after = state_of(&d, rounds).delivered(now);
    set_state(conn, ops, id, &after, now)?;
    adjust(
        conn,
        ops,
        &group_delta(&d.fingerprint, Some(d.status), Some(after.status)),
    )
}

/// A record's lifecycle and group, inside the writer's transaction.
fn load_state(conn: &Connection, sql: &OpsSql, id: EventId) -> Result<Option<(State, String)>> {
    Ok(conn
        .prepare_cached(&sql.dl_state)?
        .query_row([id.to_string()], |r| {
            Ok((
                State {
                    status: status(r, 0)?,
                    auto_retry_count: r.get(1)?,
                    manual_retry_count: r.get(2)?,
                    next_auto_retry_at: ts(r.get(3)?),
                    created_at: Timestamp(r.get(4)?),
                    last_retry_at: ts(r.get(5)?),
                    last_retry_by: r.get(6)?,
                    resolved_at: ts(r.get(7)?),
                    resolved_by: r.get(8)?,
                    resolution_note: r.get(9)?,
                    rounds: r.get(10)?,
                },
                r.get(11)?,
            ))
        })
        .optional()?)
}

/// Applies `action` to the record of `id` inside the writer's transaction. Returns whether
/// the record still exists (not purged).
pub(super) fn apply_action(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    action: &Action,
    actor: &Actor,
    now: Timestamp,
) -> Result<bool> {
    let ops = &sql.ops;
    let (before, fingerprint) = load_state(conn, ops, id)?.ok_or_else(|| Error::NotFound {
        what: format!("dead letter {id}"),
    })?;
    match apply(id, &before, action, actor, now)? {
        Change::Update {
            state,
            requeue: send,
        } => {
            if send {
                let reset = requeue();
                let n = conn.prepare_cached(&ops.dl_requeue)?.execute(params![
                    id.to_string(),
                    now.as_millis(),
                    reset.retry_count,
                    reset.clear_errors
                ])?;
                if n != 1 {
                    return Err(Error::Conflict {
                        what: format!("dead letter {id}"),
                        status: before.status.as_str().to_owned(),
                        message: format!(
                            "dead letter {id} cannot be retried: its event is no longer in the dead-letter queue"
                        ),
                    });
                }
            }
            set_state(conn, ops, id, &state, now)?;
            adjust(
                conn,
                ops,
                &group_delta(&fingerprint, Some(before.status), Some(state.status)),
            )?;
            Ok(true)
        }
        Change::Delete => {
            conn.prepare_cached(&ops.dl_delete)?
                .execute([id.to_string()])?;
            super::payloads::keep_shared(conn, sql, &id.to_string())?;
            conn.prepare_cached(&ops.dl_delete_event)?
                .execute([id.to_string()])?;
            adjust(
                conn,
                ops,
                &group_delta(&fingerprint, Some(before.status), None),
            )?;
            Ok(false)
        }
    }
}

/// [`apply_action`], then the record as it is after it (`None` when purged).
fn act(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    action: &Action,
    actor: &Actor,
    now: Timestamp,
) -> Result<Option<DeadLetter>> {
    if apply_action(conn, sql, id, action, actor, now)? {
        Ok(load(conn, &sql.ops, id)?.map(|(d, _)| d))
    } else {
        Ok(None)
    }
}

struct Act {
    id: EventId,
    action: Action,
    actor: Actor,
}

impl WriteOp for Act {
    type Reply = Option<DeadLetter>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Option<DeadLetter>> {
        act(conn, sql, self.id, &self.action, &self.actor, now)
    }

    fn wakes(&self, _reply: &Option<DeadLetter>) -> bool {
        self.action == Action::Retry
    }
}

#[async_trait]
impl DeadLetterStore for SqliteStore {
    async fn dlq_list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<Vec<DeadLetter>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let (text, args) = sql.ops.dl_list(&filter, &page);
            c.prepare_cached(&text)?
                .query_map(rusqlite::params_from_iter(args), dead_letter_from_row)?
                .collect()
        })
        .await
    }

    async fn dlq_list_summaries(
        &self,
        filter: DeadLetterFilter,
        page: Keyset,
    ) -> Result<Vec<DeadLetterSummary>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let (text, args) = sql.ops.dl_list_summaries(&filter, &page);
            c.prepare_cached(&text)?
                .query_map(rusqlite::params_from_iter(args), summary_from_row)?
                .collect()
        })
        .await
    }

    async fn dlq_get(&self, event_id: EventId) -> Result<Option<DeadLetter>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.ops.dl_get)?
                .query_row([event_id.to_string()], dead_letter_from_row)
                .optional()
        })
        .await
    }

    async fn dlq_count(&self, filter: DeadLetterFilter, bound: Option<i64>) -> Result<u64> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let (text, args) = sql.ops.dl_count(&filter, bound);
            c.prepare_cached(&text)?
                .query_row(rusqlite::params_from_iter(args), |r| r.get(0))
        })
        .await
    }

    async fn dlq_max_seq(&self) -> Result<i64> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.ops.dl_max_seq)?
                .query_row([], |r| r.get(0))
        })
        .await
    }

    async fn dlq_groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.ops.groups)?
                .query_map([i64::from(limit)], |r| {
                    Ok(DeadLetterGroup {
                        fingerprint: r.get(0)?,
                        subscription: r.get(1)?,
                        signature: r.get(2)?,
                        sample_error: r.get(3)?,
                        count: r.get(4)?,
                        open: r.get(5)?,
                        first_seen: Timestamp(r.get(6)?),
                        last_seen: Timestamp(r.get(7)?),
                        event_types: json(r, 8)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn dlq_act(
        &self,
        event_id: EventId,
        action: Action,
        actor: Actor,
        now: Timestamp,
    ) -> Result<Option<DeadLetter>> {
        self.write(
            Act {
                id: event_id,
                action,
                actor,
            },
            now,
        )
        .await
    }

    async fn dlq_auto_retry(&self, now: Timestamp, limit: usize) -> Result<u64> {
        self.write(AutoRetry(limit), now).await
    }

    async fn dlq_cleanup(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.write(Cleanup { cutoff, limit }, cutoff).await
    }

    async fn dlq_purge(&self, cutoff: Timestamp) -> Result<u64> {
        self.write(PurgeDead(cutoff), cutoff).await
    }

    async fn dlq_bulk_chunk(
        &self,
        id: &str,
        holder: &str,
        limit: usize,
        lease: Duration,
        now: Timestamp,
    ) -> Result<ChunkReport> {
        self.write(
            BulkChunk {
                id: id.to_owned(),
                holder: holder.to_owned(),
                limit: limit.max(1),
                lease,
            },
            now,
        )
        .await
    }
}

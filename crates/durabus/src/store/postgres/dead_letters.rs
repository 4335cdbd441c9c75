//! Dead-letter records on PostgreSQL: written in the transaction of the outcome that
//! dead-letters an event, read, and acted on; each action applies
//! [`crate::dlq::apply`] to the record locked `FOR UPDATE` in one transaction.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::dead_letter_act::act_many;
use super::dead_letter_rows::{dead_letter, i32_of, json, lock, state_of, summary};
use super::insert::{Notice, Rows, insert_rows};
use super::keys::KeyOp;
use super::operations::{Chunk, write_advance};
use super::sql::PgSql;
use super::sql_ops::{Arg, PgOpsSql};
use super::{PgStore, json_list, q, tx};
use crate::clock::Timestamp;
use crate::dlq::{
    DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterStatus, DeadLetterSummary, Death,
    ErrorRound, Existing, GROUP_TYPES_LISTED, GroupDelta, Keyset, State, group_delta, plan_death,
};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::{ActBatch, ActReport, DeadLetterStore};

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
    // `inserted`: this death created the group (read from the row's `xmax`, so two workers
    // racing on one new fingerprint announce it once).
    let inserted: bool = q(&ops.group_upsert)
        .bind(&death.fingerprint)
        .bind(&death.subscription)
        .bind(&death.signature)
        .bind(&death.error)
        .bind(plan.group.count)
        .bind(plan.group.open)
        .bind(now.as_millis())
        .bind(&death.event_type)
        .bind(GROUP_TYPES_LISTED as i32)
        .fetch_one(&mut *conn)
        .await?
        .try_get("inserted")?;
    // Announced when the record is created, not again at each later round.
    if fresh && let Some(a) = &death.announcement {
        let rows = Rows {
            events: vec![a],
            created: vec![now.as_millis()],
            snapshots: Vec::new(),
            parked: Vec::new(),
        };
        insert_rows(&mut *conn, sql, &rows, None, Some(Notice::to_all(channel))).await?;
    }
    // And a group when this death created it.
    if inserted && let Some(e) = &death.new_group {
        let rows = Rows {
            events: vec![e],
            created: vec![now.as_millis()],
            snapshots: Vec::new(),
            parked: Vec::new(),
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

impl PgStore {
    /// Event ids from `text` with bounds `at` and `limit`.
    async fn event_ids(&self, text: &str, at: i64, limit: usize) -> Result<Vec<EventId>> {
        self.check()?;
        Ok(q(text)
            .bind(at)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?
            .iter()
            .map(|r| r.try_get::<Uuid, _>(0).map(EventId))
            .collect::<std::result::Result<_, _>>()?)
    }

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

#[async_trait]
impl DeadLetterStore for PgStore {
    async fn dlq_list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<Vec<DeadLetter>> {
        self.noted(async {
            self.check()?;
            let (text, args) = self.sql.ops.dl_list(&filter, &page);
            bind_args(q(&text), args)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| dead_letter(r).map(|(d, _)| d))
                .collect()
        })
        .await
    }

    async fn dlq_list_summaries(
        &self,
        filter: DeadLetterFilter,
        page: Keyset,
    ) -> Result<Vec<DeadLetterSummary>> {
        self.noted(async {
            self.check()?;
            let (text, args) = self.sql.ops.dl_list_summaries(&filter, &page);
            bind_args(q(&text), args)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(summary)
                .collect()
        })
        .await
    }

    async fn dlq_get(&self, event_id: EventId) -> Result<Option<DeadLetter>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            super::dead_letter_rows::get(&mut conn, &self.sql.ops, event_id).await
        })
        .await
    }

    async fn dlq_count(&self, filter: DeadLetterFilter, bound: Option<i64>) -> Result<u64> {
        self.noted(async {
            self.check()?;
            let (text, args) = self.sql.ops.dl_count(&filter, bound);
            let n: i64 = bind_args(q(&text), args)
                .fetch_one(&mut *self.pool.acquire().await?)
                .await?
                .try_get(0)?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }

    async fn dlq_max_seq(&self) -> Result<i64> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.ops.dl_max_seq)
                .fetch_one(&mut *self.pool.acquire().await?)
                .await?
                .try_get(0)?)
        })
        .await
    }

    async fn dlq_group_buckets(
        &self,
        fingerprints: &[String],
        since: Timestamp,
        bucket_ms: i64,
    ) -> Result<Vec<(String, i64, u64)>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.group_buckets)
                .bind(fingerprints)
                .bind(since.as_millis())
                .bind(bucket_ms)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get("fingerprint")?,
                        r.try_get("bucket")?,
                        u64::try_from(r.try_get::<i64, _>("n")?).unwrap_or(0),
                    ))
                })
                .collect()
        })
        .await
    }

    async fn dlq_groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.groups)
                .bind(i64::from(limit))
                .fetch_all(&mut *self.pool.acquire().await?)
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
        })
        .await
    }

    async fn dlq_auto_retry_due(&self, now: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        self.noted(async {
            self.event_ids(&self.sql.ops.dl_auto_due, now.as_millis(), limit)
                .await
        })
        .await
    }

    async fn dlq_closed_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        self.noted(async {
            self.event_ids(&self.sql.ops.dl_closed_before, cutoff.as_millis(), limit)
                .await
        })
        .await
    }

    async fn dlq_dead_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        self.noted(async {
            self.event_ids(&self.sql.ops.dl_dead_before, cutoff.as_millis(), limit)
                .await
        })
        .await
    }

    async fn dlq_select(
        &self,
        filter: &DeadLetterFilter,
        after: i64,
        bound: i64,
        limit: usize,
    ) -> Result<Vec<(EventId, i64)>> {
        self.noted(async {
            self.check()?;
            let (text, args) = self.sql.ops.dl_chunk(filter, after, bound, limit.max(1));
            bind_args(q(&text), args)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| Ok((EventId(r.try_get::<Uuid, _>(0)?), r.try_get(1)?)))
                .collect()
        })
        .await
    }

    async fn dlq_act(&self, batch: ActBatch, now: Timestamp) -> Result<ActReport> {
        self.noted(async {
            let sql = self.sql.clone();
            let channel = self.channel.clone();
            self.acting(move |conn| {
                Box::pin(async move {
                    let ops = &sql.ops;
                    let many = act_many(
                        &mut *conn,
                        ops,
                        &batch.ids,
                        &batch.action,
                        &batch.actor,
                        batch.still_matching.as_ref(),
                        now,
                    )
                    .await?;
                    // Ordering keys, in the keys' order (see `keys::apply`).
                    let mut key_ops = Vec::new();
                    for (ids, op) in [(&many.rejoin, KeyOp::Rejoin), (&many.leave, KeyOp::Leave)] {
                        for (key, id) in super::keys::keys_of(&mut *conn, &sql, ids).await? {
                            key_ops.push((key, id, op));
                        }
                    }
                    super::keys::apply(&mut *conn, &sql, &channel, key_ops, now.as_millis())
                        .await?;
                    let mut report = ActReport {
                        applied: many.processed,
                        skipped: many.skipped,
                        operation: None,
                        after: Vec::new(),
                    };
                    if batch.read_back {
                        for id in &batch.ids {
                            if report.skipped.iter().any(|(s, _)| s == id) {
                                continue;
                            }
                            let got = super::dead_letter_rows::get(&mut *conn, ops, *id).await?;
                            report.after.extend(got);
                        }
                    }
                    if let Some(chunk) = &batch.chunk {
                        // The actions are set-based statements: "halfway" is after them, before
                        // the progress and the commit.
                        crate::fail_point!("bulk.chunk");
                        let mut advance = chunk.advance.clone();
                        advance.processed = report.applied;
                        advance.skipped = report.skipped.len() as u64;
                        let write = Chunk {
                            id: &chunk.operation,
                            holder: &chunk.holder,
                            lease_until: now.plus(chunk.lease),
                        };
                        report.operation = Some(
                            write_advance(&mut *conn, &sql, &channel, &write, &advance, now)
                                .await?,
                        );
                    }
                    Ok((report, many.requeued))
                })
            })
            .await
        })
        .await
    }

    async fn dlq_delete_dead_events(&self, ids: Vec<EventId>) -> Result<u64> {
        self.noted(async {
            self.check()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
            let mut tx = tx::begin(&self.pool).await?;
            let n = q(&self.sql.ops.dl_count_dead)
                .bind(&raw)
                .fetch_one(&mut *tx)
                .await?
                .try_get::<i64, _>(0)?;
            q(&self.sql.ops.dl_delete_many)
                .bind(&raw)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(u64::try_from(n).unwrap_or(0))
        })
        .await
    }
}

//! Dead-letter records on PostgreSQL: written in the transaction of the outcome that
//! dead-letters an event, read, and acted on; each action applies
//! [`crate::dlq::apply`] to the record locked `FOR UPDATE` in one transaction.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::dead_letter_act::act_many;
use super::dead_letter_rows::{dead_letter, json, summary};
use super::keys::KeyOp;
use super::operations::{Chunk, write_advance};
use super::sql_ops::Arg;
use super::{PgStore, q, tx};
use crate::clock::Timestamp;
use crate::dlq::{DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterSummary, Keyset};
use crate::error::Result;
use crate::event::EventId;
use crate::store::{ActBatch, ActReport, DeadLetterStore};

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

    async fn dlq_delete_dead_events(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        self.noted(async {
            self.check()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
            let mut tx = tx::begin(&self.pool).await?;
            // Locked until the delete below; a key one of them held moves on.
            let dead: Vec<EventId> = q(&self.sql.ops.dl_dead_of)
                .bind(&raw)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(|r| r.try_get::<Uuid, _>(0).map(EventId))
                .collect::<std::result::Result<_, _>>()?;
            let key_ops = super::keys::keys_of(&mut tx, &self.sql, &dead)
                .await?
                .into_iter()
                .map(|(key, id)| (key, id, KeyOp::Leave))
                .collect();
            super::keys::apply(&mut tx, &self.sql, &self.channel, key_ops, now.as_millis()).await?;
            q(&self.sql.ops.dl_delete_many)
                .bind(&raw)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(u64::try_from(dead.len()).unwrap_or(u64::MAX))
        })
        .await
    }
}

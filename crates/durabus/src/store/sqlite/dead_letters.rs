//! Dead-letter records on SQLite: written with the outcome that dead-letters an event (in
//! `row_writes.rs`), read, selected, and acted on in batches, each record under
//! [`crate::dlq::apply`] inside one writer transaction.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::dead_letter_rows::{dead_letter_from_row, json, summary_from_row};
use super::dead_letter_writes::{apply_action, delete_dead_event};
use super::op::WriteOp;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::dlq::{DeadLetter, DeadLetterFilter, DeadLetterGroup, DeadLetterSummary, Keyset};
use crate::error::{ErrorKind, Result};
use crate::event::EventId;
use crate::store::{ActBatch, ActReport, DeadLetterStore};

fn ids(conn: &Connection, text: &str, args: impl rusqlite::Params) -> Result<Vec<EventId>> {
    let raw: Vec<String> = conn
        .prepare_cached(text)?
        .query_map(args, |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    raw.iter().map(|s| s.parse()).collect()
}

fn limit_of(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A batch of actions, and the chunk of a bulk operation it is, in one writer transaction.
struct Act(ActBatch);

/// The report, and whether events may have become due (sent back, or behind a key that moved
/// on).
struct Acted(ActReport, bool);

impl WriteOp for Act {
    type Reply = Acted;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Acted> {
        let b = &self.0;
        let mut report = ActReport {
            applied: 0,
            skipped: Vec::new(),
            operation: None,
            after: Vec::new(),
        };
        let mut requeued = false;
        for (i, id) in b.ids.iter().enumerate() {
            if b.chunk.is_some() && i == b.ids.len() / 2 {
                crate::fail_point!("bulk.chunk");
            }
            let filter = b.still_matching.as_ref();
            match apply_action(conn, sql, *id, &b.action, &b.actor, filter, now) {
                Ok(sent) => {
                    report.applied += 1;
                    requeued |= sent;
                    if b.read_back
                        && let Some(d) = conn
                            .prepare_cached(&sql.dl_get)?
                            .query_row([id.to_string()], dead_letter_from_row)
                            .optional()?
                    {
                        report.after.push(d);
                    }
                }
                Err(e) if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::NotFound) => {
                    report.skipped.push((*id, e));
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(chunk) = &b.chunk {
            let mut advance = chunk.advance.clone();
            advance.processed = report.applied;
            advance.skipped = report.skipped.len() as u64;
            report.operation = Some(super::operations::write_advance(
                conn,
                sql,
                &chunk.operation,
                &chunk.holder,
                &advance,
                now.plus(chunk.lease),
                now,
            )?);
        }
        Ok(Acted(report, requeued))
    }

    fn wakes(&self, reply: &Acted) -> bool {
        reply.1
    }
}

/// Deletes events that are still dead (those without a record).
struct DeleteDead(Vec<EventId>);

impl WriteOp for DeleteDead {
    /// How many were deleted, and whether the next event of a key one held became due.
    type Reply = (u64, bool);

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Self::Reply> {
        let (mut n, mut woke) = (0, false);
        for id in &self.0 {
            woke |= super::keys::leave_if_dead(
                &mut super::prepared::Prepared::new(conn),
                sql,
                *id,
                now,
            )?;
            n += u64::from(delete_dead_event(conn, sql, *id)?);
        }
        Ok((n, woke))
    }

    fn wakes(&self, reply: &Self::Reply) -> bool {
        reply.1
    }
}

#[async_trait]
impl DeadLetterStore for SqliteStore {
    async fn dlq_list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<Vec<DeadLetter>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let (text, args) = sql.dl_list(&filter, &page);
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
            let (text, args) = sql.dl_list_summaries(&filter, &page);
            c.prepare_cached(&text)?
                .query_map(rusqlite::params_from_iter(args), summary_from_row)?
                .collect()
        })
        .await
    }

    async fn dlq_get(&self, event_id: EventId) -> Result<Option<DeadLetter>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.dl_get)?
                .query_row([event_id.to_string()], dead_letter_from_row)
                .optional()
        })
        .await
    }

    async fn dlq_count(&self, filter: DeadLetterFilter, bound: Option<i64>) -> Result<u64> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let (text, args) = sql.dl_count(&filter, bound);
            c.prepare_cached(&text)?
                .query_row(rusqlite::params_from_iter(args), |r| r.get(0))
        })
        .await
    }

    async fn dlq_max_seq(&self) -> Result<i64> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.dl_max_seq)?
                .query_row([], |r| r.get(0))
        })
        .await
    }

    async fn dlq_groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.groups)?
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

    async fn dlq_group_buckets(
        &self,
        fingerprints: &[String],
        since: Timestamp,
        bucket_ms: i64,
    ) -> Result<Vec<(String, i64, u64)>> {
        let sql = self.sql.clone();
        let list = serde_json::to_string(fingerprints)
            .map_err(|e| crate::error::Error::Internal(format!("a list of groups: {e}")))?;
        self.read(move |c| {
            c.prepare_cached(&sql.group_buckets)?
                .query_map(params![list, since.as_millis(), bucket_ms], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                    ))
                })?
                .collect()
        })
        .await
    }

    async fn dlq_auto_retry_due(&self, now: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        let sql = self.sql.clone();
        self.read_ids(move |c| {
            ids(
                c,
                &sql.dl_auto_due,
                params![now.as_millis(), limit_of(limit)],
            )
        })
        .await
    }

    async fn dlq_closed_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        let sql = self.sql.clone();
        self.read_ids(move |c| {
            ids(
                c,
                &sql.dl_closed_before,
                params![cutoff.as_millis(), limit_of(limit)],
            )
        })
        .await
    }

    async fn dlq_dead_before(&self, cutoff: Timestamp, limit: usize) -> Result<Vec<EventId>> {
        let sql = self.sql.clone();
        self.read_ids(move |c| {
            ids(
                c,
                &sql.dl_dead_before,
                params![cutoff.as_millis(), limit_of(limit)],
            )
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
        let sql = self.sql.clone();
        let (text, args) = sql.dl_chunk(filter, after, bound, limit);
        let rows: Vec<(String, i64)> = self
            .read(move |c| {
                c.prepare_cached(&text)?
                    .query_map(rusqlite::params_from_iter(args), |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect()
            })
            .await?;
        rows.into_iter()
            .map(|(id, seq)| Ok((id.parse()?, seq)))
            .collect()
    }

    async fn dlq_act(&self, batch: ActBatch, now: Timestamp) -> Result<ActReport> {
        Ok(self.write(Act(batch), now).await?.0)
    }

    async fn dlq_delete_dead_events(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        Ok(self.write(DeleteDead(ids), now).await?.0)
    }
}

impl SqliteStore {
    /// Runs a read that returns ids (their parse errors become the store's).
    async fn read_ids(
        &self,
        f: impl FnOnce(&Connection) -> Result<Vec<EventId>> + Send + 'static,
    ) -> Result<Vec<EventId>> {
        self.read(move |c| Ok(f(c))).await?
    }
}

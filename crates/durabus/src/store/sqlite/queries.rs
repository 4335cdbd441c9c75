//! Reading events back on SQLite, and the history purge.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::{event_from_row, status_col};
use super::sql::{ListFilter, Sql};
use super::walk;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{Event, EventId};
use crate::replay::ReplaySelection;
use crate::store::{EventQuery, MinuteCount, Position, QueryStore, RetryCount, StatusCount};

struct PurgeHistory {
    cutoff: Timestamp,
    limit: usize,
}

impl WriteOp for PurgeHistory {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<u64> {
        // Dedup windows closed by the cutoff go with the history (they hold nothing back).
        conn.prepare_cached(&sql.dedup_purge)?
            .execute([self.cutoff.as_millis()])?;
        let rows: Vec<(i64, String, bool)> = conn
            .prepare_cached(&sql.history_purge)?
            .query_map(
                params![
                    self.cutoff.as_millis(),
                    i64::try_from(self.limit).unwrap_or(i64::MAX)
                ],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let mut delete = conn.prepare_cached(&sql.history_delete)?;
        let mut n = 0;
        for (rowid, id, shared) in rows {
            if shared {
                super::payloads::keep_shared(conn, sql, &id)?;
            }
            n += delete.execute([rowid])? as u64;
        }
        Ok(n)
    }
}

#[async_trait]
impl QueryStore for SqliteStore {
    async fn get_event(&self, id: EventId) -> Result<Option<Event>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.get_event)?
                .query_row([id.to_string()], event_from_row)
                .optional()
        })
        .await
    }

    async fn list_events(&self, q: EventQuery) -> Result<Vec<Event>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            let text = sql.list(ListFilter {
                status: q.status,
                by_type: q.event_type.is_some(),
                from: q.created_from.is_some(),
                until: q.created_before.is_some(),
                by_key: q.ordering_key.is_some(),
            });
            let mut args: Vec<rusqlite::types::Value> = Vec::with_capacity(5);
            if let Some(t) = q.event_type {
                args.push(t.into());
            }
            for bound in [q.created_from, q.created_before].into_iter().flatten() {
                args.push(bound.as_millis().into());
            }
            if let Some(k) = q.ordering_key {
                args.push(k.into());
            }
            args.push(i64::try_from(q.limit).unwrap_or(i64::MAX).into());
            args.push(i64::try_from(q.offset).unwrap_or(i64::MAX).into());
            c.prepare_cached(&text)?
                .query_map(rusqlite::params_from_iter(args), event_from_row)?
                .collect()
        })
        .await
    }

    async fn counts(&self) -> Result<Vec<StatusCount>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.counts)?
                .query_map([], |r| {
                    Ok(StatusCount {
                        event_type: r.get(0)?,
                        status: status_col(r, 1)?,
                        count: r.get(2)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn retry_counts(&self) -> Result<Vec<RetryCount>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.retry_counts)?
                .query_map([], |r| {
                    Ok(RetryCount {
                        status: status_col(r, 0)?,
                        retry_count: r.get(1)?,
                        count: r.get(2)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.write(PurgeHistory { cutoff, limit }, cutoff).await
    }

    async fn gauges(&self, now: Timestamp) -> Result<crate::store::StoreGauges> {
        self.read_gauges(now).await
    }

    async fn finished_per_minute(&self, since: Timestamp) -> Result<Vec<MinuteCount>> {
        let p = self.sql.prefix.clone();
        let from = since.as_millis().div_euclid(60_000) * 60_000;
        let (done, dead) = self
            .read(move |c| {
                let per_minute = |sql: String| -> rusqlite::Result<Vec<(i64, u64)>> {
                    c.prepare_cached(&sql)?
                        .query_map([from], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect()
                };
                Ok((
                    per_minute(format!(
                        "SELECT updated_at / 60000, count(*) FROM {p}events \
                         WHERE status = 'done' AND updated_at >= ?1 GROUP BY 1"
                    ))?,
                    per_minute(format!(
                        "SELECT created_at / 60000, count(*) FROM {p}dead_letters \
                         WHERE created_at >= ?1 GROUP BY 1"
                    ))?,
                ))
            })
            .await?;
        Ok(MinuteCount::merge(done, dead))
    }

    async fn walk_bound(&self, _now: Timestamp) -> Result<Position> {
        let prefix = self.sql.prefix.clone();
        let at = self.read(move |c| walk::bound(c, &prefix)).await?;
        Ok(Position {
            at,
            key: String::new(),
        })
    }

    async fn walk_count(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
    ) -> Result<Vec<(String, u64)>> {
        let (text, args) = walk::count_query(&self.sql.prefix, selection, bound.at)?;
        self.read(move |c| walk::count(c, &text, args)).await
    }

    async fn walk(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
        after: &Position,
        limit: usize,
    ) -> Result<Vec<(Position, Event)>> {
        let (text, args) = walk::page_query(&self.sql.prefix, selection, bound.at, after, limit)?;
        self.read(move |c| walk::page(c, &text, args)).await
    }
}

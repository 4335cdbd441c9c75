//! Reading events back on PostgreSQL (live table and event log), and the history purge.

use async_trait::async_trait;
use sqlx::Row;

use super::walk;
use super::{PgStore, q, rows};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{Event, EventId};
use crate::replay::ReplaySelection;
use crate::store::{EventQuery, MinuteCount, Position, QueryStore, RetryCount, StatusCount};

#[async_trait]
impl QueryStore for PgStore {
    async fn get_event(&self, id: EventId) -> Result<Option<Event>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.get_event)
                .bind(id.0)
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?
                .as_ref()
                .map(rows::event)
                .transpose()
        })
        .await
    }

    async fn list_events(&self, query: EventQuery) -> Result<Vec<Event>> {
        self.noted(async {
            self.check()?;
            let text = self.sql.list(&query);
            let mut stmt = q(&text);
            if let Some(t) = query.event_type {
                stmt = stmt.bind(t);
            }
            for bound in [query.created_from, query.created_before]
                .into_iter()
                .flatten()
            {
                stmt = stmt.bind(bound.as_millis());
            }
            if let Some(k) = query.ordering_key {
                stmt = stmt.bind(k);
            }
            stmt.bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
                .bind(i64::try_from(query.offset).unwrap_or(i64::MAX))
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(rows::event)
                .collect()
        })
        .await
    }

    async fn counts(&self) -> Result<Vec<StatusCount>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.counts)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok(StatusCount {
                        event_type: r.try_get(0)?,
                        status: r.try_get::<String, _>(1)?.parse()?,
                        count: u64::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
                    })
                })
                .collect()
        })
        .await
    }

    async fn retry_counts(&self) -> Result<Vec<RetryCount>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.retry_counts)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok(RetryCount {
                        status: r.try_get::<String, _>(0)?.parse()?,
                        retry_count: u32::try_from(r.try_get::<i32, _>(1)?).unwrap_or(0),
                        count: u64::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
                    })
                })
                .collect()
        })
        .await
    }

    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.noted(async {
            self.check()?;
            // Dedup windows closed by the cutoff go with the history (they hold nothing back).
            q(&self.sql.dedup_purge)
                .bind(cutoff.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(q(&self.sql.history_purge)
                .bind(cutoff.as_millis())
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected())
        })
        .await
    }

    async fn gauges(&self, now: Timestamp) -> Result<crate::store::StoreGauges> {
        self.noted(async { self.read_gauges(now).await }).await
    }

    async fn finished_per_minute(&self, since: Timestamp) -> Result<Vec<MinuteCount>> {
        self.noted(async {
            self.check()?;
            let s = &self.sql.schema;
            let from = since.as_millis().div_euclid(60_000) * 60_000;
            let per_minute = async |sql: String| -> Result<Vec<(i64, u64)>> {
                let rows = q(&sql)
                    .bind(from)
                    .fetch_all(&mut *self.pool.acquire().await?)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let n: i64 = r.try_get(1)?;
                        Ok((r.try_get(0)?, u64::try_from(n).unwrap_or(0)))
                    })
                    .collect()
            };
            let done = per_minute(format!(
                "SELECT (updated_at / 60000)::bigint, count(*) FROM {s}.event_log \
                 WHERE status = 'done' AND updated_at >= $1 GROUP BY 1"
            ))
            .await?;
            let dead = per_minute(format!(
                "SELECT (created_at / 60000)::bigint, count(*) FROM {s}.dead_letters \
                 WHERE created_at >= $1 GROUP BY 1"
            ))
            .await?;
            Ok(MinuteCount::merge(done, dead))
        })
        .await
    }

    async fn walk_bound(&self, now: Timestamp) -> Result<Position> {
        self.noted(async {
            self.check()?;
            let row = q(&walk::bound(&self.sql.schema))
                .bind(now.as_millis())
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?;
            Ok(match row {
                Some(r) => Position {
                    at: r.try_get("created_at")?,
                    key: r.try_get::<uuid::Uuid, _>("id")?.to_string(),
                },
                None => Position::default(),
            })
        })
        .await
    }

    async fn walk_count(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
    ) -> Result<Vec<(String, u64)>> {
        self.noted(async {
            self.check()?;
            walk::count(&self.sql.schema, selection, bound)
                .query()
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get::<String, _>("type")?,
                        u64::try_from(r.try_get::<i64, _>("n")?).unwrap_or(0),
                    ))
                })
                .collect()
        })
        .await
    }

    async fn walk(
        &self,
        selection: &ReplaySelection,
        bound: &Position,
        after: &Position,
        limit: usize,
    ) -> Result<Vec<(Position, Event)>> {
        self.noted(async {
            self.check()?;
            walk::page(&self.sql.schema, selection, bound, after, limit)
                .query()
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    let event = rows::event(r)?;
                    Ok((
                        Position {
                            at: event.created_at.as_millis(),
                            key: event.id.to_string(),
                        },
                        event,
                    ))
                })
                .collect()
        })
        .await
    }
}

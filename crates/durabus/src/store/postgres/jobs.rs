//! Scheduled jobs' bookkeeping on PostgreSQL: each tick once across every worker process.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;

use super::{PgStore, q};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::{JobRow, JobStart, JobStore};

#[async_trait]
impl JobStore for PgStore {
    async fn job_begin(
        &self,
        name: &str,
        tick: Option<Timestamp>,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<JobStart> {
        self.noted(async {
            self.check()?;
            let ops = &self.sql.ops;
            q(&ops.job_ensure)
                .bind(name)
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            let until = now.plus(ttl).as_millis();
            let Some(tick) = tick else {
                let n = q(&ops.job_begin_now)
                    .bind(name)
                    .bind(holder)
                    .bind(until)
                    .bind(now.as_millis())
                    .execute(&mut *self.pool.acquire().await?)
                    .await?
                    .rows_affected();
                return Ok(if n == 1 {
                    JobStart::Started
                } else {
                    JobStart::Busy
                });
            };
            // One statement decides: of the processes racing for this tick, one updates the row.
            let n = q(&ops.job_begin_tick)
                .bind(name)
                .bind(tick.as_millis())
                .bind(holder)
                .bind(until)
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected();
            if n == 1 {
                return Ok(JobStart::Started);
            }
            let skipped = q(&ops.job_skip_tick)
                .bind(name)
                .bind(tick.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected();
            Ok(if skipped == 1 {
                JobStart::Busy
            } else {
                JobStart::AlreadyRan
            })
        })
        .await
    }

    async fn job_end(
        &self,
        name: &str,
        holder: &str,
        status: &str,
        message: &str,
        now: Timestamp,
    ) -> Result<()> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.job_end)
                .bind(name)
                .bind(holder)
                .bind(status)
                .bind(message)
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn job_list(&self) -> Result<Vec<JobRow>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.jobs)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok(JobRow {
                        name: r.try_get("name")?,
                        last_tick: r.try_get::<Option<i64>, _>("last_tick")?.map(Timestamp),
                        running_by: r.try_get("holder")?,
                        last_started_at: r
                            .try_get::<Option<i64>, _>("last_started_at")?
                            .map(Timestamp),
                        last_finished_at: r
                            .try_get::<Option<i64>, _>("last_finished_at")?
                            .map(Timestamp),
                        last_status: r.try_get("last_status")?,
                        last_message: r.try_get("last_message")?,
                        runs: u64::try_from(r.try_get::<i64, _>("runs")?).unwrap_or(0),
                        skipped: u64::try_from(r.try_get::<i64, _>("skipped")?).unwrap_or(0),
                    })
                })
                .collect()
        })
        .await
    }

    async fn stats_get(&self) -> Result<Option<String>> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.ops.stats_get)
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?
                .map(|r| r.try_get::<String, _>(0))
                .transpose()?)
        })
        .await
    }

    async fn stats_put(&self, snapshot: &str) -> Result<()> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.stats_put)
                .bind(snapshot)
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }
}

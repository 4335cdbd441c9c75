//! Breakers across processes on PostgreSQL (see [`crate::breaker::report`]).

use async_trait::async_trait;
use sqlx::Row;

use super::{PgStore, q};
use crate::breaker::BreakerState;
use crate::breaker::report::{BreakerReport, ProbeTake, SharedBreaker};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::store::BreakerStore;

impl PgStore {
    /// `template` on this store's schema (`{s}`).
    fn breaker_sql(&self, template: &str) -> String {
        template.replace("{s}", &self.sql.schema)
    }
}

#[async_trait]
impl BreakerStore for PgStore {
    async fn breaker_report(
        &self,
        reports: Vec<BreakerReport>,
        stale_before: Timestamp,
    ) -> Result<()> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            let put = self.breaker_sql(
                "INSERT INTO {s}.breaker_reports
                     (subscription, process, state, failure_rate, samples, opened_at, reported_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (subscription, process) DO UPDATE SET state = excluded.state,
                     failure_rate = excluded.failure_rate, samples = excluded.samples,
                     opened_at = excluded.opened_at, reported_at = excluded.reported_at",
            );
            for r in &reports {
                q(&put)
                    .bind(&r.subscription)
                    .bind(&r.process)
                    .bind(r.state.as_str())
                    .bind(r.failure_rate)
                    .bind(i32::try_from(r.samples).unwrap_or(i32::MAX))
                    .bind(r.opened_at.map(Timestamp::as_millis))
                    .bind(r.reported_at.as_millis())
                    .execute(&mut *conn)
                    .await?;
            }
            q(&self.breaker_sql("DELETE FROM {s}.breaker_reports WHERE reported_at < $1"))
                .bind(stale_before.as_millis())
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
        .await
    }

    async fn breaker_reports(&self, since: Timestamp) -> Result<Vec<BreakerReport>> {
        self.noted(async {
            self.check()?;
            let rows = q(&self.breaker_sql(
                "SELECT subscription, process, state, failure_rate, samples, opened_at, reported_at
                 FROM {s}.breaker_reports WHERE reported_at >= $1 ORDER BY subscription, process",
            ))
            .bind(since.as_millis())
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?;
            rows.iter()
                .map(|r| {
                    let state: String = r.try_get("state")?;
                    Ok(BreakerReport {
                        subscription: r.try_get("subscription")?,
                        process: r.try_get("process")?,
                        state: BreakerState::parse(&state).ok_or_else(|| {
                            Error::Internal(format!("unknown breaker state {state:?}"))
                        })?,
                        failure_rate: r.try_get("failure_rate")?,
                        samples: u32::try_from(r.try_get::<i32, _>("samples")?).unwrap_or(0),
                        opened_at: r.try_get::<Option<i64>, _>("opened_at")?.map(Timestamp),
                        reported_at: Timestamp(r.try_get("reported_at")?),
                    })
                })
                .collect()
        })
        .await
    }

    async fn breaker_shared(&self) -> Result<Vec<SharedBreaker>> {
        self.noted(async {
            self.check()?;
            let rows = q(&self.breaker_sql(
                "SELECT subscription, opened_at, opened_by, probe_holder, probe_until
                 FROM {s}.shared_breakers ORDER BY subscription",
            ))
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?;
            rows.iter()
                .map(|r| {
                    let holder: Option<String> = r.try_get("probe_holder")?;
                    let until: Option<i64> = r.try_get("probe_until")?;
                    Ok(SharedBreaker {
                        subscription: r.try_get("subscription")?,
                        opened_at: Timestamp(r.try_get("opened_at")?),
                        opened_by: r.try_get("opened_by")?,
                        probe: holder.zip(until.map(Timestamp)),
                    })
                })
                .collect()
        })
        .await
    }

    async fn breaker_share_open(
        &self,
        subscription: &str,
        process: &str,
        opened_at: Timestamp,
    ) -> Result<()> {
        self.noted(async {
            self.check()?;
            q(&self.breaker_sql(
                "INSERT INTO {s}.shared_breakers AS b (subscription, opened_at, opened_by)
                 VALUES ($1, $2, $3)
                 ON CONFLICT (subscription) DO UPDATE SET opened_at = excluded.opened_at,
                     opened_by = excluded.opened_by, probe_holder = NULL, probe_until = NULL
                 WHERE excluded.opened_at >= b.opened_at",
            ))
            .bind(subscription)
            .bind(opened_at.as_millis())
            .bind(process)
            .execute(&mut *self.pool.acquire().await?)
            .await?;
            Ok(())
        })
        .await
    }

    async fn breaker_share_probe(
        &self,
        subscription: &str,
        process: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<ProbeTake> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            let taken = q(&self.breaker_sql(
                "UPDATE {s}.shared_breakers SET probe_holder = $2, probe_until = $4
                 WHERE subscription = $1
                     AND (probe_holder IS NULL OR probe_holder = $2 OR probe_until <= $3)
                 RETURNING 1",
            ))
            .bind(subscription)
            .bind(process)
            .bind(now.as_millis())
            .bind(until.as_millis())
            .fetch_optional(&mut *conn)
            .await?;
            if taken.is_some() {
                return Ok(ProbeTake::Granted);
            }
            let open =
                q(&self.breaker_sql("SELECT 1 FROM {s}.shared_breakers WHERE subscription = $1"))
                    .bind(subscription)
                    .fetch_optional(&mut *conn)
                    .await?;
            Ok(if open.is_some() {
                ProbeTake::Busy
            } else {
                ProbeTake::Closed
            })
        })
        .await
    }

    async fn breaker_share_close(&self, subscription: &str) -> Result<()> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            q(&self.breaker_sql("DELETE FROM {s}.shared_breakers WHERE subscription = $1"))
                .bind(subscription)
                .execute(&mut *conn)
                .await?;
            // Events deferred by the breaker in other processes may be due again.
            q("SELECT pg_notify($1, '')")
                .bind(&self.channel)
                .execute(&mut *conn)
                .await?;
            Ok(())
        })
        .await
    }
}

//! Breakers across processes on SQLite (see [`crate::breaker::report`]).

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::breaker::BreakerState;
use crate::breaker::report::{BreakerReport, ProbeTake, SharedBreaker};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::BreakerStore;

/// `template` on this store's tables.
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix)
}

fn report(r: &Row<'_>) -> rusqlite::Result<BreakerReport> {
    let state: String = r.get(2)?;
    Ok(BreakerReport {
        subscription: r.get(0)?,
        process: r.get(1)?,
        state: BreakerState::parse(&state)
            .ok_or_else(|| corrupt(2, format!("unknown breaker state {state:?}")))?,
        failure_rate: r.get(3)?,
        samples: r.get(4)?,
        opened_at: r.get::<_, Option<i64>>(5)?.map(Timestamp),
        reported_at: Timestamp(r.get(6)?),
    })
}

struct Report(Vec<BreakerReport>, Timestamp);

impl WriteOp for Report {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        let mut put = conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}breaker_reports
                 (subscription, process, state, failure_rate, samples, opened_at, reported_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (subscription, process) DO UPDATE SET state = excluded.state,
                 failure_rate = excluded.failure_rate, samples = excluded.samples,
                 opened_at = excluded.opened_at, reported_at = excluded.reported_at",
        ))?;
        for r in &self.0 {
            put.execute(params![
                r.subscription,
                r.process,
                r.state.as_str(),
                r.failure_rate,
                r.samples,
                r.opened_at.map(Timestamp::as_millis),
                r.reported_at.as_millis()
            ])?;
        }
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}breaker_reports WHERE reported_at < ?1",
        ))?
        .execute([self.1.as_millis()])?;
        Ok(())
    }
}

struct ShareOpen {
    subscription: String,
    process: String,
    opened_at: Timestamp,
}

impl WriteOp for ShareOpen {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}shared_breakers (subscription, opened_at, opened_by) VALUES (?1, ?2, ?3)
             ON CONFLICT (subscription) DO UPDATE SET opened_at = excluded.opened_at,
                 opened_by = excluded.opened_by, probe_holder = NULL, probe_until = NULL
             WHERE excluded.opened_at >= opened_at",
        ))?
        .execute(params![
            self.subscription,
            self.opened_at.as_millis(),
            self.process
        ])?;
        Ok(())
    }
}

struct ShareProbe {
    subscription: String,
    process: String,
    until: Timestamp,
}

impl WriteOp for ShareProbe {
    type Reply = ProbeTake;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<ProbeTake> {
        let row: Option<(Option<String>, Option<i64>)> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT probe_holder, probe_until FROM {p}shared_breakers WHERE subscription = ?1",
            ))?
            .query_row([&self.subscription], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((holder, until)) = row else {
            return Ok(ProbeTake::Closed);
        };
        let free = holder.as_deref().is_none_or(|h| h == self.process)
            || until.is_none_or(|u| u <= now.as_millis());
        if !free {
            return Ok(ProbeTake::Busy);
        }
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}shared_breakers SET probe_holder = ?2, probe_until = ?3 WHERE subscription = ?1",
        ))?
        .execute(params![
            self.subscription,
            self.process,
            self.until.as_millis()
        ])?;
        Ok(ProbeTake::Granted)
    }
}

struct ShareClose(String);

impl WriteOp for ShareClose {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}shared_breakers WHERE subscription = ?1",
        ))?
        .execute([&self.0])?;
        Ok(())
    }

    fn wakes(&self, _: &()) -> bool {
        // Events deferred by the breaker may be due again.
        true
    }
}

#[async_trait]
impl BreakerStore for SqliteStore {
    async fn breaker_report(
        &self,
        reports: Vec<BreakerReport>,
        stale_before: Timestamp,
    ) -> Result<()> {
        self.write(Report(reports, stale_before), stale_before)
            .await
    }

    async fn breaker_reports(&self, since: Timestamp) -> Result<Vec<BreakerReport>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&stmt(
                &sql,
                "SELECT subscription, process, state, failure_rate, samples, opened_at, reported_at
                 FROM {p}breaker_reports WHERE reported_at >= ?1 ORDER BY subscription, process",
            ))?
            .query_map([since.as_millis()], report)?
            .collect()
        })
        .await
    }

    async fn breaker_shared(&self) -> Result<Vec<SharedBreaker>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&stmt(
                &sql,
                "SELECT subscription, opened_at, opened_by, probe_holder, probe_until
                 FROM {p}shared_breakers ORDER BY subscription",
            ))?
            .query_map([], |r| {
                let holder: Option<String> = r.get(3)?;
                let until: Option<i64> = r.get(4)?;
                Ok(SharedBreaker {
                    subscription: r.get(0)?,
                    opened_at: Timestamp(r.get(1)?),
                    opened_by: r.get(2)?,
                    probe: holder.zip(until.map(Timestamp)),
                })
            })?
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
        let op = ShareOpen {
            subscription: subscription.to_owned(),
            process: process.to_owned(),
            opened_at,
        };
        self.write(op, opened_at).await
    }

    async fn breaker_share_probe(
        &self,
        subscription: &str,
        process: &str,
        now: Timestamp,
        until: Timestamp,
    ) -> Result<ProbeTake> {
        let op = ShareProbe {
            subscription: subscription.to_owned(),
            process: process.to_owned(),
            until,
        };
        self.write(op, now).await
    }

    async fn breaker_share_close(&self, subscription: &str) -> Result<()> {
        self.write(ShareClose(subscription.to_owned()), Timestamp(0))
            .await
    }
}

//! Scheduled jobs' bookkeeping on SQLite.

use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::{JobRow, JobStart, JobStore};

struct Begin {
    name: String,
    tick: Option<Timestamp>,
    holder: String,
    ttl: Duration,
}

impl WriteOp for Begin {
    type Reply = JobStart;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<JobStart> {
        let ops = sql;
        conn.prepare_cached(&ops.job_ensure)?
            .execute([&self.name])?;
        let until = now.plus(self.ttl).as_millis();
        let Some(tick) = self.tick else {
            let n = conn.prepare_cached(&ops.job_begin_now)?.execute(params![
                self.name,
                self.holder,
                until,
                now.as_millis()
            ])?;
            return Ok(if n == 1 {
                JobStart::Started
            } else {
                JobStart::Busy
            });
        };
        let n = conn.prepare_cached(&ops.job_begin_tick)?.execute(params![
            self.name,
            tick.as_millis(),
            self.holder,
            until,
            now.as_millis()
        ])?;
        if n == 1 {
            return Ok(JobStart::Started);
        }
        // Not started: either this tick ran already, or a run is still going (then the tick
        // is skipped, and counted once).
        let skipped = conn
            .prepare_cached(&ops.job_skip_tick)?
            .execute(params![self.name, tick.as_millis()])?;
        Ok(if skipped == 1 {
            JobStart::Busy
        } else {
            JobStart::AlreadyRan
        })
    }
}

struct End {
    name: String,
    holder: String,
    status: String,
    message: String,
}

impl WriteOp for End {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<()> {
        conn.prepare_cached(&sql.job_end)?.execute(params![
            self.name,
            self.holder,
            self.status,
            self.message,
            now.as_millis()
        ])?;
        Ok(())
    }
}

struct PutStats(String);

impl WriteOp for PutStats {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        conn.prepare_cached(&sql.stats_put)?.execute([&self.0])?;
        Ok(())
    }
}

#[async_trait]
impl JobStore for SqliteStore {
    async fn job_begin(
        &self,
        name: &str,
        tick: Option<Timestamp>,
        holder: &str,
        ttl: Duration,
        now: Timestamp,
    ) -> Result<JobStart> {
        self.write(
            Begin {
                name: name.to_owned(),
                tick,
                holder: holder.to_owned(),
                ttl,
            },
            now,
        )
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
        self.write(
            End {
                name: name.to_owned(),
                holder: holder.to_owned(),
                status: status.to_owned(),
                message: message.to_owned(),
            },
            now,
        )
        .await
    }

    async fn job_list(&self) -> Result<Vec<JobRow>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.jobs)?
                .query_map([], |r| {
                    Ok(JobRow {
                        name: r.get(0)?,
                        last_tick: r.get::<_, Option<i64>>(1)?.map(Timestamp),
                        running_by: r.get(2)?,
                        last_started_at: r.get::<_, Option<i64>>(3)?.map(Timestamp),
                        last_finished_at: r.get::<_, Option<i64>>(4)?.map(Timestamp),
                        last_status: r.get(5)?,
                        last_message: r.get(6)?,
                        runs: r.get(7)?,
                        skipped: r.get(8)?,
                    })
                })?
                .collect()
        })
        .await
    }

    async fn stats_get(&self) -> Result<Option<String>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            use rusqlite::OptionalExtension;
            c.prepare_cached(&sql.stats_get)?
                .query_row([], |r| r.get(0))
                .optional()
        })
        .await
    }

    async fn stats_put(&self, snapshot: &str) -> Result<()> {
        self.write(PutStats(snapshot.to_owned()), crate::clock::Timestamp(0))
            .await
    }
}

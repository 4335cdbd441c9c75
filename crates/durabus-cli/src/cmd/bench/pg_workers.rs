//! The worker processes of the PostgreSQL bench (`durabus bench-worker`), and how the bench
//! waits for their work to land in the event log.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use durabus::sqlx::{self, AssertSqlSafe, Row};

use crate::cmd::Db;

/// Worker processes of the bench, stopped (stdin closed, then waited for) on drop.
pub struct Workers {
    children: Vec<Child>,
    pub reports: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Workers {
    /// Starts `n` `durabus bench-worker` processes on `db` and waits until each is ready.
    pub fn start(db: &Db, n: usize, extra: &[&str]) -> anyhow::Result<Workers> {
        let exe = std::env::current_exe().context("cannot find the durabus binary")?;
        let dir = tempfile::tempdir()?;
        let mut children = Vec::with_capacity(n);
        let mut reports = Vec::with_capacity(n);
        for k in 0..n {
            let report = dir.path().join(format!("worker-{k}.txt"));
            let mut child = Command::new(&exe)
                .args([
                    "--db",
                    &db.target,
                    "--schema",
                    &db.schema,
                    "bench-worker",
                    "--report",
                ])
                .arg(&report)
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .context("cannot start a bench-worker process")?;
            let stdout = child.stdout.take().context("no stdout from the worker")?;
            let mut line = String::new();
            BufReader::new(stdout).read_line(&mut line)?;
            anyhow::ensure!(line.trim() == "ready", "worker {k} did not start: {line:?}");
            children.push(child);
            reports.push(report);
        }
        Ok(Workers {
            children,
            reports,
            _dir: dir,
        })
    }

    /// Closes every worker's stdin and waits for it to shut down.
    pub fn stop(&mut self) -> anyhow::Result<()> {
        for c in &mut self.children {
            drop(c.stdin.take());
        }
        for c in &mut self.children {
            let status = c.wait()?;
            anyhow::ensure!(status.success(), "a worker exited with {status}");
        }
        self.children.clear();
        Ok(())
    }

    /// Every report line: (event id, latency µs if the event carried a send time).
    pub fn handled(&self) -> anyhow::Result<Vec<(String, Option<f64>)>> {
        let mut out = Vec::new();
        for path in &self.reports {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            for line in text.lines() {
                let mut parts = line.split(' ');
                let id = parts.next().unwrap_or_default().to_owned();
                let latency = parts.next().and_then(|l| l.parse::<f64>().ok());
                out.push((id, latency));
            }
        }
        Ok(out)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Events in the event log of `db` (completed).
pub async fn completed(pool: &sqlx::PgPool, db: &Db) -> anyhow::Result<i64> {
    Ok(sqlx::query(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".event_log",
        db.schema
    )))
    .fetch_one(pool)
    .await?
    .try_get(0)?)
}

/// Whether any event of `db` still waits or runs (pending, processing or scheduled): three
/// lookups in the statuses' partial indexes, however long the event log has grown.
async fn any_live(pool: &sqlx::PgPool, db: &Db) -> anyhow::Result<bool> {
    let s = &db.schema;
    Ok(sqlx::query(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM \"{s}\".events WHERE status = 'pending')
             OR EXISTS (SELECT 1 FROM \"{s}\".events WHERE status = 'processing')
             OR EXISTS (SELECT 1 FROM \"{s}\".events WHERE status = 'scheduled')"
    )))
    .fetch_one(pool)
    .await?
    .try_get(0)?)
}

/// Waits until `n` events are in the event log, for at most `limit`; call it once every
/// event is published. It polls whether any event still waits or runs, and counts the log
/// only when none does: counting a log of 100,000 rows every 10 ms took a third of a core
/// from the server the workers share it with, on a two-core machine.
pub async fn wait_completed(
    pool: &sqlx::PgPool,
    db: &Db,
    n: i64,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if !any_live(pool, db).await? && completed(pool, db).await? >= n {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not all {n} events completed within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// What a run through the worker processes showed.
pub struct EndToEnd {
    /// Events per second through the workers (0 where not measured).
    pub eps: f64,
    /// Handler calls beyond the first for one event.
    pub doubles: u64,
    /// Events never handled.
    pub lost: u64,
    /// The latencies the workers recorded (µs).
    pub latencies_us: Vec<f64>,
}

/// The publishing bus (which creates the schema before the workers start), a one-connection
/// pool for counting completed events, and `workers` worker processes.
pub async fn publisher_and_workers(
    db: &Db,
    workers: usize,
) -> anyhow::Result<(durabus::EventBus, sqlx::PgPool, Workers)> {
    let bus = db.builder().build().await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.target)
        .await?;
    let workers = Workers::start(db, workers, &[])?;
    Ok((bus, pool, workers))
}

/// Double and missing deliveries of `total` events, from the workers' reports, with the
/// latencies they recorded.
pub fn tally(workers: &Workers, total: u64) -> anyhow::Result<EndToEnd> {
    let handled = workers.handled()?;
    let mut calls: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
    for (id, _) in &handled {
        *calls.entry(id.as_str()).or_default() += 1;
    }
    Ok(EndToEnd {
        eps: 0.0,
        doubles: calls.values().map(|c| c - 1).sum(),
        lost: total.saturating_sub(calls.len() as u64),
        latencies_us: handled.iter().filter_map(|(_, l)| *l).collect(),
    })
}

/// A fresh schema on the same database as `db`, for one measurement.
pub fn fresh(db: &Db) -> Db {
    Db {
        schema: format!("bench_{}", durabus::EventId::new().0.simple()),
        ..db.clone()
    }
}

/// Drops the schema of `db` with everything in it.
pub async fn drop_schema(db: &Db) -> anyhow::Result<()> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.target)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
        db.schema
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(())
}

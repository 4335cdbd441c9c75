//! The in-process scheduler: maintenance jobs on cron expressions (croner), in UTC.
//!
//! | job | default schedule | what it does |
//! |---|---|---|
//! | `dead-letter-auto-retry` | `*/15 * * * *` | retries pending dead letters whose next auto retry is due |
//! | `cleanup-dead-letters` | `0 3 * * *` | deletes resolved and abandoned records (and their dead events) last changed more than 30 days ago |
//! | `cleanup-history` | `0 3 * * *` | deletes `done` events completed more than 30 days ago |
//! | `cleanup-payloads` | `0 3 * * *` | deletes payload snapshots past their type's retention (14 days by default), and soft-deleted snapshots' audit rows after the dead-letter retention |
//! | `refresh-stats` | `*/5 * * * *` | counts events by type, status and retry count (a read of every event) and keeps the result as the [`StatsSnapshot`](crate::StatsSnapshot) that the admin API and `durabus stats` show |
//!
//! Each tick of a job runs once across every process on the database (the store decides which
//! process takes it); a tick that comes while the previous run is still going is skipped, not
//! stacked. Time comes from the bus's clock, so tests drive the schedule with a
//! [`ManualClock`](crate::ManualClock).

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::clock::{Clock, Timestamp};
use crate::error::{Error, ErrorKind, Result};
use crate::history::History;
use crate::shutdown::Shutdown;
use crate::store::{JobRow, JobStart, Store};

/// How long a job run holds its lock before another process may take the job over.
const RUN_TTL: Duration = Duration::from_secs(15 * 60);

/// One job's schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConfig {
    /// A cron expression (five fields, UTC): minute, hour, day of month, month, day of week.
    pub schedule: String,
    /// Whether it runs on its schedule. `run_now` works either way.
    pub enabled: bool,
}

impl JobConfig {
    fn on(schedule: &str) -> JobConfig {
        JobConfig {
            schedule: schedule.to_owned(),
            enabled: true,
        }
    }
}

/// The scheduler's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Whether a started bus runs the scheduler. Defaults to `true`.
    pub enabled: bool,
    /// `dead-letter-auto-retry`. Defaults to every 15 minutes.
    pub auto_retry: JobConfig,
    /// `cleanup-dead-letters`. Defaults to daily at 03:00.
    pub dead_letter_cleanup: JobConfig,
    /// How long resolved and abandoned dead letters are kept after their last change.
    /// Defaults to 30 days.
    pub dead_letter_retention: Duration,
    /// `cleanup-history`. Defaults to daily at 03:00.
    pub history_cleanup: JobConfig,
    /// How long completed events are kept. Defaults to 30 days.
    pub history_retention: Duration,
    /// `cleanup-payloads`. Defaults to daily at 03:00. (Each type's retention is in its payload
    /// configuration; soft-deleted snapshots' audit rows are kept `dead_letter_retention`.)
    pub payload_cleanup: JobConfig,
    /// `refresh-stats`. Defaults to every 5 minutes. Each run reads every event (about 2 s
    /// at a million on either store), once across the processes on the database.
    pub stats_refresh: JobConfig,
}

impl SchedulerConfig {
    /// Checks every schedule: fails with [`Error::Invalid`] for one that is not a cron
    /// expression.
    pub fn validate(&self) -> Result<()> {
        for (name, c) in self.named() {
            parse(name, c)?;
        }
        Ok(())
    }

    fn named(&self) -> [(&'static str, &JobConfig); 5] {
        [
            (JOBS[0], &self.auto_retry),
            (JOBS[1], &self.dead_letter_cleanup),
            (JOBS[2], &self.history_cleanup),
            (JOBS[3], &self.payload_cleanup),
            (JOBS[4], &self.stats_refresh),
        ]
    }
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            enabled: true,
            auto_retry: JobConfig::on("*/15 * * * *"),
            dead_letter_cleanup: JobConfig::on("0 3 * * *"),
            dead_letter_retention: Duration::from_secs(30 * 86_400),
            history_cleanup: JobConfig::on("0 3 * * *"),
            history_retention: Duration::from_secs(30 * 86_400),
            payload_cleanup: JobConfig::on("0 3 * * *"),
            stats_refresh: JobConfig::on("*/5 * * * *"),
        }
    }
}

/// The jobs' names.
pub const JOBS: [&str; 5] = [
    "dead-letter-auto-retry",
    "cleanup-dead-letters",
    "cleanup-history",
    "cleanup-payloads",
    "refresh-stats",
];

/// A job as listed: its schedule and its last run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobInfo {
    /// Its name.
    pub name: String,
    /// Its cron expression.
    pub schedule: String,
    /// Whether it runs on its schedule.
    pub enabled: bool,
    /// When it runs next (if enabled).
    pub next_run: Option<Timestamp>,
    /// Its bookkeeping, if it ever ran.
    pub last: Option<JobRow>,
}

/// What one run did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobReport {
    /// The job.
    pub name: String,
    /// How it ended: `ok`, `failed`, or `skipped` (another run was going).
    pub status: String,
    /// What it did.
    pub message: String,
}

struct Job {
    name: &'static str,
    cron: croner::Cron,
    config: JobConfig,
}

fn parse(name: &str, config: &JobConfig) -> Result<croner::Cron> {
    croner::Cron::from_str(&config.schedule).map_err(|e| {
        Error::invalid(
            format!("jobs.{name}.schedule"),
            format!("{:?} is not a cron expression: {e}", config.schedule),
            "a cron expression of 5 or 6 fields, such as \"*/15 * * * *\"",
        )
    })
}

/// The time in chrono, to the second (cron has no finer field).
fn to_chrono(t: Timestamp) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp(t.as_millis().div_euclid(1000), 0)
}

fn from_chrono(t: chrono::DateTime<chrono::Utc>) -> Timestamp {
    Timestamp(t.timestamp_millis())
}

impl Job {
    fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        self.cron
            .find_next_occurrence(&to_chrono(t)?, false)
            .ok()
            .map(from_chrono)
    }
}

/// Runs the maintenance jobs on their schedules.
#[derive(Clone)]
pub struct Scheduler {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    config: SchedulerConfig,
    jobs: Arc<Vec<Job>>,
    holder: String,
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
    hook: crate::hook::ErrorHook,
}

impl std::fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Scheduler {
    /// A scheduler on `store` and `clock`. Fails with [`Error::Invalid`] for a schedule
    /// that is not a cron expression.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: SchedulerConfig,
    ) -> Result<Scheduler> {
        let jobs = config
            .named()
            .into_iter()
            .map(|(name, c)| {
                Ok(Job {
                    name,
                    cron: parse(name, c)?,
                    config: c.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Scheduler {
            store,
            clock,
            config,
            jobs: Arc::new(jobs),
            holder: crate::holder::worker_name(),
            telemetry: None,
            hook: crate::hook::ErrorHook::default(),
        })
    }

    /// Counts the dead letters the auto-retry job sends back in `telemetry` (a bus's metrics).
    pub(crate) fn observed(mut self, telemetry: Arc<crate::telemetry::Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Hands failed job runs to `hook` (a bus's error hook).
    pub(crate) fn hooked(mut self, hook: crate::hook::ErrorHook) -> Self {
        self.hook = hook;
        self
    }

    /// Every job with its schedule, next run and last run.
    pub async fn jobs(&self) -> Result<Vec<JobInfo>> {
        let rows = self.store.job_list().await?;
        let now = self.clock.now();
        Ok(self
            .jobs
            .iter()
            .map(|j| JobInfo {
                name: j.name.to_owned(),
                schedule: j.config.schedule.clone(),
                enabled: j.config.enabled,
                next_run: j.config.enabled.then(|| j.next_after(now)).flatten(),
                last: rows.iter().find(|r| r.name == j.name).cloned(),
            })
            .collect())
    }

    /// Runs job `name` now, outside its schedule. Fails with [`Error::NotFound`] for an
    /// unknown job; a run already going elsewhere gives a report with status `skipped`.
    pub async fn run_now(&self, name: &str) -> Result<JobReport> {
        let job = self
            .jobs
            .iter()
            .find(|j| j.name == name)
            .ok_or_else(|| Error::NotFound {
                what: format!("job {name:?} (jobs: {})", JOBS.join(", ")),
            })?;
        Ok(self.fire(job.name, None).await?.0)
    }

    /// Starts a run of `name` for `tick` (or by hand), runs it and records how it ended.
    /// Returns the report and the clock reading the run ended at (for a skipped run, the one
    /// it began at).
    async fn fire(
        &self,
        name: &'static str,
        tick: Option<Timestamp>,
    ) -> Result<(JobReport, Timestamp)> {
        let now = self.clock.now();
        let report = |status: &str, message: String| JobReport {
            name: name.to_owned(),
            status: status.to_owned(),
            message,
        };
        match self
            .store
            .job_begin(name, tick, &self.holder, RUN_TTL, now)
            .await?
        {
            JobStart::Started => {}
            JobStart::AlreadyRan => {
                return Ok((
                    report("skipped", "this tick ran in another process".into()),
                    now,
                ));
            }
            JobStart::Busy => {
                tracing::info!(job = name, "skipped: the previous run is still going");
                return Ok((
                    report("skipped", "the previous run is still going".into()),
                    now,
                ));
            }
        }
        // A tick's work is done as of the tick (a late run retries what was due at its tick,
        // not what came due since); a run by hand, as of now.
        let result = self.work(name, tick.unwrap_or(now)).await;
        let (status, message) = match &result {
            Ok(m) => ("ok", m.clone()),
            Err(e) => ("failed", e.to_string()),
        };
        let ended = self.clock.now();
        if let Err(e) = self
            .store
            .job_end(name, &self.holder, status, &message, ended)
            .await
        {
            tracing::warn!(job = name, error = %e, "could not record the end of a job run");
        }
        match result {
            Ok(message) => {
                tracing::info!(job = name, %message, "job ran");
                Ok((report("ok", message), ended))
            }
            Err(e) => {
                tracing::error!(job = name, error = %e, "job failed");
                self.hook
                    .report(crate::hook::ErrorSource::Job(name.to_owned()), &e, false);
                Ok((report("failed", e.to_string()), ended))
            }
        }
    }

    /// The work of each job, as of `now`.
    async fn work(&self, name: &str, now: Timestamp) -> Result<String> {
        match name {
            "dead-letter-auto-retry" => {
                let n =
                    crate::dlq::rounds::auto_retry(&*self.store, now, self.telemetry.as_deref())
                        .await?;
                Ok(format!("{n} dead letter(s) retried"))
            }
            "cleanup-dead-letters" => {
                let cutoff = now.minus(self.config.dead_letter_retention);
                let n = crate::dlq::rounds::cleanup_closed(&*self.store, cutoff, now).await?;
                Ok(format!("{n} closed dead letter(s) deleted"))
            }
            "cleanup-history" => {
                let n = History::with_clock(self.store.clone(), self.clock.clone())
                    .purge_before(now.minus(self.config.history_retention))
                    .await?;
                Ok(format!("{n} completed event(s) deleted"))
            }
            "cleanup-payloads" => {
                let (expired, audits) =
                    crate::payload::Payloads::with_clock(self.store.clone(), self.clock.clone())
                        .cleanup(now, self.config.dead_letter_retention)
                        .await?;
                Ok(format!(
                    "{expired} expired snapshot(s) and {audits} deletion record(s) removed"
                ))
            }
            "refresh-stats" => {
                let s = crate::stats::StatsSnapshot::refresh(&*self.store, &*self.clock).await?;
                Ok(format!(
                    "statistics of {} event(s) computed in {} ms",
                    s.stats.total, s.took_ms
                ))
            }
            other => Err(Error::NotFound {
                what: format!("job {other:?}"),
            }),
        }
    }

    /// Runs the enabled jobs on their schedules until `shutdown`. When the clock has moved
    /// past several ticks of a job (a busy process, a run that outlasted its interval, a manual
    /// clock advanced by hours), the job runs once, for the latest of them.
    ///
    /// The schedule starts from the clock as this is called (as the bus starts), not as the
    /// task is first polled: a clock moved in between is a jump the loop sees.
    pub(crate) fn run(self, shutdown: Shutdown) -> impl Future<Output = ()> + Send + 'static {
        let start = self.clock.now();
        let jumps = self.clock.jumps();
        self.run_from(start, jumps, shutdown)
    }

    async fn run_from(
        self,
        start: Timestamp,
        mut jumps: Option<tokio::sync::watch::Receiver<i64>>,
        mut shutdown: Shutdown,
    ) {
        let enabled: Vec<&Job> = self.jobs.iter().filter(|j| j.config.enabled).collect();
        if enabled.is_empty() {
            return;
        }
        let mut next: Vec<Option<Timestamp>> =
            enabled.iter().map(|j| j.next_after(start)).collect();
        loop {
            let now = self.clock.now();
            for (job, due) in enabled.iter().zip(next.iter_mut()) {
                let Some(at) = *due else { continue };
                if at > now {
                    continue;
                }
                // The latest tick not after now: earlier missed ones are not run again.
                let tick = job
                    .cron
                    .find_previous_occurrence(&to_chrono(now).unwrap_or_default(), true)
                    .map(from_chrono)
                    .unwrap_or(at);
                // Ticks that came while the job ran are skipped (as another process would
                // find them), counting from the clock reading its end was recorded with: the
                // last reading anyone can have seen the run end at. A reading taken later
                // could already be past a tick that a watcher of the job, seeing it end,
                // moved the clock to.
                let ended = match self.fire(job.name, Some(tick.max(at))).await {
                    Ok((_, ended)) => ended,
                    Err(e) => {
                        if e.kind() != ErrorKind::Closed {
                            tracing::warn!(job = job.name, error = %e, "could not run a job");
                            self.hook.report(
                                crate::hook::ErrorSource::Job(job.name.to_owned()),
                                &e,
                                false,
                            );
                        }
                        now
                    }
                };
                *due = job.next_after(ended.max(tick));
                if shutdown.is_shutdown() {
                    return;
                }
            }
            let earliest = next.iter().flatten().min().copied();
            let wait = earliest
                .map(|t| self.clock.now().until(t))
                .unwrap_or(Duration::from_secs(60))
                .min(Duration::from_secs(60));
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.recv() => return,
                _ = jumped(&mut jumps) => {}
            }
        }
    }
}

pub(crate) async fn jumped(jumps: &mut Option<tokio::sync::watch::Receiver<i64>>) {
    match jumps {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

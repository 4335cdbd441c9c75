//! `durabus jobs list | run NAME`: the maintenance jobs a running bus schedules.

use clap::Subcommand;
use durabus::{Scheduler, SchedulerConfig};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// The jobs with their schedules, last and next run.
    List,
    /// Run a job now (skipped if a run of it is going in another process).
    Run {
        /// The job: dead-letter-auto-retry, cleanup-dead-letters, cleanup-history.
        name: String,
    },
}

/// Runs a `jobs` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: JobsCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let result = async {
        let scheduler = Scheduler::new(
            store.clone(),
            durabus::store::clock_of(&store),
            SchedulerConfig::default(),
        )?;
        match command {
            JobsCommand::List => {
                let jobs = scheduler.jobs().await?;
                if ctx.json {
                    output::json(&jobs)
                } else {
                    output::jobs(&jobs);
                    Ok(())
                }
            }
            JobsCommand::Run { name } => {
                let report = scheduler.run_now(&name).await?;
                if ctx.json {
                    output::json(&report)
                } else {
                    outln!("{}: {} ({})", report.name, report.status, report.message);
                    Ok(())
                }
            }
        }
    }
    .await;
    store.close().await?;
    result
}

//! `durabus periodic list | pause NAME | resume NAME | remove NAME`: the periodic events the
//! applications on the database have registered.

use clap::Subcommand;
use durabus::Periodics;

use crate::output;

#[derive(Debug, Subcommand)]
pub enum PeriodicCommand {
    /// The periodic events with their schedules, time zones, last and next ticks.
    List,
    /// Skip a periodic event's ticks until it is resumed (kept across restarts).
    Pause {
        /// Its name.
        name: String,
    },
    /// Publish a paused periodic event's ticks again, from its next one.
    Resume {
        /// Its name.
        name: String,
    },
    /// Delete a periodic event (an application that registers it on start brings it back:
    /// pause it, or remove it from the code too).
    Remove {
        /// Its name.
        name: String,
    },
}

/// Runs a `periodic` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: PeriodicCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let periodics = Periodics::new(store.clone());
    let result = async {
        let changed = match command {
            PeriodicCommand::List => {
                let list = periodics.list().await?;
                return if ctx.json {
                    output::json(&list)
                } else {
                    output::periodics(&list);
                    Ok(())
                };
            }
            PeriodicCommand::Pause { name } => periodics.pause(&name).await?,
            PeriodicCommand::Resume { name } => periodics.resume(&name).await?,
            PeriodicCommand::Remove { name } => {
                let removed = periodics.remove(&name).await?;
                return if ctx.json {
                    output::json(&removed)
                } else {
                    outln!("removed periodic event {name}");
                    Ok(())
                };
            }
        };
        if ctx.json {
            output::json(&changed)
        } else {
            let state = if changed.row.paused {
                "paused".to_owned()
            } else {
                format!("running; next tick {}", output::ts(changed.next_tick))
            };
            outln!("periodic event {}: {state}", changed.row.name);
            Ok(())
        }
    }
    .await;
    store.close().await?;
    result
}

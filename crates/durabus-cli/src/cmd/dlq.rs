//! `durabus dlq list | retry | purge`.

use clap::Subcommand;
use durabus::{DlqInspector, EventId, Page};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead events, newest first.
    List {
        /// Dead events to skip.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Most dead events to show.
        #[arg(long, default_value_t = durabus::dlq::DEFAULT_LIMIT)]
        limit: u64,
    },
    /// Send a dead event back for delivery (retry count reset, errors cleared). A running bus on
    /// the same database delivers it.
    Retry {
        /// The event id.
        id: EventId,
    },
    /// Delete dead events created DAYS days ago or earlier.
    Purge {
        /// Age in days; 0 purges every dead event.
        #[arg(long = "older-than", value_name = "DAYS")]
        older_than: u32,
    },
}

pub async fn run(db: &crate::cmd::Db, json: bool, command: DlqCommand) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let dlq = DlqInspector::new(store.clone());
    let result = execute(&dlq, json, command).await;
    store.close().await?;
    result
}

async fn execute(dlq: &DlqInspector, json: bool, command: DlqCommand) -> anyhow::Result<()> {
    match command {
        DlqCommand::List { offset, limit } => {
            let events = dlq.list(Page::new(offset, limit)).await?;
            if json {
                output::json(&events)?;
            } else {
                output::events_table(&events, "the dead-letter queue is empty");
            }
        }
        DlqCommand::Retry { id } => {
            dlq.retry(id).await?;
            if json {
                output::json(&serde_json::json!({ "retried": id }))?;
            } else {
                println!("event {id} is pending again; a running bus will deliver it");
            }
        }
        DlqCommand::Purge { older_than } => {
            let purged = dlq.purge(older_than).await?;
            if json {
                output::json(&serde_json::json!({ "purged": purged }))?;
            } else {
                println!("purged {purged} dead event(s) older than {older_than} day(s)");
            }
        }
    }
    Ok(())
}

//! `durabus events list | purge`.

use std::time::Duration;

use clap::Subcommand;
use durabus::{EventQuery, EventStatus, History, Timestamp};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List events, newest first.
    List {
        /// Only events with this status (pending, processing, done, dlq).
        #[arg(long)]
        status: Option<EventStatus>,
        /// Only events of exactly this type.
        #[arg(long = "type")]
        event_type: Option<String>,
        /// Events to skip.
        #[arg(long, default_value_t = 0)]
        offset: u64,
        /// Only events created at or after this time (RFC 3339, e.g. 2026-11-22T10:00:00Z).
        #[arg(long)]
        since: Option<Timestamp>,
        /// Only events created before this time (RFC 3339).
        #[arg(long)]
        until: Option<Timestamp>,
        /// Most events to show.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// Delete completed (done) events finished DAYS days ago or earlier. Pending, processing
    /// and dead events are never touched.
    Purge {
        /// Age in days; 0 purges every completed event.
        #[arg(long = "older-than", value_name = "DAYS")]
        older_than: u32,
    },
}

pub async fn run(db: &crate::cmd::Db, json: bool, command: EventsCommand) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let history = History::new(store.clone());
    let result = execute(&history, json, command).await;
    store.close().await?;
    result
}

async fn execute(history: &History, json: bool, command: EventsCommand) -> anyhow::Result<()> {
    match command {
        EventsCommand::List {
            status,
            event_type,
            offset,
            since,
            until,
            limit,
        } => {
            let events = history
                .list(EventQuery {
                    status,
                    event_type,
                    created_from: since,
                    created_before: until,
                    offset,
                    limit,
                })
                .await?;
            if json {
                output::json(&events)?;
            } else {
                output::events_table(&events, "no events match");
            }
        }
        EventsCommand::Purge { older_than } => {
            let purged = history
                .purge(Duration::from_secs(u64::from(older_than) * 86_400))
                .await?;
            if json {
                output::json(&serde_json::json!({ "purged": purged }))?;
            } else {
                outln!("purged {purged} completed event(s) older than {older_than} day(s)");
            }
        }
    }
    Ok(())
}

//! `durabus events list`.

use std::path::Path;

use clap::Subcommand;
use durabus::{EventQuery, EventStatus};

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
        /// Most events to show.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
}

pub async fn run(db: &Path, json: bool, command: EventsCommand) -> anyhow::Result<()> {
    let EventsCommand::List {
        status,
        event_type,
        offset,
        limit,
    } = command;
    let store = super::open_existing(db).await?;
    let events = store
        .list_events(EventQuery {
            status,
            event_type,
            offset,
            limit,
        })
        .await;
    store.close().await?;
    let events = events?;
    if json {
        output::json(&events)
    } else {
        output::events_table(&events, "no events match");
        Ok(())
    }
}

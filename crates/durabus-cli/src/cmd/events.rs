//! `durabus events list | show | publish | cancel | purge`.

use std::io::Read;
use std::time::Duration;

use anyhow::Context;
use clap::Subcommand;
use durabus::cancel::{CancelOutcome, CancelRequest};
use durabus::{
    EventId, EventQuery, EventStatus, History, NewEvent, Payloads, PublishOptions, Timestamp,
};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    /// List events, newest first.
    List {
        /// Only events with this status (scheduled, pending, processing, done, dlq, cancelled).
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
        /// Only events with this ordering key.
        #[arg(long)]
        key: Option<String>,
        /// Most events to show.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// One event in full: status, attempts and every error, which subscriptions have handled it,
    /// metadata, payload (redacted as configured) and its payload snapshots.
    Show {
        /// The event's id.
        id: EventId,
    },
    /// Publish an event for testing and scripts: stored durably as pending, or as scheduled
    /// with --delay or --at (the application's workers deliver it); prints its id.
    Publish {
        /// The event type (`system.*` is the bus's own).
        event_type: String,
        /// The payload: JSON text, `@FILE` to read it from a file, or `-` (or nothing) to read
        /// it from standard input.
        payload: Option<String>,
        /// Not delivered before this long from now: a whole number of ms, s, m, h or d (90s,
        /// 15m, 2h).
        #[arg(long, value_parser = parse_delay, conflicts_with = "at", allow_hyphen_values = true)]
        delay: Option<Duration>,
        /// Not delivered before this time (RFC 3339); a time in the past means now.
        #[arg(long)]
        at: Option<Timestamp>,
        /// Priority among due events, higher first: -100 to 100 (default 0).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i16,
        /// A dedup key (1 to 255 bytes): a publish with the same key within --dedup-window of
        /// the first stores nothing and prints the first event's id.
        #[arg(long, requires = "dedup_window")]
        dedup: Option<String>,
        /// How long the dedup key holds (90s, 15m, 2h; more than 0).
        #[arg(long, value_parser = parse_window, requires = "dedup", allow_hyphen_values = true)]
        dedup_window: Option<Duration>,
        /// An ordering key (1 to 255 bytes): events of one key are handled one at a time, in
        /// publish order.
        #[arg(long)]
        key: Option<String>,
    },
    /// Cancel an event that has not been delivered, for every subscription or one. A waiting
    /// event never runs; a running one finishes its attempt and no retry follows it. Recorded
    /// with --actor and the reason.
    Cancel {
        /// The event's id.
        id: EventId,
        /// Why (required).
        #[arg(long)]
        reason: String,
        /// Only for this subscription (its name, or its id for an unnamed one).
        #[arg(long)]
        subscription: Option<String>,
    },
    /// Delete completed (done) events finished DAYS days ago or earlier. Pending, processing
    /// and dead events are never touched.
    Purge {
        /// Age in days; 0 purges every completed event.
        #[arg(long = "older-than", value_name = "DAYS")]
        older_than: u32,
    },
}

pub async fn run(
    db: &crate::cmd::Db,
    ctx: &crate::cmd::Context,
    command: EventsCommand,
) -> anyhow::Result<()> {
    let json = ctx.json;
    let store = super::open_existing(db).await?;
    if let EventsCommand::Cancel {
        id,
        reason,
        subscription,
    } = command
    {
        let request = CancelRequest {
            event_id: id,
            subscription,
            actor: ctx.actor.clone(),
            reason,
        };
        let result = cancel(store.clone(), json, request).await;
        store.close().await?;
        return result;
    }
    if let EventsCommand::Publish {
        event_type,
        payload,
        delay,
        at,
        priority,
        dedup,
        dedup_window,
        key,
    } = command
    {
        let mut options = PublishOptions::new().priority(priority);
        if let Some(key) = key {
            options = options.ordering_key(key);
        }
        if let (Some(key), Some(window)) = (dedup, dedup_window) {
            options = options.dedup(key, window);
        }
        if let Some(d) = delay {
            options = options.delay(d);
        }
        if let Some(at) = at {
            options = options.deliver_at(at);
        }
        let result = publish(
            store.clone(),
            json,
            &event_type,
            payload.as_deref(),
            options,
        )
        .await;
        store.close().await?;
        return result;
    }
    if let EventsCommand::Show { id } = command {
        let result = show(store.clone(), json, id).await;
        store.close().await?;
        return result;
    }
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
            key,
            limit,
        } => {
            let events = history
                .list(EventQuery {
                    status,
                    event_type,
                    created_from: since,
                    created_before: until,
                    ordering_key: key,
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
        EventsCommand::Show { .. }
        | EventsCommand::Publish { .. }
        | EventsCommand::Cancel { .. } => {
            unreachable!("handled in run")
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

/// The payload text of `events publish`: the argument, a file (`@FILE`) or standard input.
fn payload_text(arg: Option<&str>) -> anyhow::Result<String> {
    match arg {
        None | Some("-") => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the payload from standard input")?;
            Ok(text)
        }
        Some(file) if file.starts_with('@') => std::fs::read_to_string(&file[1..])
            .with_context(|| format!("reading the payload from {}", &file[1..])),
        Some(text) => Ok(text.to_owned()),
    }
}

/// `--delay` as clap parses it.
fn parse_delay(text: &str) -> Result<Duration, String> {
    durabus::options::parse_delay("delay", text).map_err(|e| e.to_string())
}

/// `--dedup-window` as clap parses it (a window of 0 is refused when the event is checked).
fn parse_window(text: &str) -> Result<Duration, String> {
    durabus::options::parse_delay("dedup_window", text).map_err(|e| e.to_string())
}

async fn publish(
    store: std::sync::Arc<dyn durabus::Store>,
    json: bool,
    event_type: &str,
    payload: Option<&str>,
    options: PublishOptions,
) -> anyhow::Result<()> {
    let text = payload_text(payload)?;
    let value: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| anyhow::anyhow!("the payload is not JSON: {e}"))?;
    let priority = options.priority_value();
    let event = NewEvent::new(event_type, &value)?.with_options(options);
    let own = event.id;
    let bus = durabus::EventBus::builder()
        .store(store)
        .deliver(false)
        .build()
        .await?;
    let due = event.due_at(bus.clock().now());
    let id = bus.enqueue_event(event).await;
    bus.shutdown().await?;
    let id = id?;
    // A dedup key held by an open window: nothing was stored; the id is the first event's.
    let duplicate = id != own;
    let status = match (duplicate, due) {
        (true, _) => None,
        (false, Some(_)) => Some(EventStatus::Scheduled),
        (false, None) => Some(EventStatus::Pending),
    };
    if json {
        output::json(&serde_json::json!({
            "id": id, "type": event_type, "status": status, "deliver_at": due,
            "priority": priority, "duplicate": duplicate,
        }))
    } else {
        if duplicate {
            eprintln!("the dedup key is held by an earlier event: nothing was stored; its id:");
        }
        outln!("{id}");
        Ok(())
    }
}

async fn cancel(
    store: std::sync::Arc<dyn durabus::Store>,
    json: bool,
    request: CancelRequest,
) -> anyhow::Result<()> {
    let now = durabus::store::clock_of(&store).now();
    let done = store.cancel_event(request, now).await?;
    if json {
        return output::json(&done);
    }
    let what = match &done.subscription {
        Some(s) => format!("event {} for subscription {s}", done.event_id),
        None => format!("event {}", done.event_id),
    };
    match done.outcome {
        CancelOutcome::Cancelled => outln!("cancelled {what}"),
        CancelOutcome::Running => outln!(
            "{what} is being delivered now: the running attempt finishes and no retry follows it"
        ),
    }
    Ok(())
}

async fn show(
    store: std::sync::Arc<dyn durabus::Store>,
    json: bool,
    id: EventId,
) -> anyhow::Result<()> {
    let event = History::new(store.clone()).get(id).await?;
    let cancellations = store.cancellations(id).await?;
    let snapshots = Payloads::new(store).list(id).await?;
    if json {
        return output::json(&serde_json::json!({
            "event": event, "cancellations": cancellations, "snapshots": snapshots,
        }));
    }
    output::event(&event);
    for c in &cancellations {
        outln!(
            "cancelled      {} by {}{}: {} ({})",
            c.cancelled_at,
            c.actor,
            c.subscription
                .as_deref()
                .map(|s| format!(" for {s}"))
                .unwrap_or_default(),
            c.reason,
            match c.outcome {
                CancelOutcome::Cancelled => "cancelled",
                CancelOutcome::Running => "while running: no retry",
            }
        );
    }
    outln!();
    output::snapshots(&snapshots);
    Ok(())
}

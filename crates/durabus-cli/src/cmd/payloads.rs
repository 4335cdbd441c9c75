//! `durabus payloads list | get | delete` and `durabus payload-config list | set | delete`.

use clap::Subcommand;
use durabus::{ConfigChange, EventId, Payloads};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum PayloadsCommand {
    /// Every snapshot of an event, newest first (payloads redacted as configured).
    List {
        /// The event id.
        event_id: EventId,
    },
    /// One snapshot's payload: the newest at STAGE, or the newest of any stage.
    Get {
        /// The event id.
        event_id: EventId,
        /// The stage (published, error, or an application's own).
        stage: Option<String>,
    },
    /// Soft-delete every snapshot of an event: the bytes are cleared, who, when and why kept.
    Delete {
        /// The event id.
        event_id: EventId,
        /// Why (required; kept for the audit).
        #[arg(long)]
        reason: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Every configuration row (a type without one uses `*`, else every stage for 14 days).
    List,
    /// Change the configuration of an event type (`*`: the default): only the settings given
    /// change; the others, redaction rules among them, stay. A type without a row of its own
    /// starts from every stage, 14 days, nothing redacted.
    Set {
        /// The event type, or `*`.
        event_type: String,
        /// Stages to store, comma-separated (`*`: all; an empty value: none).
        #[arg(long, value_delimiter = ',')]
        stages: Option<Vec<String>>,
        /// Days snapshots are kept.
        #[arg(long, allow_hyphen_values = true)]
        retention_days: Option<i64>,
        /// Add a JSON path operators never see (`$.card.number`); repeat for more.
        #[arg(long)]
        redact: Vec<String>,
        /// Drop a redaction rule (it must exist); repeat for more.
        #[arg(long)]
        no_redact: Vec<String>,
        /// Drop every redaction rule (before adding those of --redact).
        #[arg(long)]
        clear_redact: bool,
        /// Store snapshots redacted too (`--redact-before-store false` to stop).
        #[arg(long, num_args = 0..=1, default_missing_value = "true")]
        redact_before_store: Option<bool>,
    },
    /// Delete a type's configuration row.
    Delete {
        /// The event type, or `*`.
        event_type: String,
    },
}

/// Runs a `payloads` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: PayloadsCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let payloads = Payloads::new(store.clone());
    let result = async {
        match command {
            PayloadsCommand::List { event_id } => {
                let list = payloads.list(event_id).await?;
                if ctx.json {
                    output::json(&list)
                } else {
                    output::snapshots(&list);
                    Ok(())
                }
            }
            PayloadsCommand::Get { event_id, stage } => {
                let snap = match stage {
                    Some(stage) => payloads.get(event_id, &stage).await?,
                    None => payloads
                        .list(event_id)
                        .await?
                        .into_iter()
                        .next()
                        .ok_or_else(|| {
                            anyhow::anyhow!("event {event_id} has no payload snapshots")
                        })?,
                };
                if ctx.json {
                    return output::json(&snap);
                }
                match (&snap.payload, &snap.deleted) {
                    (Some(p), _) => outln!("{p}"),
                    (None, Some(d)) => {
                        outln!("deleted {} by {}: {}", d.deleted_at, d.deleted_by, d.reason)
                    }
                    (None, None) => outln!("(no payload)"),
                }
                Ok(())
            }
            PayloadsCommand::Delete { event_id, reason } => {
                let n = payloads.delete(event_id, &reason, &ctx.actor).await?;
                if ctx.json {
                    output::json(&serde_json::json!({ "event_id": event_id, "deleted": n }))
                } else {
                    outln!("{n} snapshot(s) of event {event_id} deleted");
                    Ok(())
                }
            }
        }
    }
    .await;
    store.close().await?;
    result
}

/// Runs a `payload-config` command.
pub async fn run_config(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: ConfigCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let payloads = Payloads::new(store.clone());
    let result = async {
        match command {
            ConfigCommand::List => {
                let rows = payloads.configs().await?;
                if ctx.json {
                    output::json(&rows)
                } else {
                    output::payload_configs(&rows);
                    Ok(())
                }
            }
            ConfigCommand::Set {
                event_type,
                stages,
                retention_days,
                redact,
                no_redact,
                clear_redact,
                redact_before_store,
            } => {
                let stages =
                    stages.map(|list| list.into_iter().filter(|s| !s.trim().is_empty()).collect());
                let change = ConfigChange {
                    stages,
                    retention_days,
                    redact_add: redact,
                    redact_remove: no_redact,
                    redact_clear: clear_redact,
                    redact_before_store,
                };
                let row = payloads
                    .update_config(&event_type, change, &ctx.actor)
                    .await?;
                if ctx.json {
                    output::json(&row)
                } else {
                    output::payload_configs(std::slice::from_ref(&row));
                    Ok(())
                }
            }
            ConfigCommand::Delete { event_type } => {
                payloads.delete_config(&event_type).await?;
                if ctx.json {
                    output::json(&serde_json::json!({ "deleted": event_type }))
                } else {
                    outln!("the configuration of {event_type:?} is deleted");
                    Ok(())
                }
            }
        }
    }
    .await;
    store.close().await?;
    result
}

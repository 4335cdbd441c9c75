//! `durabus dlq list | show | groups | retry | resolve | abandon | purge`.
//!
//! An action names one dead letter by its event id, or everything a filter selects: then it
//! is a durable operation (preview first with `--preview`; an empty filter needs `--all`), run
//! here with progress, resumable if this process dies.

use clap::{Args, Subcommand};
use durabus::{
    Action, BulkRequest, DeadLetterFilter, DeadLetterStatus, DeadLetters, EventId, Keyset,
    Operations, Timestamp,
};

use super::operations::run_with_progress;
use crate::output;

/// Which dead letters: the filter options every listing and bulk action takes.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only these statuses (pending, retrying, resolved, abandoned); repeat or comma-separate.
    #[arg(long, value_delimiter = ',')]
    pub status: Vec<DeadLetterStatus>,
    /// Only this event type, exact or a glob with `*` (`order.*`).
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only failures of this subscription (its name, or id if unnamed).
    #[arg(long)]
    pub subscription: Option<String>,
    /// Only this failure group (a fingerprint from `dlq groups`).
    #[arg(long)]
    pub group: Option<String>,
    /// Only dead letters created at or after this time (RFC 3339).
    #[arg(long)]
    pub from: Option<Timestamp>,
    /// Only dead letters created before this time (RFC 3339).
    #[arg(long)]
    pub to: Option<Timestamp>,
}

impl FilterArgs {
    /// The library's filter.
    pub fn filter(&self) -> DeadLetterFilter {
        DeadLetterFilter {
            status: self.status.clone(),
            event_type: self.event_type.clone(),
            subscription: self.subscription.clone(),
            group: self.group.clone(),
            created_from: self.from,
            created_before: self.to,
        }
    }
}

/// One dead letter, or a bulk selection.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// The dead letter's event id. Without it, the filter options select what to act on.
    pub id: Option<EventId>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only show what the filter selects (count and samples); change nothing.
    #[arg(long)]
    pub preview: bool,
    /// Act on every dead letter (required when no filter option is given).
    #[arg(long)]
    pub all: bool,
    /// Rows per transaction of a bulk run, fixed (default: a size that follows how long each
    /// write takes, from 50 on SQLite and 500 on PostgreSQL; see docs/OPERATIONS.md).
    #[arg(long)]
    pub chunk: Option<usize>,
}

#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List dead letters, newest first.
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Most dead letters to show (at most 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Start after this position (the `next` of the previous page).
        #[arg(long)]
        before: Option<i64>,
        /// Dead letters to skip (the first `offset` of the selection; prefer --before deep in
        /// a large queue).
        #[arg(long, default_value_t = 0)]
        offset: u64,
    },
    /// One dead letter: payload, every round's errors, lifecycle.
    Show {
        /// The event id.
        id: EventId,
    },
    /// Failure groups: dead letters with the same cause, largest first.
    Groups {
        /// Most groups to show.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// Send dead letters back through normal delivery with a fresh attempt budget.
    Retry {
        #[command(flatten)]
        target: Target,
    },
    /// Mark dead letters resolved (a note is required).
    Resolve {
        #[command(flatten)]
        target: Target,
        /// Why.
        #[arg(long)]
        note: String,
    },
    /// Stop auto-retrying dead letters.
    Abandon {
        #[command(flatten)]
        target: Target,
        /// Why.
        #[arg(long)]
        note: Option<String>,
    },
    /// Delete dead letters and their events: one, a filter's selection, or (--older-than)
    /// every dead event created DAYS days ago or earlier.
    Purge {
        #[command(flatten)]
        target: Target,
        /// Delete dead events created DAYS days ago or earlier (0: all).
        #[arg(long = "older-than", value_name = "DAYS", conflicts_with_all = ["id", "preview", "all"])]
        older_than: Option<u32>,
    },
}

/// Runs a `dlq` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: DlqCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let result = execute(&store, ctx, command).await;
    store.close().await?;
    result
}

async fn execute(
    store: &std::sync::Arc<dyn durabus::Store>,
    ctx: &super::Context,
    command: DlqCommand,
) -> anyhow::Result<()> {
    let dlq = DeadLetters::new(store.clone());
    match command {
        DlqCommand::List {
            filter,
            limit,
            before,
            offset,
        } => list(&dlq, ctx, filter.filter(), limit, before, offset).await,
        DlqCommand::Show { id } => {
            let d = dlq.get(id).await?;
            if ctx.json {
                output::json(&d)
            } else {
                output::dead_letter(&d);
                Ok(())
            }
        }
        DlqCommand::Groups { limit } => {
            let groups = dlq.group_trends(limit).await?;
            if ctx.json {
                output::json(&groups)
            } else {
                output::groups(&groups);
                Ok(())
            }
        }
        DlqCommand::Retry { target } => act(store, ctx, target, Action::Retry).await,
        DlqCommand::Resolve { target, note } => {
            act(store, ctx, target, Action::Resolve { note }).await
        }
        DlqCommand::Abandon { target, note } => {
            act(store, ctx, target, Action::Abandon { note }).await
        }
        DlqCommand::Purge { target, older_than } => match older_than {
            Some(days) => {
                let purged = durabus::DlqInspector::new(store.clone())
                    .purge(days)
                    .await?;
                if ctx.json {
                    output::json(&serde_json::json!({ "purged": purged }))
                } else {
                    outln!("purged {purged} dead event(s) older than {days} day(s)");
                    Ok(())
                }
            }
            None => act(store, ctx, target, Action::Purge).await,
        },
    }
}

async fn list(
    dlq: &DeadLetters,
    ctx: &super::Context,
    filter: DeadLetterFilter,
    limit: u32,
    mut before: Option<i64>,
    offset: u64,
) -> anyhow::Result<()> {
    // An offset walks pages (keyset underneath): fine for the first few pages.
    let start = before;
    let mut skip = offset;
    let mut end = false;
    while skip > 0 && !end {
        let take = u32::try_from(skip.min(1000)).unwrap_or(1000);
        let page = dlq
            .list(
                filter.clone(),
                Keyset {
                    before,
                    limit: take,
                },
            )
            .await?;
        skip -= page.items.len() as u64;
        end = page.items.len() < take as usize;
        before = page.items.last().map(|d| d.seq).or(before);
    }
    let page = if end || limit == 0 {
        durabus::DeadLetterPage {
            items: Vec::new(),
            next: None,
        }
    } else {
        dlq.list(filter.clone(), Keyset { before, limit }).await?
    };
    if ctx.json {
        return output::json(&page);
    }
    let first = offset == 0 && start.is_none() && limit > 0;
    let empty = if first && filter.is_empty() {
        "the dead-letter queue is empty"
    } else if first {
        "no dead letters match"
    } else {
        "no dead letters on this page"
    };
    output::dead_letters(&page.items, empty);
    if let Some(next) = page.next {
        outln!("next page: --before {next}");
    }
    Ok(())
}

async fn act(
    store: &std::sync::Arc<dyn durabus::Store>,
    ctx: &super::Context,
    target: Target,
    action: Action,
) -> anyhow::Result<()> {
    let dlq = DeadLetters::new(store.clone());
    let verb = action.name();
    if let Some(id) = target.id {
        anyhow::ensure!(
            target.filter.filter().is_empty() && !target.all && !target.preview,
            "give either a dead letter's id or filter options, not both"
        );
        let after = dlq.act(id, action, &ctx.actor).await?;
        if ctx.json {
            return output::json(
                &serde_json::json!({ "event_id": id, "action": verb, "dead_letter": after }),
            );
        }
        match after {
            Some(d) if d.status == durabus::DeadLetterStatus::Retrying => {
                outln!("dead letter {id}: sent back for delivery; it is retrying now");
                outln!(
                    "a running worker of the application delivers it (this command runs none); until one picks it up, `durabus dlq resolve` or `durabus dlq abandon` call the retry off"
                );
            }
            Some(d) => outln!("dead letter {id}: {verb} done; it is {} now", d.status),
            None => outln!("dead letter {id} purged"),
        }
        return Ok(());
    }
    let request = BulkRequest {
        filter: target.filter.filter(),
        action,
        all: target.all,
    };
    if target.preview {
        request.filter.validate()?;
        let preview = dlq.preview(&request.filter).await?;
        if ctx.json {
            return output::json(&preview);
        }
        outln!(
            "{verb} would cover {} dead letter(s) (checked again as each is reached); newest:",
            preview.count
        );
        output::dead_letters(&preview.samples, "(none)");
        return Ok(());
    }
    let op = dlq.submit(&request, &ctx.actor).await?;
    if !ctx.json {
        eprintln!(
            "operation {} submitted: {verb} {} dead letter(s); `durabus operations show {}` follows it",
            op.id, op.total, op.id
        );
    }
    let operations = Operations::new(store.clone());
    let done = run_with_progress(&operations, &op.id, target.chunk, ctx.json).await?;
    if ctx.json {
        output::json(&done)
    } else {
        output::operation(&done);
        Ok(())
    }
}

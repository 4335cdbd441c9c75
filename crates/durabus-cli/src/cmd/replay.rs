//! `durabus replay start | status | cancel | list`.
//!
//! A replay re-publishes stored events as new events (carrying `replayOf`), through normal
//! delivery. Started here it is rate-limited by default, asks before replaying more than
//! 1,000 events, and runs in this process with progress; Ctrl-C pauses it (a running bus, or
//! `durabus operations resume`, carries on).

use std::io::{BufRead, IsTerminal, Write};

use clap::{Args, Subcommand};
use durabus::replay::DEFAULT_OPERATOR_RATE;
use durabus::{
    EventId, EventStatus, OperationStatus, Operations, ReplayHooks, ReplayRequest, ReplaySelection,
    Replays, Timestamp,
};

use super::operations::run_with_progress;
use crate::output;

/// Above this many events a replay asks first.
const CONFIRM_ABOVE: u64 = 1_000;

/// What to replay and how.
#[derive(Debug, Clone, Args)]
pub struct StartArgs {
    /// Events created at or after this time (RFC 3339, UTC).
    #[arg(long)]
    pub from: Option<Timestamp>,
    /// Events created before this time (default: now).
    #[arg(long)]
    pub to: Option<Timestamp>,
    /// Only these types, exact or globs with `*`; repeat or comma-separate. The bus's own
    /// `system.*` events are left out unless named here.
    #[arg(long = "type", value_delimiter = ',')]
    pub types: Vec<String>,
    /// Only these events (ids); repeat or comma-separate.
    #[arg(long = "id", value_delimiter = ',')]
    pub ids: Vec<EventId>,
    /// Only events in these statuses (pending, processing, done, dlq).
    #[arg(long, value_delimiter = ',')]
    pub status: Vec<EventStatus>,
    /// Every stored event (needed without --from or --id).
    #[arg(long)]
    pub all: bool,
    /// Events per second [default: 2000].
    #[arg(long, conflicts_with = "unthrottled")]
    pub rate: Option<u32>,
    /// No rate limit: as fast as the store goes (live traffic shares the store).
    #[arg(long)]
    pub unthrottled: bool,
    /// Walk the whole selection and report what would be replayed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Count the selection (per type) and show the first events; change nothing.
    #[arg(long, conflicts_with = "dry_run")]
    pub preview: bool,
    /// Do not ask before replaying more than 1,000 events.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Events per transaction, fixed (default: a size that follows how long each write takes,
    /// from 50 on SQLite and 500 on PostgreSQL; see docs/OPERATIONS.md).
    #[arg(long)]
    pub chunk: Option<usize>,
    /// Submit and return: a started bus picks it up (within a second) and runs it.
    #[arg(long, conflicts_with_all = ["dry_run", "preview"])]
    pub detach: bool,
}

impl StartArgs {
    fn request(&self) -> ReplayRequest {
        ReplayRequest {
            selection: ReplaySelection {
                from: self.from,
                to: self.to,
                ids: self.ids.clone(),
                types: self.types.clone(),
                statuses: self.status.clone(),
                all: self.all,
            },
            rate_limit: if self.unthrottled {
                None
            } else {
                Some(self.rate.unwrap_or(DEFAULT_OPERATOR_RATE))
            },
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ReplayCommand {
    /// Replay stored events: each is published again as a new event with `replayOf`.
    Start(Box<StartArgs>),
    /// A replay's progress: counts, status, duration.
    Status {
        /// The replay's id.
        id: String,
    },
    /// Cancel a replay: at once if it is not running, else after its current chunk.
    Cancel {
        /// The replay's id.
        id: String,
    },
    /// Replays, newest first.
    List {
        /// Only this status (pending, running, completed, failed, cancelled).
        #[arg(long)]
        status: Option<OperationStatus>,
        /// Most replays to show.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

/// Runs a `replay` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: ReplayCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let replays = Replays::new(store.clone());
    let result = async {
        match command {
            ReplayCommand::Start(args) => {
                start(&replays, &Operations::new(store.clone()), ctx, &args).await
            }
            ReplayCommand::Status { id } => {
                let op = replays.get(&id).await?;
                if ctx.json {
                    output::json(&op)
                } else {
                    output::operation(&op);
                    Ok(())
                }
            }
            ReplayCommand::Cancel { id } => {
                let op = replays.cancel(&id).await?;
                if ctx.json {
                    return output::json(&op);
                }
                match op.status {
                    OperationStatus::Cancelled => outln!("replay {id} cancelled"),
                    _ => outln!("replay {id} stops after its current chunk"),
                }
                Ok(())
            }
            ReplayCommand::List { status, limit } => {
                let list = replays.list(status, limit).await?;
                if ctx.json {
                    output::json(&list)
                } else {
                    output::operations(&list);
                    Ok(())
                }
            }
        }
    }
    .await;
    store.close().await?;
    result
}

async fn start(
    replays: &Replays,
    operations: &Operations,
    ctx: &super::Context,
    args: &StartArgs,
) -> anyhow::Result<()> {
    let request = args.request();
    request.validate()?;
    if args.dry_run {
        let terminal = std::io::stderr().is_terminal() && !ctx.json;
        let report = replays
            .dry_run(&request, &ReplayHooks::new(), |read| {
                if terminal {
                    eprint!("\rwalked {read} events");
                }
            })
            .await?;
        if terminal {
            eprintln!();
        }
        if ctx.json {
            return output::json(&report);
        }
        outln!(
            "dry run: {} event(s) would be replayed (walked in {} ms; nothing changed)",
            report.count,
            report.duration_ms
        );
        output::type_counts(&report.by_type);
        output::event_list(&report.samples);
        return Ok(());
    }
    let preview = replays.preview(&request.selection).await?;
    if args.preview {
        if ctx.json {
            return output::json(&preview);
        }
        outln!("{} event(s) selected; first:", preview.count);
        output::type_counts(&preview.by_type);
        output::event_list(&preview.samples);
        return Ok(());
    }
    if preview.count > CONFIRM_ABOVE && !args.yes {
        confirm(preview.count, request.rate_limit).await?;
    }
    let op = replays.submit(&request, &ctx.actor).await?;
    if args.detach {
        if ctx.json {
            return output::json(&op);
        }
        outln!(
            "replay {} submitted: {} event(s); a started bus runs it (`durabus replay status {}`)",
            op.id,
            op.total,
            op.id
        );
        return Ok(());
    }
    if !ctx.json {
        eprintln!(
            "replay {} started: {} event(s) at {}; Ctrl-C pauses it",
            op.id,
            op.total,
            request
                .rate_limit
                .map_or("full speed".into(), |r| format!("{r}/s"))
        );
    }
    let done = run_with_progress(operations, &op.id, args.chunk, ctx.json).await?;
    if ctx.json {
        return output::json(&done);
    }
    output::operation(&done);
    if !done.status.is_finished() {
        outln!(
            "paused: `durabus operations resume {}` carries on, `durabus replay cancel {}` stops it",
            done.id,
            done.id
        );
    }
    Ok(())
}

/// Asks on a terminal; elsewhere refuses without `--yes` (no one is there to ask).
async fn confirm(count: u64, rate: Option<u32>) -> anyhow::Result<()> {
    let eta = rate.map_or(String::new(), |r| {
        let secs = count / u64::from(r.max(1));
        format!(
            " (about {} at {r}/s)",
            humantime::format_duration(std::time::Duration::from_secs(secs))
        )
    });
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "this replay selects {count} events{eta}; on a terminal durabus asks first, here pass --yes to confirm"
        );
    }
    eprint!("replay {count} events{eta}? [y/N] ");
    std::io::stderr().flush()?;
    let answer = tokio::task::spawn_blocking(|| {
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map(|_| answer)
    })
    .await??;
    if !matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES") {
        anyhow::bail!("not confirmed; nothing was replayed");
    }
    Ok(())
}

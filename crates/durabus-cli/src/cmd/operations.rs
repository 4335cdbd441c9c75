//! `durabus operations list | show | cancel | resume`, and running an operation (a bulk
//! dead-letter action or a replay) with progress: a bar on a terminal, plain lines otherwise;
//! Ctrl-C pauses it.

use std::io::IsTerminal;

use clap::Subcommand;
use durabus::{Operation, OperationStatus, Operations, RunOptions};

use crate::output;

#[derive(Debug, Subcommand)]
pub enum OperationsCommand {
    /// Operations, newest first.
    List {
        /// Only this status (pending, running, completed, failed, cancelled).
        #[arg(long)]
        status: Option<OperationStatus>,
        /// Only this kind (replay, dead_letters.retry, dead_letters.resolve,
        /// dead_letters.abandon, dead_letters.purge).
        #[arg(long)]
        kind: Option<durabus::OperationKind>,
        /// Most operations to show.
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
    /// One operation: selection, progress, actor, times.
    Show {
        /// The operation's id.
        id: String,
    },
    /// Cancel an operation: at once if it has not started, else at its next chunk.
    Cancel {
        /// The operation's id.
        id: String,
    },
    /// Run an operation here: one that was submitted, or whose runner died (after its lease
    /// ran out).
    Resume {
        /// The operation's id.
        id: String,
        /// Rows per transaction, fixed (default: a size that follows how long each write takes,
        /// from 50 on SQLite and 500 on PostgreSQL; see docs/OPERATIONS.md).
        #[arg(long)]
        chunk: Option<usize>,
    },
}

/// Runs an `operations` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: OperationsCommand,
) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let ops = Operations::new(store.clone());
    let result = async {
        match command {
            OperationsCommand::List {
                status,
                kind,
                limit,
            } => {
                let list = ops.list(status, kind, limit).await?;
                if ctx.json {
                    output::json(&list)
                } else {
                    output::operations(&list);
                    Ok(())
                }
            }
            OperationsCommand::Show { id } => {
                let op = ops.get(&id).await?;
                if ctx.json {
                    output::json(&op)
                } else {
                    output::operation(&op);
                    Ok(())
                }
            }
            OperationsCommand::Cancel { id } => {
                let op = ops.cancel(&id).await?;
                if ctx.json {
                    output::json(&op)
                } else {
                    match op.status {
                        OperationStatus::Cancelled => outln!("operation {id} cancelled"),
                        _ => outln!("operation {id} stops at its next chunk"),
                    }
                    Ok(())
                }
            }
            OperationsCommand::Resume { id, chunk } => {
                let op = run_with_progress(&ops, &id, chunk, ctx.json).await?;
                if ctx.json {
                    output::json(&op)
                } else {
                    output::operation(&op);
                    Ok(())
                }
            }
        }
    }
    .await;
    store.close().await?;
    result
}

/// Runs operation `id` to its end here, showing progress on stderr: a bar on a terminal,
/// a line every few seconds otherwise (none with `quiet`).
pub async fn run_with_progress(
    ops: &Operations,
    id: &str,
    chunk: Option<usize>,
    quiet: bool,
) -> anyhow::Result<Operation> {
    let options = RunOptions {
        chunk: chunk.map(|c| c.max(1)),
        ..RunOptions::default()
    };
    // Ctrl-C pauses at the next chunk boundary and lets go of the operation, so a running
    // bus (or `operations resume`) carries on at once instead of after the lease.
    let pause = options.pause.clone();
    let interrupt = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\npausing at the next chunk…");
            pause.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let terminal = std::io::stderr().is_terminal() && !quiet;
    let bar = terminal.then(|| {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar
    });
    let mut last_line = std::time::Instant::now();
    let op = ops
        .run(id, &options, |op| {
            let done = op.processed + op.skipped + op.errors;
            if let Some(bar) = &bar {
                bar.set_length(op.total.max(done));
                bar.set_position(done);
                bar.set_message(op.kind.as_str());
            } else if !quiet && (last_line.elapsed().as_secs() >= 2 || op.status.is_finished()) {
                last_line = std::time::Instant::now();
                eprintln!(
                    "{} {}: {done}/{} ({} processed, {} skipped, {} errors)",
                    op.id, op.status, op.total, op.processed, op.skipped, op.errors
                );
            }
        })
        .await?;
    interrupt.abort();
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(op)
}

//! `durabus`: run a demo, list events, and operate the dead-letter queue.

/// Prints to standard output like `println!`; a closed standard output (the reader went away,
/// as with `| head`) ends the program quietly (see [`output::write_out`]).
macro_rules! outln {
    () => {
        $crate::output::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Prints to standard output like `print!`, as [`outln!`] does.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write_out(format_args!($($arg)*))
    };
}

mod cmd;
mod output;
mod table;

use std::process::ExitCode;

/// The process's allocator: jemalloc. A delivery hands memory from thread to thread (rows the
/// store's writer read, spans the exporter's thread frees); jemalloc's per-thread caches take
/// those frees without the arena locking of the C library's malloc, which cost end to end a
/// quarter of its throughput (`docs/BENCHMARKS.md`, "The allocator").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use clap::{Parser, Subcommand};

/// durabus: a persistent event bus. Inspect and operate a durabus database.
#[derive(Debug, Parser)]
#[command(name = "durabus", version, about)]
struct Cli {
    /// The database: an SQLite file, or a PostgreSQL URL (postgres://user@host:port/db).
    #[arg(
        long,
        global = true,
        env = "DURABUS_DB",
        default_value = "./durabus.db"
    )]
    db: std::path::PathBuf,
    /// The PostgreSQL schema holding durabus's tables.
    #[arg(
        long,
        global = true,
        env = "DURABUS_PG_SCHEMA",
        default_value = durabus::store::postgres::DEFAULT_SCHEMA
    )]
    schema: String,
    /// The prefix of durabus's table names in the database (as the application configured it).
    #[arg(
        long,
        global = true,
        env = "DURABUS_TABLE_PREFIX",
        default_value = durabus::store::sqlite::DEFAULT_PREFIX
    )]
    table_prefix: String,
    /// Print data as JSON instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Who is acting, recorded on every dead-letter action and operation. Defaults to the
    /// OS user.
    #[arg(long, global = true, env = "DURABUS_ACTOR")]
    actor: Option<String>,
    /// How log lines are written to standard error: `text` (one readable line each) or `json`
    /// (one object per line, with the event id, type and subscription as fields where a line
    /// has them, and the span it happened in), for a log shipper.
    #[arg(
        long,
        global = true,
        env = "DURABUS_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// One readable line each.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a bus with a few handlers, publish sample events, and show them delivered, retried and
    /// dead-lettered.
    Demo(cmd::demo::Args),
    /// Stored events.
    #[command(subcommand)]
    Events(cmd::events::EventsCommand),
    /// The dead-letter queue: list, inspect, groups, retry, resolve, abandon, purge.
    #[command(subcommand)]
    Dlq(cmd::dlq::DlqCommand),
    /// Durable operations (bulk dead-letter actions, replays): list, show, cancel, resume.
    #[command(subcommand)]
    Operations(cmd::operations::OperationsCommand),
    /// Replay stored events (by time range, ids, types, statuses) through normal delivery:
    /// preview, dry run, rate limit, progress; status, cancel, list.
    #[command(subcommand)]
    Replay(cmd::replay::ReplayCommand),
    /// Maintenance jobs: list them with their last and next runs, run one now.
    #[command(subcommand)]
    Jobs(cmd::jobs::JobsCommand),
    /// Periodic events (published on a cron expression): list, pause, resume, remove.
    #[command(subcommand)]
    Periodic(cmd::periodic::PeriodicCommand),
    /// Stop delivering to a subscription (--subscription), every subscription matching a
    /// pattern (--matching) or the whole bus (--bus), across every worker process on the
    /// database, until resumed or for a while (--for 2h); events published meanwhile wait.
    Pause(cmd::pauses::PauseArgs),
    /// End a pause (by its id, or every active pause of a scope); its parked events are due
    /// at once.
    Resume(cmd::pauses::ResumeArgs),
    /// The active pauses with the events each holds parked (--ended-within 24h: also the
    /// ones that ended).
    Pauses(cmd::pauses::ListArgs),
    /// Concurrency limits per subscription across every worker process: list, set, remove.
    #[command(subcommand, name = "concurrency-limit")]
    ConcurrencyLimit(cmd::concurrency_limits::ConcurrencyLimitCommand),
    /// Rate limits per subscription across every worker process: list, set, remove.
    #[command(subcommand, name = "rate-limit")]
    RateLimit(cmd::rate_limits::RateLimitCommand),
    /// Payload snapshots of an event: list, get, soft-delete.
    #[command(subcommand)]
    Payloads(cmd::payloads::PayloadsCommand),
    /// Payload configuration per event type: which stages, how long, what to redact.
    #[command(subcommand, name = "payload-config")]
    PayloadConfig(cmd::payloads::ConfigCommand),
    /// Counts by status and type, the retry count distribution, and the DLQ rate per type, as
    /// of the last `refresh-stats` run (`--fresh` counts now).
    Stats(cmd::stats::Args),
    /// The Prometheus text of the database's gauges (depths, ages; the WAL or the pool).
    Metrics(cmd::metrics::Args),
    /// Run the admin HTTP API (with the maintenance jobs and durable operations) over the
    /// database, beside the application's workers. Tokens come from DURABUS_ADMIN_TOKEN,
    /// DURABUS_READ_TOKEN or --tokens-file.
    Serve(cmd::serve::Args),
    /// Run a worker whose handlers are commands: each event of a type matching PATTERN runs
    /// COMMAND with its payload on standard input (--handler 'PATTERN=COMMAND').
    Worker(cmd::worker::Args),
    /// Measure throughput, latency, recovery and memory on fresh databases (build with --release).
    /// With --db postgres://… it measures PostgreSQL with --workers worker processes.
    Bench(cmd::bench::Args),
    /// One worker process of the PostgreSQL benchmark (started by `bench`).
    #[command(hide = true)]
    BenchWorker(cmd::bench_worker::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A server logs its requests; the other commands print their results and log errors only.
    let default_log = match cli.command {
        Command::Serve(_) => "warn,durabus_admin=info,durabus_cli=info",
        // Delivery failures (with the event's fields) and the worker's own lines.
        Command::Worker(_) => "warn,durabus_cli=info",
        _ => "error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("durabus: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let db = cmd::Db {
        // A URL is text; a file path may be any bytes (kept as they are in `path`).
        target: cli.db.to_string_lossy().into_owned(),
        path: cli.db,
        table_prefix: cli.table_prefix,
        schema: cli.schema,
    };
    if let Err(e) = db.check_flags() {
        eprintln!("durabus: {e}");
        return ExitCode::from(2);
    }
    let ctx = cmd::Context {
        json: cli.json,
        actor: durabus::Actor::new(
            cli.actor.unwrap_or_else(cmd::os_user),
            durabus::ActorKind::Cli,
        ),
    };
    if let Err(e) = ctx.actor.validate() {
        eprintln!("durabus: --actor: {e}");
        return ExitCode::from(2);
    }
    let result = runtime.block_on(async {
        match cli.command {
            Command::Demo(args) => cmd::demo::run(&db, cli.json, args).await,
            Command::Events(c) => cmd::events::run(&db, &ctx, c).await,
            Command::Dlq(c) => cmd::dlq::run(&db, &ctx, c).await,
            Command::Operations(c) => cmd::operations::run(&db, &ctx, c).await,
            Command::Replay(c) => cmd::replay::run(&db, &ctx, c).await,
            Command::Jobs(c) => cmd::jobs::run(&db, &ctx, c).await,
            Command::Periodic(c) => cmd::periodic::run(&db, &ctx, c).await,
            Command::Pause(args) => cmd::pauses::pause(&db, &ctx, args).await,
            Command::Resume(args) => cmd::pauses::resume(&db, &ctx, args).await,
            Command::Pauses(args) => cmd::pauses::list(&db, &ctx, args).await,
            Command::ConcurrencyLimit(c) => cmd::concurrency_limits::run(&db, &ctx, c).await,
            Command::RateLimit(c) => cmd::rate_limits::run(&db, &ctx, c).await,
            Command::Payloads(c) => cmd::payloads::run(&db, &ctx, c).await,
            Command::PayloadConfig(c) => cmd::payloads::run_config(&db, &ctx, c).await,
            Command::Stats(args) => cmd::stats::run(&db, cli.json, args).await,
            Command::Metrics(args) => cmd::metrics::run(&db, args).await,
            Command::Serve(args) => cmd::serve::run(&db, args).await,
            Command::Worker(args) => cmd::worker::run(&db, args).await,
            Command::Bench(args) => cmd::bench::run(&db, cli.json, args).await,
            Command::BenchWorker(args) => cmd::bench_worker::run(&db, args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("durabus: {}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// `e` and its causes joined by `: `, leaving out a cause whose text the message already holds
/// (several library errors write their source into their own text, and `{:#}` would print it
/// twice).
fn report(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::report;

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        let unavailable = durabus::Error::Unavailable {
            source: "no connection became available in time".into(),
        };
        let text = report(&anyhow::Error::new(unavailable));
        assert_eq!(
            text.matches("no connection became available in time")
                .count(),
            1,
            "{text}"
        );
        assert!(text.starts_with("the database is unavailable"), "{text}");
    }

    #[test]
    fn causes_not_in_the_message_are_kept() {
        let e = anyhow::anyhow!("disk full").context("writing the report");
        assert_eq!(report(&e), "writing the report: disk full");
    }
}

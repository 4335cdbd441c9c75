//! `durabus-torture`: the reliability suite. One command runs every scenario and prints a
//! table (scenario, cycles, acknowledged, lost, duplicates, faults injected); it fails if any
//! acknowledged event was lost or any other promise broken. See `docs/RELIABILITY.md`.

mod check;
mod child;
mod fleet;
mod ledger;
mod scenario;
mod table;
mod target;
mod view;

use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::scenario::{Row, Settings};

#[derive(Parser)]
#[command(name = "durabus-torture", about = "The durabus reliability suite")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
// Parsed once per process: the size of the child's arguments does not matter.
#[allow(clippy::large_enum_variant)]
enum Cmd {
    /// Lists the scenarios.
    List,
    /// A child process of a scenario (started by the suite, not by hand).
    #[command(hide = true)]
    Child(child::ChildArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// The long form: many more cycles and events (the documented runs).
    #[arg(long)]
    long: bool,
    /// Only these scenarios (comma-separated names from `list`).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Cycles (or events, for the no-fault runs), overriding each scenario's default.
    #[arg(long)]
    cycles: Option<u64>,
    /// PostgreSQL for its scenarios.
    #[arg(
        long,
        env = "DURABUS_TEST_PG_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pg_url: String,
    /// Skip the PostgreSQL scenarios.
    #[arg(long)]
    no_pg: bool,
    /// Keep the work directory (databases, logs) here instead of a temporary one.
    #[arg(long)]
    keep: Option<std::path::PathBuf>,
    /// The checker's self-test: every child runs with the fail point
    /// `publish.ack_before_commit` armed (an enqueue answers before its commit), and the run
    /// succeeds only if a loss is reported.
    #[arg(long)]
    expect_loss: bool,
    /// Also write the table as Markdown to this file.
    #[arg(long)]
    markdown: Option<std::path::PathBuf>,
}

type Scenario = fn(&Settings) -> anyhow::Result<Row>;

/// Which runs a scenario belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// Runs everywhere.
    Nothing,
    /// Needs PostgreSQL.
    Postgres,
    /// Needs PostgreSQL and restarts its server: the long form only (or named with `--only`),
    /// never beside other users of the server.
    ServerRestart,
}

/// Every scenario: name, what it needs, what it does, and the runner.
const SCENARIOS: &[(&str, Needs, &str, Scenario)] = &[
    (
        "sqlite-clean",
        Needs::Nothing,
        "SQLite, no faults: every event handled exactly once",
        scenario::sqlite_kill::no_faults,
    ),
    (
        "sqlite-kill",
        Needs::Nothing,
        "SQLite: kill -9 at start, in recovery and while running; integrity_check after each",
        scenario::sqlite_kill::kill_loop,
    ),
    (
        "failpoints",
        Needs::Nothing,
        "SQLite: each library fail point armed in turn, the process aborting where it fires",
        scenario::failpoints::run,
    ),
    (
        "handlers",
        Needs::Nothing,
        "SQLite: handlers that panic, hang, block their thread; a poison event that aborts the process",
        scenario::handlers::run,
    ),
    (
        "storage",
        Needs::Nothing,
        "SQLite: write lock held briefly and too long, a full disk, a read-only and a corrupted file",
        scenario::storage::run,
    ),
    (
        "hostile",
        Needs::Nothing,
        "Payload edge cases, SQL and LIKE metacharacters in every dead-letter filter, a pathological glob",
        scenario::hostile::run,
    ),
    (
        "load",
        Needs::Nothing,
        "SQLite: 100,000 events (1,000,000 in the long form) sustained; RSS, open files and WAL bounded",
        scenario::load::run,
    ),
    (
        "sqlite-soak",
        Needs::Nothing,
        "SQLite: 2 minutes (an hour in the long form) of mixed load and operator work; resources bounded",
        scenario::soak::sqlite,
    ),
    (
        "sqlite-soak-leak",
        Needs::Nothing,
        "Self-test: a minute of sqlite-soak whose process leaks 4 MiB a second; passes if the judge catches it",
        scenario::soak::leak,
    ),
    (
        "pg-clean",
        Needs::Postgres,
        "PostgreSQL, 3 workers and a publisher, no faults: every event handled exactly once",
        scenario::pg_kill::no_faults,
    ),
    (
        "pg-kill",
        Needs::Postgres,
        "PostgreSQL: kill -9 of workers and of the publisher, 1 s leases",
        scenario::pg_kill::kills,
    ),
    (
        "pg-failpoints",
        Needs::Postgres,
        "PostgreSQL: each library fail point armed in turn, the process aborting where it fires",
        scenario::failpoints::postgres,
    ),
    (
        "pg-stall",
        Needs::Postgres,
        "PostgreSQL: workers frozen past their lease mid-handler, then thawed; late outcomes fenced off",
        scenario::pg_stall::run,
    ),
    (
        "pg-skew",
        Needs::Postgres,
        "PostgreSQL: workers' clocks 5 min ahead and behind (libfaketime); the one ahead killed",
        scenario::pg_skew::run,
    ),
    (
        "pg-skew-host-clocks",
        Needs::Postgres,
        "Self-test: the same with every bus on its host's clock uncorrected; passes if the checker catches it",
        scenario::pg_skew::host_clocks,
    ),
    (
        "pg-full",
        Needs::Postgres,
        "PostgreSQL: the tables' volume (a tablespace on a small tmpfs) filled under load, then freed",
        scenario::pg_full::run,
    ),
    (
        "pg-partition",
        Needs::Postgres,
        "PostgreSQL: workers in network namespaces; links degraded, then one cut for 3 leases and restored",
        scenario::pg_partition::run,
    ),
    (
        "pg-partition-own-pools",
        Needs::Postgres,
        "Self-test: the same with workers on plain pools of their own; passes if the blocked takeover is caught",
        scenario::pg_partition::own_pools,
    ),
    (
        "pg-failover",
        Needs::Postgres,
        "PostgreSQL: a synchronous standby of its own; the primary killed under load, the standby promoted",
        scenario::pg_failover::run,
    ),
    (
        "pg-failover-async",
        Needs::Postgres,
        "The same with asynchronous replication: what it loses is measured, not judged",
        scenario::pg_failover::asynchronous,
    ),
    (
        "pg-failover-async-lag",
        Needs::Postgres,
        "Self-test: the asynchronous standby held a second behind at the kill; passes if the loss is caught",
        scenario::pg_failover::lagging,
    ),
    (
        "pg-soak",
        Needs::Postgres,
        "PostgreSQL: 2 minutes (an hour in the long form) of mixed load and operator work; resources bounded",
        scenario::soak::postgres,
    ),
    (
        "pg-restart",
        Needs::ServerRestart,
        "PostgreSQL: the kill loop with a restart of the server halfway (long form, alone)",
        scenario::pg_kill::server_restart,
    ),
];

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Some(Cmd::Child(args)) => child::run(args),
        Some(Cmd::List) => {
            for (name, needs, what, _) in SCENARIOS {
                let tag = match needs {
                    Needs::Nothing => "",
                    Needs::Postgres => "[PostgreSQL] ",
                    Needs::ServerRestart => "[PostgreSQL, long form] ",
                };
                println!("{name:<18} {tag}{what}");
            }
            Ok(())
        }
        None => run(cli.run),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    for name in &args.only {
        anyhow::ensure!(
            SCENARIOS.iter().any(|(n, ..)| n == name),
            "unknown scenario {name:?} (see `durabus-torture list`)"
        );
    }
    if args.expect_loss {
        fleet::arm_in_every_child(durabus::fault::ACK_BEFORE_COMMIT);
    }
    let tmp = tempfile::tempdir()?;
    let dir = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => tmp.path().to_owned(),
    };
    let settings = Settings {
        long: args.long,
        cycles: args.cycles,
        pg_url: (!args.no_pg).then(|| args.pg_url.clone()),
        dir,
        keep: args.keep.is_some(),
    };
    let started = Instant::now();
    let mut rows = Vec::new();
    for (name, needs, _, run) in SCENARIOS {
        let named = args.only.iter().any(|n| n == name);
        if !args.only.is_empty() && !named {
            continue;
        }
        if *needs == Needs::ServerRestart && !args.long && !named {
            continue;
        }
        if *needs != Needs::Nothing && settings.pg_url.is_none() {
            println!("-- {name}: skipped (--no-pg)");
            continue;
        }
        println!("-- {name} …");
        let row = match run(&settings) {
            Ok(row) => row,
            Err(e) => Row {
                scenario: (*name).to_owned(),
                violations: vec![format!("the scenario could not run: {e:#}")],
                ..Row::default()
            },
        };
        println!("{}", table::line(&row));
        for v in &row.violations {
            println!("   ✗ {v}");
        }
        rows.push(row);
    }
    println!();
    let text = table::markdown(&rows);
    println!("{text}");
    println!(
        "{} scenarios in {:.0} s",
        rows.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(path) = &args.markdown {
        std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.expect_loss {
        let lost: u64 = rows.iter().map(|r| r.lost).sum();
        anyhow::ensure!(
            lost > 0,
            "the broken build lost nothing the checker could see: the harness cannot fail"
        );
        println!("the checker caught the broken build: {lost} acknowledged events lost");
        return Ok(());
    }
    let failed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.scenario.as_str())
        .collect();
    anyhow::ensure!(failed.is_empty(), "failed: {}", failed.join(", "));
    Ok(())
}

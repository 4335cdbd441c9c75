//! `durabus concurrency-limit set NAME --max N [--per-process M] [--partition-by WHAT
//! --per-partition K] | remove NAME | list`: at most N handler runs of a subscription at once
//! across every worker process on the database, and at most K of each tenant.

use clap::Subcommand;
use durabus::{ConcurrencyLimit, ConcurrencyLimits, PartitionLimit, Store};

use crate::output;
use crate::table::{Table, number, text};

#[derive(Debug, Subcommand)]
pub enum ConcurrencyLimitCommand {
    /// The concurrency limits, by subscription, with the runs in flight and the events waiting.
    List,
    /// Limit a subscription to --max handler runs at once across every worker process (and
    /// --per-process in each), replacing its limit at once; events past it wait in line.
    Set {
        /// The subscription's name (or, for an unnamed one, its id).
        subscription: String,
        /// Runs at once across every process (1 to 100,000).
        #[arg(long)]
        max: u32,
        /// Runs at once in each process (1 to 100,000; above --max it never binds).
        #[arg(long)]
        per_process: Option<u32>,
        /// Split the events into partitions (tenants) by `ordering_key` or
        /// `metadata.<field>`; needs --per-partition.
        #[arg(long, requires = "per_partition")]
        partition_by: Option<String>,
        /// Runs of one partition at once across every process (1 to 100,000); needs
        /// --partition-by.
        #[arg(long, requires = "partition_by")]
        per_partition: Option<u32>,
    },
    /// Remove a subscription's limit (the events waiting in line are due at once).
    Remove {
        /// The subscription's name (or id).
        subscription: String,
    },
}

/// Runs a `concurrency-limit` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: ConcurrencyLimitCommand,
) -> anyhow::Result<()> {
    let store: std::sync::Arc<dyn Store> = super::open_existing(db).await?;
    let limits = ConcurrencyLimits::new(store.clone());
    let result = async {
        match command {
            ConcurrencyLimitCommand::List => {
                let list = limits.list().await?;
                if ctx.json {
                    return output::json(&list);
                }
                table(&list);
            }
            ConcurrencyLimitCommand::Set {
                subscription,
                max,
                per_process,
                partition_by,
                per_partition,
            } => {
                let partition = match (partition_by, per_partition) {
                    (Some(by), Some(each)) => Some(PartitionLimit::new(by.parse()?, each)),
                    _ => None,
                };
                let l = limits
                    .set_partitioned(&subscription, max, per_process, partition, &ctx.actor)
                    .await?;
                if ctx.json {
                    return output::json(&l);
                }
                outln!(
                    "subscription {}: at most {} handler runs at once across every worker process{} (within their refresh, 500 ms by default)",
                    l.subscription,
                    l.max_in_flight,
                    l.per_process
                        .map_or_else(String::new, |p| format!(", {p} in each")),
                );
                if let Some(p) = &l.partition {
                    outln!(
                        "  and at most {} of each partition by {} (events without it share the partition \"\")",
                        p.max_in_flight,
                        p.by
                    );
                }
            }
            ConcurrencyLimitCommand::Remove { subscription } => {
                let l = limits.remove(&subscription).await?;
                if ctx.json {
                    return output::json(&l);
                }
                outln!("subscription {}: no concurrency limit", l.subscription);
            }
        }
        Ok(())
    }
    .await;
    store.close().await?;
    result
}

fn table(list: &[ConcurrencyLimit]) {
    if list.is_empty() {
        outln!("no concurrency limits");
        return;
    }
    let mut t = Table::new(&[
        text("SUBSCRIPTION", 24),
        number("MAX"),
        number("PER PROCESS"),
        text("PER PARTITION", 24),
        number("IN FLIGHT"),
        number("WAITING"),
        text("SET BY", 12),
        text("SET AT", 24),
    ]);
    for l in list {
        t.row(vec![
            l.subscription.clone(),
            l.max_in_flight.to_string(),
            l.per_process.map_or_else(|| "-".into(), |p| p.to_string()),
            l.partition.as_ref().map_or_else(
                || "-".into(),
                |p| format!("{} by {}", p.max_in_flight, p.by),
            ),
            l.in_flight.to_string(),
            l.waiting.to_string(),
            l.set_by.name.clone(),
            l.set_at.to_string(),
        ]);
    }
    t.print();
}

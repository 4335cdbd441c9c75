//! `durabus rate-limit set NAME --per N --interval D | remove NAME | list`: at most N handler
//! runs of a subscription per interval, across every worker process on the database.

use std::time::Duration;

use clap::Subcommand;
use durabus::{RateLimit, RateLimits, Store};

use crate::output;
use crate::table::{Table, number, text};

#[derive(Debug, Subcommand)]
pub enum RateLimitCommand {
    /// The rate limits, by subscription.
    List,
    /// Limit a subscription to --per handler runs per --interval across every worker process
    /// (replacing its limit, at once); events past it wait for their slot.
    Set {
        /// The subscription's name (or, for an unnamed one, its id).
        subscription: String,
        /// Handler runs allowed per interval (1 to 1,000,000).
        #[arg(long)]
        per: u32,
        /// The interval: a whole number of ms, s, m, h or d (1s, 1m; at most 1d).
        #[arg(long, value_parser = parse_interval, default_value = "1s")]
        interval: Duration,
    },
    /// Remove a subscription's limit (events waiting for a slot run at their slot's time).
    Remove {
        /// The subscription's name (or id).
        subscription: String,
    },
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    durabus::options::parse_delay("interval", text).map_err(|e| e.to_string())
}

/// Runs a `rate-limit` command.
pub async fn run(
    db: &crate::cmd::Db,
    ctx: &super::Context,
    command: RateLimitCommand,
) -> anyhow::Result<()> {
    let store: std::sync::Arc<dyn Store> = super::open_existing(db).await?;
    let limits = RateLimits::new(store.clone());
    let result = async {
        match command {
            RateLimitCommand::List => {
                let list = limits.list().await?;
                if ctx.json {
                    return output::json(&list);
                }
                table(&list);
            }
            RateLimitCommand::Set {
                subscription,
                per,
                interval,
            } => {
                let l = limits.set(&subscription, per, interval, &ctx.actor).await?;
                if ctx.json {
                    return output::json(&l);
                }
                outln!(
                    "subscription {}: at most {} handler runs per {} ms across every worker process (within their refresh, 500 ms by default)",
                    l.subscription,
                    l.per,
                    l.interval_ms
                );
            }
            RateLimitCommand::Remove { subscription } => {
                let l = limits.remove(&subscription).await?;
                if ctx.json {
                    return output::json(&l);
                }
                outln!("subscription {}: no rate limit", l.subscription);
            }
        }
        Ok(())
    }
    .await;
    store.close().await?;
    result
}

fn table(list: &[RateLimit]) {
    if list.is_empty() {
        outln!("no rate limits");
        return;
    }
    let mut t = Table::new(&[
        text("SUBSCRIPTION", 24),
        number("PER"),
        number("INTERVAL MS"),
        text("SET BY", 12),
        text("SET AT", 24),
    ]);
    for l in list {
        t.row(vec![
            l.subscription.clone(),
            l.per.to_string(),
            l.interval_ms.to_string(),
            l.set_by.name.clone(),
            l.set_at.to_string(),
        ]);
    }
    t.print();
}

//! `durabus stats`: what the database can tell about its events, as of the snapshot the
//! `refresh-stats` job keeps (`--fresh` counts now).

use durabus::StatsSnapshot;

use crate::output;
use crate::table::{Table, number, text};

/// `durabus stats`'s options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Count now (a read of every event, about 2 s at a million) and keep the result, instead
    /// of showing the snapshot the `refresh-stats` job kept.
    #[arg(long)]
    pub fresh: bool,
}

pub async fn run(db: &crate::cmd::Db, json: bool, args: Args) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let clock = durabus::store::clock_of(&store);
    let snapshot = if args.fresh {
        StatsSnapshot::refresh(store.as_ref(), clock.as_ref()).await
    } else {
        StatsSnapshot::last_or_refresh(store.as_ref(), clock.as_ref()).await
    };
    store.close().await?;
    let snapshot = snapshot?;
    if json {
        return output::json(&snapshot);
    }
    let stats = &snapshot.stats;
    let s = &stats.by_status;
    outln!(
        "as of       {} (counted in {} ms; --fresh counts now)",
        snapshot.computed_at,
        snapshot.took_ms
    );
    outln!("events      {}", stats.total);
    outln!(
        "by status   pending {}  processing {}  done {}  dlq {}  (dlq rate {:.1} %)",
        s.pending,
        s.processing,
        s.done,
        s.dlq,
        s.dlq_rate * 100.0
    );
    outln!();
    let mut types = Table::new(&[
        text("TYPE", 64),
        number("PENDING"),
        number("PROCESSING"),
        number("DONE"),
        number("DLQ"),
        number("DLQ RATE"),
    ]);
    for (t, c) in &stats.by_type {
        types.row(vec![
            t.clone(),
            c.pending.to_string(),
            c.processing.to_string(),
            c.done.to_string(),
            c.dlq.to_string(),
            format!("{:.1}%", c.dlq_rate * 100.0),
        ]);
    }
    types.print();
    outln!();
    let mut retries = Table::new(&[number("RETRIES"), number("EVENTS")]);
    for (r, n) in &stats.retry_counts {
        retries.row(vec![r.to_string(), n.to_string()]);
    }
    retries.print();
    Ok(())
}

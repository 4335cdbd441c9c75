//! `durabus stats`: what the database can tell about its events.

use durabus::StoreStats;

use crate::output;

pub async fn run(db: &crate::cmd::Db, json: bool) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let stats = StoreStats::collect(store.as_ref()).await;
    store.close().await?;
    let stats = stats?;
    if json {
        return output::json(&stats);
    }
    let s = &stats.by_status;
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
    outln!(
        "{:<32}  {:>8}  {:>10}  {:>8}  {:>6}  {:>8}",
        "TYPE",
        "PENDING",
        "PROCESSING",
        "DONE",
        "DLQ",
        "DLQ RATE"
    );
    for (t, c) in &stats.by_type {
        outln!(
            "{:<32}  {:>8}  {:>10}  {:>8}  {:>6}  {:>7.1}%",
            t,
            c.pending,
            c.processing,
            c.done,
            c.dlq,
            c.dlq_rate * 100.0
        );
    }
    outln!();
    outln!("{:<8}  {:>8}", "RETRIES", "EVENTS");
    for (retries, n) in &stats.retry_counts {
        outln!("{retries:<8}  {n:>8}");
    }
    Ok(())
}

//! `durabus metrics`: the Prometheus text of what the database can tell (the store gauges:
//! depths, ages, the WAL or the pool). Counters belong to a running bus; scrape its `/metrics`.

use durabus::MetricsConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Put before every metric name.
    #[arg(long, default_value = "durabus_")]
    prefix: String,
}

pub async fn run(db: &crate::cmd::Db, args: Args) -> anyhow::Result<()> {
    let store = super::open_existing(db).await?;
    let config = MetricsConfig {
        prefix: args.prefix,
        ..MetricsConfig::default()
    };
    let text = durabus::telemetry::store_metrics_text(&store, &config).await;
    store.close().await?;
    out!("{}", text?);
    Ok(())
}

//! What a database tells the metrics without a running bus: the store gauges, for a tool
//! that inspects a database (`durabus metrics`).

use std::sync::Arc;

use super::MetricsConfig;
use super::{ScrapeInput, Telemetry};
use crate::error::Result;
use crate::store::Store;

/// The Prometheus text of `store`'s gauges (depths, ages, and the store's own: the pool on
/// PostgreSQL, the WAL on SQLite), read now. Counters are a running bus's
/// ([`EventBus::metrics_text`](crate::EventBus::metrics_text)).
pub async fn store_metrics_text(store: &Arc<dyn Store>, config: &MetricsConfig) -> Result<String> {
    config.validate()?;
    let telemetry = Telemetry::gauges_only(config.clone(), super::StoreKind::of(&store.backend()));
    let now = crate::store::clock_of(store).now();
    let gauges = super::read_gauges(store.as_ref(), config, now).await?;
    telemetry.encode(&ScrapeInput {
        store: gauges,
        store_up: true,
        now,
        breakers: Vec::new(),
        process: crate::telemetry::ProcessStats::default(),
        uptime: std::time::Duration::ZERO,
    })
}

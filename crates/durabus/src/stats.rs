//! What the database can tell about its events: counts by status and type, the distribution of
//! retry counts, and the dead-letter rate per type. Unlike [`MetricsSnapshot`](crate::MetricsSnapshot), these
//! survive restarts and see every process's work.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::event::EventStatus;
use crate::store::Store;

/// Counts of one event type.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TypeStats {
    /// Pending events.
    pub pending: u64,
    /// Events being delivered.
    pub processing: u64,
    /// Delivered events.
    pub done: u64,
    /// Dead letters.
    pub dlq: u64,
    /// `dlq / (done + dlq)`; 0 when none has ended.
    pub dlq_rate: f64,
}

impl TypeStats {
    fn add(&mut self, status: EventStatus, n: u64) {
        match status {
            EventStatus::Pending => self.pending += n,
            EventStatus::Processing => self.processing += n,
            EventStatus::Done => self.done += n,
            EventStatus::Dlq => self.dlq += n,
        }
    }

    fn finish(&mut self) {
        let ended = self.done + self.dlq;
        self.dlq_rate = if ended == 0 {
            0.0
        } else {
            self.dlq as f64 / ended as f64
        };
    }
}

/// Event statistics read from a store.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StoreStats {
    /// All events.
    pub total: u64,
    /// Counts by status (every type).
    pub by_status: TypeStats,
    /// Counts by event type.
    pub by_type: BTreeMap<String, TypeStats>,
    /// Events by retry count (every status). JSON object keys are strings: `"0"`, `"1"`, …
    #[cfg_attr(feature = "openapi", schema(value_type = BTreeMap<String, u64>))]
    pub retry_counts: BTreeMap<u32, u64>,
}

impl StoreStats {
    /// Reads the statistics from `store`.
    pub async fn collect(store: &dyn Store) -> Result<StoreStats> {
        let mut stats = StoreStats::default();
        for c in store.counts().await? {
            stats.total += c.count;
            stats.by_status.add(c.status, c.count);
            stats
                .by_type
                .entry(c.event_type)
                .or_default()
                .add(c.status, c.count);
        }
        stats.by_status.finish();
        for t in stats.by_type.values_mut() {
            t.finish();
        }
        for r in store.retry_counts().await? {
            *stats.retry_counts.entry(r.retry_count).or_default() += r.count;
        }
        Ok(stats)
    }
}

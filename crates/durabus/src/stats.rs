//! What the database can tell about its events: counts by status and type, the distribution of
//! retry counts, and the dead-letter rate per type. Unlike [`MetricsSnapshot`](crate::MetricsSnapshot), these
//! survive restarts and see every process's work.
//!
//! Counting them reads every event (a second or two at a million), so they are computed by the
//! `refresh-stats` job (every 5 minutes by default, once across the processes on a database)
//! and kept in the store as a [`StatsSnapshot`]; readers (the admin API, `durabus stats`) get
//! the last one, with when it was computed, in well under a millisecond. The live depths
//! (pending, processing, open dead letters) are the indexed gauges of the metrics and the
//! admin overview.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::clock::{Clock, Timestamp};
use crate::error::{Error, Result};
use crate::event::EventStatus;
use crate::store::Store;

/// Counts of one event type.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TypeStats {
    /// Scheduled events (published for a later time, not yet due or not yet claimed).
    #[serde(default)]
    pub scheduled: u64,
    /// Pending events.
    pub pending: u64,
    /// Events being delivered.
    pub processing: u64,
    /// Delivered events.
    pub done: u64,
    /// Dead letters.
    pub dlq: u64,
    /// Cancelled events.
    #[serde(default)]
    pub cancelled: u64,
    /// `dlq / (done + dlq)`; 0 when none has ended.
    pub dlq_rate: f64,
}

impl TypeStats {
    fn add(&mut self, status: EventStatus, n: u64) {
        match status {
            EventStatus::Scheduled => self.scheduled += n,
            EventStatus::Pending => self.pending += n,
            EventStatus::Processing => self.processing += n,
            EventStatus::Done => self.done += n,
            EventStatus::Dlq => self.dlq += n,
            EventStatus::Cancelled => self.cancelled += n,
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
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
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

/// [`StoreStats`] as of a time: what the `refresh-stats` job (or a refresh by hand) last
/// computed and kept in the store.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsSnapshot {
    /// When they were computed.
    pub computed_at: Timestamp,
    /// How long computing them took (ms): what one refresh costs the database.
    pub took_ms: u64,
    /// The statistics.
    #[serde(flatten)]
    pub stats: StoreStats,
}

/// How a snapshot is kept in the store (not flattened: a flattened map loses its integer keys
/// on the way back).
#[derive(Serialize, Deserialize)]
struct Kept {
    computed_at: Timestamp,
    took_ms: u64,
    stats: StoreStats,
}

impl StatsSnapshot {
    /// Computes the statistics now (a read of every event) and keeps them in the store.
    pub async fn refresh(store: &dyn Store, clock: &dyn Clock) -> Result<StatsSnapshot> {
        let started = std::time::Instant::now();
        let computed_at = clock.now();
        let stats = StoreStats::collect(store).await?;
        let snapshot = StatsSnapshot {
            computed_at,
            took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            stats,
        };
        let kept = Kept {
            computed_at: snapshot.computed_at,
            took_ms: snapshot.took_ms,
            stats: snapshot.stats.clone(),
        };
        let text = serde_json::to_string(&kept)
            .map_err(|e| Error::Internal(format!("encoding the statistics snapshot: {e}")))?;
        store.stats_put(&text).await?;
        Ok(snapshot)
    }

    /// The snapshot last kept, if any (one indexed read).
    pub async fn last(store: &dyn Store) -> Result<Option<StatsSnapshot>> {
        store
            .stats_get()
            .await?
            .map(|text| {
                serde_json::from_str::<Kept>(&text)
                    .map(|k| StatsSnapshot {
                        computed_at: k.computed_at,
                        took_ms: k.took_ms,
                        stats: k.stats,
                    })
                    .map_err(|e| Error::corrupt("the kept statistics snapshot", e))
            })
            .transpose()
    }

    /// The snapshot last kept, or, when there is none yet, one computed now (and kept).
    pub async fn last_or_refresh(store: &dyn Store, clock: &dyn Clock) -> Result<StatsSnapshot> {
        match Self::last(store).await? {
            Some(s) => Ok(s),
            None => Self::refresh(store, clock).await,
        }
    }
}

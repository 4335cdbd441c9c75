//! Lease heartbeats: while this process holds events, their leases are renewed every third of
//! the lease, so other workers do not take over an event whose handler is still running. The
//! store runs this itself, from [`StoreLifecycle::start_background`](crate::store::StoreLifecycle::start_background)
//! until it closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use uuid::Uuid;

use super::sql::PgSql;
use super::{PgStore, q};
use crate::clock::{Clock, Timestamp};
use crate::error::Result;
use crate::event::EventId;
use crate::sync::lock;

/// What a heartbeat needs, shared with the store.
#[derive(Clone)]
pub(super) struct Beat {
    pool: PgPool,
    sql: Arc<PgSql>,
    worker: String,
    lease_ms: i64,
    every: Duration,
    held: Arc<Mutex<HashMap<EventId, Uuid>>>,
}

impl Beat {
    /// Renews the leases of every token this process holds.
    async fn renew(&self, now: Timestamp) -> Result<()> {
        let mut tokens: Vec<Uuid> = lock(&self.held).values().copied().collect();
        if tokens.is_empty() {
            return Ok(());
        }
        tokens.sort_unstable();
        tokens.dedup();
        q(&self.sql.renew)
            .bind(&self.worker)
            .bind(now.as_millis().saturating_add(self.lease_ms))
            .bind(&tokens)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Renews leases every `beat.every` until aborted (the store's close).
pub(super) async fn run(beat: Beat, clock: Arc<dyn Clock>, hook: crate::hook::ErrorHook) {
    let mut tick = tokio::time::interval(beat.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = beat.renew(clock.now()).await {
            tracing::warn!(error = %e, "could not renew leases; retrying at the next beat");
            hook.report(crate::hook::ErrorSource::LeaseRenewal, &e, true);
        }
    }
}

impl PgStore {
    pub(super) fn beat(&self) -> Beat {
        Beat {
            pool: self.pool.clone(),
            sql: self.sql.clone(),
            worker: self.worker.clone(),
            lease_ms: self.lease_ms,
            every: self.heartbeat_interval(),
            held: self.held.clone(),
        }
    }

    /// How often the store renews its leases: a third of [`PgOptions::lease`](super::PgOptions::lease).
    pub fn heartbeat_interval(&self) -> Duration {
        self.lease / 3
    }

    /// Renews now, at `now`, the leases of the events this process holds (the background
    /// heartbeat does this every [`heartbeat_interval`](Self::heartbeat_interval)).
    pub async fn heartbeat(&self, now: Timestamp) -> Result<()> {
        self.check()?;
        self.beat().renew(now).await
    }
}

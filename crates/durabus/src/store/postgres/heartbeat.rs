//! Lease heartbeats: while this process holds events, their leases are renewed every third of
//! the lease, so other workers do not take over an event whose handler is still running. The
//! store runs this itself, from [`StoreLifecycle::start_background`](crate::store::StoreLifecycle::start_background)
//! until it closes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuid::Uuid;

use super::sql::PgSql;
use super::{PgStore, q};
use crate::clock::{Clock, OffsetClock, Timestamp, offset_from};
use crate::error::Result;
use crate::event::EventId;
use crate::sync::lock;

/// What a heartbeat needs, shared with the store.
#[derive(Clone)]
pub(super) struct Beat {
    pool: super::pool::Pool,
    sql: Arc<PgSql>,
    worker: String,
    lease_ms: i64,
    every: Duration,
    held: Arc<Mutex<HashMap<EventId, Uuid>>>,
    channel: String,
    clock: OffsetClock,
}

/// Measures the offset of the database server's clock to this host's and gives it to
/// `clock` (see [`OffsetClock::adjust`]); a large offset is logged when it is taken. A
/// measurement whose round trip took too long is left out.
pub(super) async fn measure_clock(pool: &sqlx::PgPool, clock: &OffsetClock) -> Result<()> {
    let mut conn = pool.acquire().await?;
    let sent = crate::clock::SystemClock.now();
    let theirs: i64 =
        sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8")
            .fetch_one(&mut *conn)
            .await?;
    let received = crate::clock::SystemClock.now();
    if let Some(offset) = offset_from(sent, Timestamp(theirs), received)
        && clock.adjust(offset)
        && offset.abs() >= 1_000
    {
        tracing::warn!(
            offset_ms = offset,
            "this host's clock is {} s {} the database server's; durabus reads the server's time",
            offset.abs() / 1_000,
            if offset > 0 { "behind" } else { "ahead of" }
        );
    }
    Ok(())
}

/// When a statement that sets leases waited for its connection a quarter of the lease or more
/// (a busy pool, a paused process), its leases count from when it got one, not from the time
/// it was asked for: counted from then, they could be born expired, and another worker would
/// take the events over while this one runs them. Shorter waits change nothing, so times stay
/// exact under an injected clock.
pub(super) fn lease_start(now: Timestamp, waited: Duration, lease_ms: i64) -> Timestamp {
    let quarter = Duration::from_millis(u64::try_from(lease_ms / 4).unwrap_or(0));
    if waited >= quarter {
        now.plus(waited)
    } else {
        now
    }
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
        let asked = std::time::Instant::now();
        let mut conn = self.pool.acquire().await?;
        let from = lease_start(now, asked.elapsed(), self.lease_ms);
        q(&self.sql.renew)
            .bind(&self.worker)
            .bind(from.as_millis().saturating_add(self.lease_ms))
            .bind(&tokens)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// The ordering keys' safety net: keyed events that finished by a way that does not pass
    /// through the key's queue (a lease that ran out on an event cancelled during its attempt)
    /// leave it, and the next event of their key becomes due.
    async fn sweep_keys(&self, now: Timestamp) -> Result<()> {
        let mut tx = super::tx::begin(&self.pool).await?;
        let strays = super::keys::strays(&mut tx, &self.sql).await?;
        for id in strays {
            super::keys::leave(&mut tx, &self.sql, &self.channel, id, now.as_millis()).await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// Renews leases (and sweeps the ordering keys) every `beat.every` until aborted (the store's
/// close).
pub(super) async fn run(beat: Beat, clock: Arc<dyn Clock>, hook: crate::hook::ErrorHook) {
    let mut tick = tokio::time::interval(beat.every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = measure_clock(beat.pool.inner(), &beat.clock).await {
            tracing::debug!(error = %e, "could not measure the database server's clock; retrying at the next beat");
        }
        if let Err(e) = beat.renew(clock.now()).await {
            super::liveness::note_error(&e);
            tracing::warn!(error = %e, "could not renew leases; retrying at the next beat");
            hook.report(crate::hook::ErrorSource::LeaseRenewal, &e, true);
        }
        if let Err(e) = beat.sweep_keys(clock.now()).await {
            tracing::warn!(error = %e, "could not sweep the ordering keys; retrying at the next beat");
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
            channel: self.channel.clone(),
            clock: self.clock.clone(),
        }
    }

    /// How often the store renews its leases: a third of [`PgOptions::lease`](super::PgOptions::lease).
    pub fn heartbeat_interval(&self) -> Duration {
        self.lease / 3
    }

    /// Renews now, at `now`, the leases of the events this process holds (the background
    /// heartbeat does this every [`heartbeat_interval`](Self::heartbeat_interval)).
    pub async fn heartbeat(&self, now: Timestamp) -> Result<()> {
        self.noted(async {
            self.check()?;
            self.beat().renew(now).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::lease_start;
    use crate::clock::Timestamp;
    use std::time::Duration;

    #[test]
    fn a_long_wait_for_a_connection_moves_the_lease_start() {
        let now = Timestamp(10_000);
        assert_eq!(lease_start(now, Duration::from_millis(3), 1000), now);
        assert_eq!(lease_start(now, Duration::from_millis(249), 1000), now);
        assert_eq!(
            lease_start(now, Duration::from_millis(1500), 1000),
            Timestamp(11_500)
        );
    }
}

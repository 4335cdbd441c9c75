//! The metrics' store gauges on PostgreSQL: each an indexed lookup (a partial index, or the
//! failure groups kept as records change), never a scan of the event tables; the pool's
//! connections from the pool itself.

use sqlx::Row;

use super::{PgStore, q};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::{PoolGauges, StoreGauges};

/// The gauge statements of schema `s`, in one round trip (public for the query-plan test);
/// `$1` is now in ms, `$2` the start of the window of new failure groups.
pub fn statements(s: &str) -> Vec<String> {
    vec![
        format!("SELECT count(*) FROM {s}.events WHERE status = 'pending'"),
        format!("SELECT count(*) FROM {s}.events WHERE status = 'processing'"),
        format!("SELECT min(next_attempt_at) FROM {s}.events WHERE status = 'pending'"),
        // One row per failure group: its open count is kept as records change.
        format!("SELECT coalesce(sum(open), 0)::bigint FROM {s}.dead_letter_groups"),
        format!("SELECT count(*) FROM {s}.dead_letters WHERE status = 'retrying'"),
        format!(
            "SELECT created_at FROM {s}.dead_letters WHERE status = 'pending' ORDER BY seq LIMIT 1"
        ),
        format!(
            "SELECT count(DISTINCT lease_owner) FROM {s}.events
             WHERE status = 'processing' AND lease_expires_at > $1"
        ),
        format!("SELECT coalesce(sum(count), 0)::bigint FROM {s}.dead_letter_groups"),
        format!("SELECT count(*) FROM {s}.dead_letter_groups WHERE first_seen >= $2"),
        format!("SELECT count(*) FROM {s}.events WHERE status = 'scheduled'"),
        format!("SELECT min(next_attempt_at) FROM {s}.events WHERE status = 'scheduled'"),
        format!("SELECT count(*) FROM {s}.keyed WHERE held_since IS NOT NULL"),
        format!("SELECT min(held_since) FROM {s}.keyed WHERE held_since IS NOT NULL"),
    ]
}

/// Dead-letter records by type and status, kept by triggers (a small table; public for the
/// query-plan test).
pub fn types_statement(s: &str) -> String {
    format!("SELECT event_type, status, count FROM {s}.dead_letter_types WHERE count > 0")
}

/// All of [`statements`] as one query returning one row.
fn combined(s: &str) -> String {
    let parts: Vec<String> = statements(s)
        .into_iter()
        .enumerate()
        .map(|(i, sql)| format!("({sql}) AS g{i}"))
        .collect();
    format!("SELECT {}", parts.join(", "))
}

impl PgStore {
    /// The pool's connections now, and the bus's statements waiting for one (read from the
    /// pool, no statement). Waiters are the first sign of a pool too small for the load:
    /// see [`PgOptions::max_connections`](super::PgOptions::max_connections).
    pub fn pool_gauges(&self) -> PoolGauges {
        let size = u64::from(self.pool.size());
        let idle = self.pool.num_idle() as u64;
        PoolGauges {
            idle,
            active: size.saturating_sub(idle),
            max: u64::from(self.pool.options().get_max_connections()),
            waiting: self.pool.waiting(),
        }
    }

    /// The gauges, in one round trip, and the pool's connections.
    pub(super) async fn read_gauges(&self, now: Timestamp) -> Result<StoreGauges> {
        self.check()?;
        // Before the statement, which may wait for a connection itself.
        let pool = self.pool_gauges();
        let row = q(&combined(&self.sql.schema))
            .bind(now.as_millis())
            .bind(now.minus(crate::store::NEW_GROUP_WINDOW).as_millis())
            .fetch_one(&mut *self.pool.acquire().await?)
            .await?;
        let count =
            |i: usize| -> Result<u64> { Ok(u64::try_from(row.try_get::<i64, _>(i)?).unwrap_or(0)) };
        let time = |i: usize| -> Result<Option<Timestamp>> {
            Ok(row.try_get::<Option<i64>, _>(i)?.map(Timestamp))
        };
        let open = count(3)?;
        let retrying = count(4)?;
        let dead_letter_types = q(&types_statement(&self.sql.schema))
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?
            .into_iter()
            .map(|r| -> Result<(String, String, u64)> {
                Ok((
                    r.try_get(0)?,
                    r.try_get(1)?,
                    u64::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StoreGauges {
            pending: count(0)?,
            scheduled: count(9)?,
            next_scheduled_at: time(10)?,
            processing: count(1)?,
            oldest_due_at: time(2)?,
            dead_letters_pending: open.saturating_sub(retrying),
            dead_letters_retrying: retrying,
            oldest_pending_dead_letter_at: time(5)?,
            pool: Some(pool),
            wal_bytes: None,
            live_workers: Some(count(6)?),
            dead_letter_records: count(7)?,
            failure_groups_new: count(8)?,
            held_keys: count(11)?,
            oldest_held_key_at: time(12)?,
            failure_groups: Vec::new(),
            dead_letter_types,
            pauses: Vec::new(),
            breakers: Vec::new(),
            concurrency: Vec::new(),
        })
    }
}

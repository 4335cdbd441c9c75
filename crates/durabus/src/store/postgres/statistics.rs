//! Fresh planner statistics for the events table while a backlog builds.
//!
//! A queue's table swings between empty and a burst of many thousand events. Analysed while
//! nearly empty (a new schema, a drained queue), PostgreSQL plans the claim's due events as a
//! bitmap scan and a sort: every claim then reads every due event, not the few it takes, claims
//! slow down as the backlog grows, and the workers never catch up (end to end through four
//! worker processes halved on the benchmark machine). Autovacuum analyses the table only about
//! once a minute, and only after enough changes. So a process whose claim comes back full (a
//! backlog) analyses the table itself, at most once per [`INTERVAL`], on a task of its own,
//! and only if no other process is analysing it at that moment. One analysis of a
//! representative table lasts: the planner scales its row counts with the table's size. The
//! analysis samples few rows, waits at most [`LOCK_TIMEOUT`] for its lock and runs at most
//! [`STATEMENT_TIMEOUT`], so it never holds a pooled connection for long.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::pool::Pool;
use super::q;

/// The least time between two analyses started by one process.
pub(super) const INTERVAL: Duration = Duration::from_secs(30);

/// When this process last started an analysis of the events table.
#[derive(Debug, Default, Clone)]
pub(super) struct Analyser {
    last: Arc<Mutex<Option<Instant>>>,
}

/// Whether an analysis is due at `now`, the last one having started at `last`.
fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= INTERVAL)
}

impl Analyser {
    /// A claim came back full: analyses `schema`'s events table on a task of its own, if this
    /// process has not in the last [`INTERVAL`] and no other process is doing it now. Failures
    /// (a role that does not own the table, say) are logged and change nothing.
    pub(super) fn backlog(&self, pool: &Pool, schema: &str) {
        let now = Instant::now();
        {
            let Ok(mut last) = self.last.lock() else {
                return;
            };
            if !due(*last, now) {
                return;
            }
            *last = Some(now);
        }
        let pool = pool.clone();
        let schema = schema.to_owned();
        tokio::spawn(async move {
            if let Err(e) = analyse(&pool, &schema).await {
                tracing::debug!(error = %e, "could not analyse the events table");
            }
        });
    }
}

/// How long the analysis waits for its lock on the table (autovacuum may hold it) before it
/// gives up: it must not sit on one of the pool's connections, which claims and the lease
/// heartbeat need.
const LOCK_TIMEOUT: &str = "100ms";

/// The longest an analysis may run.
const STATEMENT_TIMEOUT: &str = "5s";

/// The statistics target of the analysis: a sample of 300 times this many rows. The claim's
/// plan needs the table's size and how many of its rows wait, not fine histograms; a small
/// sample keeps the analysis from taking the server's CPU while a backlog is worked off
/// (autovacuum's later analyses use the server's default again).
const STATISTICS_TARGET: &str = "10";

/// `ANALYZE` of the events table, unless another process holds the analysis lock.
async fn analyse(pool: &Pool, schema: &str) -> crate::error::Result<()> {
    let mut tx = super::tx::begin(pool).await?;
    let mine: bool = sqlx::Row::try_get(
        &q(
            "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 7110)),
                   set_config('lock_timeout', $2, true),
                   set_config('statement_timeout', $3, true),
                   set_config('default_statistics_target', $4, true)",
        )
        .bind(format!("{schema}.events"))
        .bind(LOCK_TIMEOUT)
        .bind(STATEMENT_TIMEOUT)
        .bind(STATISTICS_TARGET)
        .fetch_one(&mut *tx)
        .await?,
        0,
    )?;
    if mine {
        q(&format!("ANALYZE {schema}.events"))
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_analysis_is_due_first_and_then_once_per_interval() {
        let start = Instant::now();
        assert!(due(None, start));
        assert!(!due(Some(start), start));
        assert!(!due(
            Some(start),
            start + INTERVAL - Duration::from_millis(1)
        ));
        assert!(due(Some(start), start + INTERVAL));
    }
}

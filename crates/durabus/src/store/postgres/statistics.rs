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
//! representative table lasts: the planner scales its row counts with the table's size.

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

/// `ANALYZE` of the events table, unless another process holds the analysis lock.
async fn analyse(pool: &Pool, schema: &str) -> crate::error::Result<()> {
    let mut tx = super::tx::begin(pool).await?;
    let mine: bool = sqlx::Row::try_get(
        &q("SELECT pg_try_advisory_xact_lock(hashtextextended($1, 7110))")
            .bind(format!("{schema}.events"))
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

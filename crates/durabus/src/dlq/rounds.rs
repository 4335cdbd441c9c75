//! The dead-letter queue's scheduled rounds, written once above the store: the auto retry
//! (`dead-letter-auto-retry`), the retention of closed records (`cleanup-dead-letters`) and
//! the specification's purge of dead events by age. Each works in chunks of [`CHUNK`]
//! records, one transaction each, so the write lock is never held for a whole round.

use super::filter::DeadLetterFilter;
use super::lifecycle::Action;
use super::record::DeadLetterStatus;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{ErrorKind, Result};
use crate::store::{ActBatch, Store};
use crate::telemetry::Telemetry;

/// Records one chunk of a round acts on (one transaction).
pub const CHUNK: usize = 500;

/// Only records in `statuses`.
fn only(statuses: &[DeadLetterStatus]) -> Option<DeadLetterFilter> {
    Some(DeadLetterFilter {
        status: statuses.to_vec(),
        ..DeadLetterFilter::default()
    })
}

/// The auto retry as of `now`: every `pending` record whose next auto retry is due is sent
/// back for delivery, as [`Actor::auto_retry`]. A record that changed since it was found due
/// (resolved, abandoned, or its event no longer dead) is passed over and logged. Returns how
/// many were sent back.
pub async fn auto_retry(
    store: &dyn Store,
    now: Timestamp,
    telemetry: Option<&Telemetry>,
) -> Result<u64> {
    let mut total = 0;
    loop {
        let due = store.dlq_auto_retry_due(now, CHUNK).await?;
        if due.is_empty() {
            break;
        }
        let batch = ActBatch {
            still_matching: only(&[DeadLetterStatus::Pending]),
            ..ActBatch::new(due, Action::Retry, Actor::auto_retry())
        };
        let report = store.dlq_act(batch, now).await?;
        for (id, e) in &report.skipped {
            tracing::warn!(event_id = %id, error = %e, "auto retry skipped");
        }
        if let Some(t) = telemetry {
            t.dead_letter_action("retry", ActorKind::Auto.as_str(), report.applied);
        }
        total += report.applied;
        // Fewer than a chunk sent back: the rest (if any) could not be, and would be found
        // again at once.
        if report.applied < CHUNK as u64 {
            break;
        }
    }
    Ok(total)
}

/// Retention of closed records: deletes `resolved` and `abandoned` records last changed at or
/// before `cutoff`, with their events if those are still dead (actor `retention`). Returns how
/// many.
pub async fn cleanup_closed(store: &dyn Store, cutoff: Timestamp, now: Timestamp) -> Result<u64> {
    let actor = Actor::new("retention", ActorKind::Auto);
    let mut total = 0;
    loop {
        let old = store.dlq_closed_before(cutoff, CHUNK).await?;
        if old.is_empty() {
            break;
        }
        let batch = ActBatch {
            still_matching: only(&[DeadLetterStatus::Resolved, DeadLetterStatus::Abandoned]),
            ..ActBatch::new(old, Action::Purge, actor.clone())
        };
        let report = store.dlq_act(batch, now).await?;
        total += report.applied;
        if report.applied < CHUNK as u64 {
            break;
        }
    }
    Ok(total)
}

/// The specification's purge: deletes dead events (status `dlq`) created at or before
/// `cutoff`, with their records (actor `purge`, an application's). An event without a record
/// (never expected) is deleted alone. Returns how many events.
pub async fn purge_dead(store: &dyn Store, cutoff: Timestamp, now: Timestamp) -> Result<u64> {
    let actor = Actor::new("purge", ActorKind::Library);
    let mut total = 0;
    loop {
        let dead = store.dlq_dead_before(cutoff, CHUNK).await?;
        let found = dead.len();
        if found == 0 {
            break;
        }
        let report = store
            .dlq_act(ActBatch::new(dead, Action::Purge, actor.clone()), now)
            .await?;
        let orphans: Vec<_> = report
            .skipped
            .iter()
            .filter(|(_, e)| e.kind() == ErrorKind::NotFound)
            .map(|(id, _)| *id)
            .collect();
        let deleted = report.applied + store.dlq_delete_dead_events(orphans, now).await?;
        total += deleted;
        if found < CHUNK || deleted == 0 {
            break;
        }
    }
    Ok(total)
}

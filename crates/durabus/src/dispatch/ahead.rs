//! A claim that runs beside the deliveries. While a backlog is being worked through (the last
//! claim came back full), the worker loop starts the next claim in a task of its own once its
//! local queue has run down to half of what a claim may hold. The events are then at hand
//! when the queue empties, instead of the loop waiting a store round trip with its delivery
//! slots idle.
//!
//! What the worker holds stays within the same bound as for any claim: the events running,
//! queued and being claimed are at most the delivery slots plus the prefetch (see
//! [`claim_limit`](super::worker::claim_limit) and [`room`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use super::Dispatcher;
use crate::error::Result;
use crate::event::Event;

/// A claim's result and the limit it was made with (a full claim suggests more is due).
pub(crate) type Claimed = (Result<Vec<Event>>, usize);

/// Claims up to `limit` due events, timing the store call for the metrics.
pub(crate) async fn claim(dispatcher: &Dispatcher, limit: usize) -> Claimed {
    let started = Instant::now();
    let claimed = dispatcher
        .store()
        .claim_due(dispatcher.clock().now(), limit)
        .await;
    dispatcher
        .telemetry()
        .store_call(crate::telemetry::StoreCall::Claim, started.elapsed());
    (claimed, limit)
}

/// Logs and reports a failed claim; the loop claims again after `pause`.
pub(crate) fn claim_failed(dispatcher: &Dispatcher, e: &crate::Error, pause: Duration) {
    tracing::error!(error = %e, kind = %e.kind(), ?pause, "claiming due events failed; retrying");
    dispatcher
        .config()
        .on_error
        .report(crate::hook::ErrorSource::Claim, e, true);
}

/// How many events a claim started now, ahead of need, may take: the room `queued` events
/// leave under `bound` (what one claim may hold: the free slots plus the prefetch), if that
/// room is at least half the bound. A smaller room would mean many small claims, each a store
/// round trip, for events the queue will not need before the next one could start.
pub(crate) fn room(bound: usize, queued: usize) -> Option<usize> {
    let room = bound.saturating_sub(queued);
    (room > 0 && room >= bound.div_ceil(2)).then_some(room)
}

/// The claim running ahead of need, if any.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    task: Option<JoinHandle<Claimed>>,
}

impl Ahead {
    /// Whether a claim is running (or finished and not yet taken).
    pub(crate) fn running(&self) -> bool {
        self.task.is_some()
    }

    /// Whether a claim has finished and its result waits to be taken.
    pub(crate) fn finished(&self) -> bool {
        self.task.as_ref().is_some_and(JoinHandle::is_finished)
    }

    /// Starts claiming up to `limit` events in a task of its own, which reports a failure
    /// when it happens (the loop may be waiting for a slot meanwhile); the loop's ordinary
    /// claim follows at once.
    pub(crate) fn start(&mut self, dispatcher: &Arc<Dispatcher>, limit: usize) {
        let dispatcher = dispatcher.clone();
        self.task = Some(tokio::spawn(async move {
            let claimed = claim(&dispatcher, limit).await;
            if let Err(e) = &claimed.0 {
                claim_failed(&dispatcher, e, Duration::ZERO);
            }
            claimed
        }));
    }

    /// Waits for the running claim and takes its result: `None` if none runs (or its task
    /// panicked, before any event could be returned). Cancel-safe: dropped while it waits, the
    /// claim keeps running and a later call takes its result, so its events are never lost
    /// track of.
    pub(crate) async fn take(&mut self) -> Option<Claimed> {
        let task = self.task.as_mut()?;
        let result = task.await;
        self.task = None;
        result.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::room;

    #[test]
    fn a_claim_ahead_takes_the_room_the_queue_leaves_once_it_is_half_the_bound() {
        // Fast handlers (a bound of 256): once the queue is down to half, the rest is claimed.
        assert_eq!(room(256, 200), None);
        assert_eq!(room(256, 129), None);
        assert_eq!(room(256, 128), Some(128));
        assert_eq!(room(256, 0), Some(256));
        // Slots all busy, no rate yet (a bound of the prefetch alone): half of it at least.
        assert_eq!(room(16, 16), None);
        assert_eq!(room(16, 9), None);
        assert_eq!(room(16, 8), Some(8));
        // Never a claim of nothing, never past the bound.
        assert_eq!(room(0, 0), None);
        assert_eq!(room(1, 0), Some(1));
        assert_eq!(room(3, 1), Some(2));
        assert_eq!(room(10, 50), None);
    }
}

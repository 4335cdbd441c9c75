//! The low-level worker API for applications that run their own loop: take one due event,
//! handle it, report the result.

use crate::bus::EventBus;
use crate::error::{Error, Result};
use crate::event::{Event, EventId};
use crate::retry::RetryPolicy;
use crate::store::Outcome;

impl EventBus {
    /// For applications that run their own loop instead of [`start`](Self::start)ing the
    /// bus's workers: call once at start-up, before the first [`poll`](Self::poll). Sends events
    /// a crashed process left in `processing` back for delivery (counting the interrupted
    /// attempt, as `start` does) and, on PostgreSQL, starts the heartbeat that renews the
    /// leases of polled events until [`shutdown`](Self::shutdown). Returns how many events were
    /// recovered. (Do not also call `start` unless you want the bus's workers: they deliver
    /// every due event to the subscribed handlers, and an event nobody subscribes to is done.)
    pub async fn recover(&self) -> Result<u64> {
        if self.is_shutdown() {
            return Err(Error::Shutdown);
        }
        let recovered = self
            .inner
            .store
            .recover_processing(self.inner.clock.now())
            .await?;
        self.start_heartbeat().await;
        Ok(recovered)
    }

    /// Takes one due event for this caller, or `None` if nothing is due; never waits. The event
    /// is `processing` and held by this process (on PostgreSQL: leased, renewed after
    /// [`recover`](Self::recover) or [`start`](Self::start)) until
    /// [`finalize`](Self::finalize) reports its result.
    ///
    /// ```no_run
    /// # async fn work(bus: durabus::EventBus) -> durabus::Result<()> {
    /// bus.recover().await?; // once, at start-up
    /// while let Some(event) = bus.poll().await? {
    ///     let ok = !event.payload.is_empty(); // handle it
    ///     bus.finalize(event.id, ok).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn poll(&self) -> Result<Option<Event>> {
        if self.is_shutdown() {
            return Err(Error::Shutdown);
        }
        let mut events = self
            .inner
            .store
            .claim_due(self.inner.clock.now(), 1)
            .await?;
        Ok(events.pop())
    }

    /// Reports the result of an event taken with [`poll`](Self::poll). `true`: the event is
    /// done. `false`: a failed attempt, retried on the retry schedule of its matching
    /// subscriptions (the bus default otherwise) and dead-lettered when none are left.
    ///
    /// Fails with [`Error::NotHeld`] if this process no longer holds the event (finalized
    /// already, or its lease expired and another worker took it over), and
    /// [`Error::EventNotFound`] for an unknown id.
    pub async fn finalize(&self, id: EventId, success: bool) -> Result<()> {
        let event = self
            .inner
            .store
            .get_event(id)
            .await?
            .ok_or_else(|| Error::EventNotFound(id.to_string(), ""))?;
        let now = self.inner.clock.now();
        let outcome = if success {
            Outcome::Done {
                id,
                delivered: event.delivered,
            }
        } else {
            let subs = self.inner.registry.matching(&event.event_type);
            let policy = RetryPolicy::merge(
                &self.inner.config.retry,
                subs.iter().filter_map(|s| s.info.retry.as_ref()),
            );
            let attempt = event.retry_count.saturating_add(1);
            let mut errors = event.errors;
            errors.push(format!("attempt {attempt}: finalized as failed"));
            if attempt > policy.max_retries {
                Outcome::Dead {
                    id,
                    retry_count: attempt,
                    errors,
                    delivered: event.delivered,
                }
            } else {
                Outcome::Retry {
                    id,
                    retry_count: attempt,
                    errors,
                    delivered: event.delivered,
                    next_attempt_at: now.plus(policy.delay_with_jitter(attempt + 1)),
                }
            }
        };
        if self.inner.store.record(outcome, now).await? {
            Ok(())
        } else {
            Err(Error::NotHeld(id.to_string()))
        }
    }
}

//! The low-level worker API for applications that run their own loop: take one due event,
//! handle it, report the result.

use crate::bus::EventBus;
use crate::error::{Error, Result};
use crate::event::{Event, EventId};

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
        self.recover_and_start_store().await
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
        let now = self.clock().now();
        if self.dispatcher().paused().bus(now).is_some() {
            // The whole bus is paused (as a started bus last read the pauses): what the store
            // set aside for the next claim goes back.
            self.store().give_back_set_aside(now).await?;
            return Ok(None);
        }
        let mut events = self.store().claim_due(now, 1).await?;
        Ok(events.pop())
    }

    /// Reports the result of an event taken with [`poll`](Self::poll). `true`: the event is
    /// done. `false`: a failed attempt, retried on the retry schedule of its matching
    /// subscriptions (the bus default otherwise) and dead-lettered when none are left; it is
    /// logged (subscription `poll/finalize`) and counted in [`metrics`](Self::metrics) like a
    /// handler's failure.
    ///
    /// Fails with [`Error::NotHeld`] if this process no longer holds the event (finalized
    /// already, or its lease expired and another worker took it over), and
    /// [`Error::EventNotFound`] for an unknown id.
    pub async fn finalize(&self, id: EventId, success: bool) -> Result<()> {
        self.dispatcher().finalize(id, success).await
    }
}

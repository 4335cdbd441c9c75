//! Cancelling events from the bus: see [`crate::cancel`].

use super::EventBus;
use crate::cancel::{CancelRequest, Cancellation};
use crate::error::Result;
use crate::event::EventId;

impl EventBus {
    /// Cancels an event that has not been delivered, for every subscription or (with
    /// [`CancelRequest::subscription`]) for one, under the rules of [`crate::cancel`], and keeps
    /// the record (actor, reason, time), which it returns. A waiting event is cancelled at once
    /// ([`CancelOutcome::Cancelled`](crate::cancel::CancelOutcome::Cancelled)); a running one
    /// finishes its attempt and no retry follows it
    /// ([`CancelOutcome::Running`](crate::cancel::CancelOutcome::Running)).
    ///
    /// Fails with [`Error::Invalid`](crate::Error::Invalid) for a blank reason,
    /// [`Error::EventNotFound`](crate::Error::EventNotFound) for an unknown event and
    /// [`Error::Conflict`](crate::Error::Conflict) for one that has finished (or whose
    /// subscription has handled it already); nothing changes then.
    ///
    /// ```no_run
    /// # async fn f(bus: durabus::EventBus, id: durabus::EventId) -> durabus::Result<()> {
    /// use durabus::{Actor, ActorKind, cancel::CancelRequest};
    /// let done = bus
    ///     .cancel(CancelRequest {
    ///         event_id: id,
    ///         subscription: None,
    ///         actor: Actor::new("billing-service", ActorKind::Library),
    ///         reason: "the order was withdrawn".into(),
    ///     })
    ///     .await?;
    /// println!("{:?}", done.outcome);
    /// # Ok(()) }
    /// ```
    pub async fn cancel(&self, request: CancelRequest) -> Result<Cancellation> {
        self.store()
            .cancel_event(request, self.clock().now())
            .await
            .map_err(Self::map_closed)
    }

    /// Every cancellation of an event, oldest first.
    pub async fn cancellations(&self, event_id: EventId) -> Result<Vec<Cancellation>> {
        self.store().cancellations(event_id).await
    }
}

//! The cancel store's trait: cancels applied under the rules of [`crate::cancel`], and their
//! records.

use async_trait::async_trait;

use crate::cancel::{CancelRequest, Cancellation};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;

use super::sealed;

/// Cancels (see [`crate::cancel`]).
#[async_trait]
pub trait CancelStore: sealed::Sealed + Send + Sync + 'static {
    /// Applies `request` at `now` in one transaction: reads the event, asks
    /// [`cancel::plan`](crate::cancel::plan), applies it and records a [`Cancellation`], which
    /// it returns. Fails with [`Error::EventNotFound`](crate::Error::EventNotFound) for an
    /// unknown event and [`Error::Conflict`](crate::Error::Conflict) for one the rules refuse;
    /// nothing changes then.
    async fn cancel_event(&self, request: CancelRequest, now: Timestamp) -> Result<Cancellation>;

    /// Every cancellation of an event, oldest first.
    async fn cancellations(&self, event_id: EventId) -> Result<Vec<Cancellation>>;
}

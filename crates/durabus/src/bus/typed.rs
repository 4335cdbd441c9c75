//! Typed events from the bus: see [`crate::typed`].

use super::EventBus;
use super::SubscriptionId;
use crate::error::Result;
use crate::event::{Event, EventId, NewEvent};
use crate::handler::{HandlerResult, SubscribeOptions};
use crate::typed::{TypedEvent, untyped};

impl EventBus {
    /// [`publish`](Self::publish) of `event` under `E::EVENT_TYPE`: stores it, delivers it,
    /// waits for the first attempt and returns its id.
    pub async fn publish_typed<E: TypedEvent>(&self, event: &E) -> Result<EventId> {
        self.publish_event(NewEvent::typed(event)?).await
    }

    /// [`enqueue`](Self::enqueue) of `event` under `E::EVENT_TYPE`: stores it and returns its
    /// id; the workers deliver it.
    pub async fn enqueue_typed<E: TypedEvent>(&self, event: &E) -> Result<EventId> {
        self.enqueue_event(NewEvent::typed(event)?).await
    }

    /// Subscribes `handler` to `E::EVENT_TYPE`: it is called with the payload as an `E` and
    /// the event (id, metadata, attempt). A payload that does not decode into `E` fails the
    /// attempt for good, naming the type and the field: the event is dead-lettered at once,
    /// not retried, and the handler is not called. Fails like [`subscribe`](Self::subscribe).
    pub async fn subscribe_typed<E, F, Fut>(
        &self,
        handler: F,
        options: SubscribeOptions,
    ) -> Result<SubscriptionId>
    where
        E: TypedEvent,
        F: Fn(E, Event) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.subscribe(E::EVENT_TYPE, untyped(handler), options)
            .await
    }
}

//! Typed events: a Rust type that names its event type, published and handled as itself.
//!
//! ```no_run
//! use durabus::{Event, EventBus, SubscribeOptions, TypedEvent};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize)]
//! struct OrderPaid {
//!     order: u64,
//!     amount_cents: u64,
//! }
//!
//! impl TypedEvent for OrderPaid {
//!     const EVENT_TYPE: &'static str = "order.paid";
//! }
//!
//! # async fn demo(bus: EventBus) -> durabus::Result<()> {
//! bus.subscribe_typed(
//!     |paid: OrderPaid, event: Event| async move {
//!         println!("order {} paid ({} cents), attempt {}", paid.order, paid.amount_cents, event.attempt());
//!         Ok(())
//!     },
//!     SubscribeOptions::default().name("receipts"),
//! )
//! .await?;
//! bus.publish_typed(&OrderPaid { order: 7, amount_cents: 1250 }).await?;
//! # Ok(()) }
//! ```
//!
//! A stored payload that does not deserialise into the handler's type (an older shape, a
//! publish through the untyped API with a mistake in it) fails its attempt with a
//! [`Permanent`] error that names the type and the field: the event
//! goes to the dead-letter queue at once, not retried (a retry cannot mend it), and the
//! handler is not called. The untyped API (`publish`, `subscribe`) stays as it is.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::event::{Event, NewEvent};
use crate::handler::{HandlerFuture, HandlerResult, Permanent};

/// A payload type that names its event type. Implement it by hand (one constant); the
/// payload is serialised with serde.
pub trait TypedEvent: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Its event type (`order.paid`): the name it is published under and subscribed to.
    const EVENT_TYPE: &'static str;
}

impl NewEvent {
    /// An event of `E::EVENT_TYPE` with `event` as its payload. Fails like [`NewEvent::new`].
    pub fn typed<E: TypedEvent>(event: &E) -> Result<NewEvent> {
        NewEvent::new(E::EVENT_TYPE, event)
    }
}

impl Event {
    /// The payload as an `E`. Fails with [`Error::InvalidPayload`] naming the type and the
    /// field that does not fit (`amount_cents: invalid type: string "ten", expected u64`).
    pub fn decode<E: TypedEvent>(&self) -> Result<E> {
        let de = &mut serde_json::Deserializer::from_str(&self.payload);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let at = e.path().to_string();
            let field = if at == "." {
                "at the top level".to_owned()
            } else {
                format!("field {at}")
            };
            Error::InvalidPayload(format!(
                "the payload of event {} is not a {} ({}): {field}: {}",
                self.id,
                E::EVENT_TYPE,
                std::any::type_name::<E>(),
                e.inner()
            ))
        })
    }
}

/// Wraps a typed handler as an untyped one: decodes the payload, calls `handler` with it and
/// the event, and fails for good (no retry) when the payload does not decode.
pub(crate) fn untyped<E, F, Fut>(
    handler: F,
) -> impl Fn(Event) -> HandlerFuture + Send + Sync + 'static
where
    E: TypedEvent,
    F: Fn(E, Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    move |event: Event| -> HandlerFuture {
        match event.decode::<E>() {
            Ok(value) => Box::pin(handler(value, event)),
            Err(e) => Box::pin(std::future::ready(Err(Permanent::new(e).into()))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Paid {
        order: u64,
        lines: Vec<Line>,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Line {
        cents: u64,
    }

    impl TypedEvent for Paid {
        const EVENT_TYPE: &'static str = "order.paid";
    }

    fn stored(payload: &str) -> Event {
        let mut e = NewEvent::new("order.paid", &serde_json::json!({}))
            .unwrap()
            .into_event(crate::EventStatus::Pending, crate::Timestamp(0));
        e.payload = payload.to_owned();
        e
    }

    #[test]
    fn a_typed_event_round_trips_and_a_bad_shape_names_the_field() {
        let paid = Paid {
            order: 7,
            lines: vec![Line { cents: 5 }],
        };
        let new = NewEvent::typed(&paid).unwrap();
        assert_eq!(new.event_type, "order.paid");
        assert_eq!(stored(&new.payload).decode::<Paid>().unwrap(), paid);
        let err = stored(r#"{"order":7,"lines":[{"cents":"five"}]}"#)
            .decode::<Paid>()
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("order.paid"), "{text}");
        assert!(text.contains("field lines[0].cents"), "{text}");
        assert!(text.contains("invalid type: string"), "{text}");
        let text = stored(r#"{"lines":[]}"#)
            .decode::<Paid>()
            .unwrap_err()
            .to_string();
        assert!(text.contains("missing field `order`"), "{text}");
    }
}

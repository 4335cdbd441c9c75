//! `tracing` spans named and attributed after the OpenTelemetry messaging semantic conventions:
//! one `send` span for each publish (producer) and one `process` span for each handler run of a
//! delivery attempt (consumer), inside which the handler runs, so its own logs and spans nest
//! under it. Without a subscriber interested in the `durabus` target nothing is built: the
//! macros check the callsite's interest before they evaluate a field.
//!
//! | attribute | on | value |
//! |---|---|---|
//! | `otel.name` | both | `send {type}`, `process {type}` (`send` alone for a batch of several types) |
//! | `otel.kind` | both | `producer`, `consumer` |
//! | `messaging.system` | both | `durabus` |
//! | `messaging.operation.type` | both | `send`, `process` |
//! | `messaging.operation.name` | both | `publish`, `enqueue`, `enqueue_batch`, `outbox`; `deliver`, `replay` |
//! | `messaging.destination.name` | both | the event type (a batch's, if it has one) |
//! | `messaging.message.id` | both | the event id (not on a batch of several) |
//! | `messaging.batch.message_count` | send | events in the call, when more than one (integer) |
//! | `messaging.consumer.group.name` | process | the subscription's name, or its pattern |
//! | `durabus.attempt` | process | the delivery attempt, 1 for the first (integer) |
//! | `durabus.outcome` | process | `ok`, `error`, `timeout` or `panic`, when the handler ends |
//! | `otel.status_code`, `error.type` | process | `ERROR` and the outcome, when it failed |

use tracing::Span;
use tracing::field::Empty;

use crate::event::{Event, NewEvent};
use crate::telemetry::RunResult;

/// The target every span of the bus is emitted under (filter on it: `RUST_LOG=durabus=info`).
pub const TARGET: &str = "durabus";

/// A producer span for a call that stores `events` (`operation`: `publish`, `enqueue`,
/// `enqueue_batch`, `outbox`). With the `opentelemetry` feature its context is written into
/// each event's metadata (see `context`).
pub(crate) fn send(operation: &'static str, events: &mut [NewEvent]) -> Span {
    let span = tracing::info_span!(
        target: "durabus",
        "send",
        otel.name = Empty,
        otel.kind = "producer",
        messaging.system = "durabus",
        messaging.operation.type = "send",
        messaging.operation.name = operation,
        messaging.destination.name = Empty,
        messaging.message.id = Empty,
        messaging.batch.message_count = Empty,
    );
    if span.is_disabled() {
        return span;
    }
    let first = events.first().map(|e| e.event_type.as_str());
    let one_type = first.filter(|t| events.iter().all(|e| e.event_type == *t));
    match one_type {
        Some(t) => {
            span.record("otel.name", format!("send {t}"));
            span.record("messaging.destination.name", t);
        }
        None => {
            span.record("otel.name", "send");
        }
    }
    #[cfg(feature = "opentelemetry")]
    super::context::inject(&span, events);
    match events {
        [one] => {
            span.record("messaging.message.id", tracing::field::display(one.id));
        }
        many => {
            // An integer attribute, as above.
            span.record(
                "messaging.batch.message_count",
                i64::try_from(many.len()).unwrap_or(i64::MAX),
            );
        }
    }
    span
}

/// A consumer span for one handler's run of `event` (`operation`: `deliver`, or `replay` for
/// a replay that runs handlers itself); the handler runs inside it. With the `opentelemetry`
/// feature it continues the trace the event carries on its first delivery and links to it
/// otherwise (see `context`).
pub(crate) fn process(operation: &'static str, event: &Event, subscription: &str) -> Span {
    // The id and the name are written out here, without the formatting machinery a `%` field
    // goes through (the layer copies a `&str` as it is).
    let mut id = [0u8; uuid::fmt::Hyphenated::LENGTH];
    let mut name = Name::default();
    let span = tracing::info_span!(
        target: "durabus",
        "process",
        otel.name = name.of("process ", &event.event_type),
        otel.kind = "consumer",
        messaging.system = "durabus",
        messaging.operation.type = "process",
        messaging.operation.name = operation,
        messaging.destination.name = event.event_type.as_str(),
        messaging.message.id = &*event.id.0.hyphenated().encode_lower(&mut id),
        messaging.consumer.group.name = subscription,
        // An integer attribute: `tracing-opentelemetry` turns an unsigned one into a string.
        durabus.attempt = i64::from(event.attempt()),
        durabus.outcome = Empty,
        otel.status_code = Empty,
        error.type = Empty,
    );
    #[cfg(feature = "opentelemetry")]
    super::context::adopt(
        &span,
        event,
        operation == "deliver" && event.first_delivery(),
    );
    span
}

/// Runs `future` inside `span`, entered around each poll as `tracing`'s `Instrumented` does, but
/// not around the future's drop: a handler's run that finished holds nothing to drop, and
/// `Instrumented` enters its span once more to drop it, a second enter and exit (about 2,000
/// instructions with the OpenTelemetry layer) for each delivery. A run dropped before it ends
/// (the bus shutting down) drops its state outside the span.
pub(crate) async fn inside<F: Future>(span: &Span, future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let _in = span.enter();
        future.as_mut().poll(cx)
    })
    .await
}

/// A span's name, `{operation} {event type}`, written into a buffer on the stack (a longer
/// one on the heap): built for each delivery, it skips the formatting machinery.
struct Name {
    short: [u8; 128],
    long: String,
}

impl Default for Name {
    fn default() -> Self {
        Name {
            short: [0; 128],
            long: String::new(),
        }
    }
}

impl Name {
    /// `operation` followed by `event_type`.
    fn of<'a>(&'a mut self, operation: &str, event_type: &str) -> &'a str {
        let (a, b) = (operation.as_bytes(), event_type.as_bytes());
        let len = a.len() + b.len();
        if len <= self.short.len() {
            self.short[..a.len()].copy_from_slice(a);
            self.short[a.len()..len].copy_from_slice(b);
            // Two whole strings end to end are UTF-8 again; the check cannot fail.
            if let Ok(s) = std::str::from_utf8(&self.short[..len]) {
                return s;
            }
        }
        self.long = format!("{operation}{event_type}");
        &self.long
    }
}

/// Records how the handler run of a [`process`] span ended.
pub(crate) fn ended(span: &Span, result: RunResult) {
    if span.is_disabled() {
        return;
    }
    let outcome = result.as_str();
    span.record("durabus.outcome", outcome);
    // A snooze is the handler's own choice, not an error.
    if !matches!(result, RunResult::Ok | RunResult::Snoozed) {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::Name;

    #[test]
    fn a_span_name_is_the_operation_then_the_event_type_whatever_its_length() {
        let mut name = Name::default();
        assert_eq!(name.of("process ", "order.créé"), "process order.créé");
        let long = "x".repeat(300);
        assert_eq!(name.of("process ", &long), format!("process {long}"));
        assert_eq!(name.of("process ", ""), "process ");
        let exact = "y".repeat(120);
        assert_eq!(name.of("process ", &exact), format!("process {exact}"));
    }
}

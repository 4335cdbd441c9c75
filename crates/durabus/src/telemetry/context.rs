//! The W3C trace context carried with each event (feature `opentelemetry`): at publish the
//! producer span's context is written into the event's metadata as `traceparent` (and
//! `tracestate` when it has one); a delivery's consumer span reads it back and takes the
//! producer as its parent on the event's first delivery, or as a span link on a retry, a
//! dead-letter retry and a replay (each of those belongs to a trace of its own).
//!
//! The metadata travels with the stored row, so the context crosses process boundaries: a
//! worker process on PostgreSQL continues the trace of the process that published.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::event::{Event, Metadata, NewEvent};

/// The metadata key of the W3C `traceparent` header.
pub const TRACEPARENT: &str = "traceparent";
/// The metadata key of the W3C `tracestate` header.
pub const TRACESTATE: &str = "tracestate";

struct Writer<'a>(&'a mut Metadata);

impl Injector for Writer<'_> {
    fn set(&mut self, key: &str, value: String) {
        // An empty `tracestate` says nothing: it is left out.
        if !value.is_empty() {
            self.0.insert(key.to_owned(), value);
        }
    }
}

struct Reader<'a>(&'a Metadata);

impl Extractor for Reader<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// Writes `span`'s context into each of `events` that carries no `traceparent` yet (one the
/// caller set, from an upstream system say, is kept). Nothing happens when the span is not
/// recorded by an OpenTelemetry layer.
pub(crate) fn inject(span: &Span, events: &mut [NewEvent]) {
    if span.is_disabled() {
        return;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return;
    }
    let propagator = TraceContextPropagator::new();
    for event in events {
        if !event.metadata.contains_key(TRACEPARENT) {
            propagator.inject_context(&cx, &mut Writer(&mut event.metadata));
        }
    }
}

/// Connects `span` (a consumer span, not yet entered) to the producer context `event`
/// carries: as its parent when `first` (the event's first delivery), else as a link.
pub(crate) fn adopt(span: &Span, event: &Event, first: bool) {
    if span.is_disabled() || !event.metadata.contains_key(TRACEPARENT) {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&Reader(&event.metadata));
    let producer = cx.span().span_context().clone();
    if !producer.is_valid() {
        return;
    }
    if first {
        // Fails only without an OpenTelemetry layer, where there is nothing to connect.
        let _ = span.set_parent(cx);
    } else {
        span.add_link(producer);
    }
}

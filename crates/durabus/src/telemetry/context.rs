//! The W3C trace context carried with each event (feature `opentelemetry`): at publish the
//! producer span's context is written into the event's metadata as `traceparent` (and
//! `tracestate` when it has one); a delivery's consumer span reads it back and takes the
//! producer as its parent on the event's first delivery, or as a span link on a retry, a
//! dead-letter retry and a replay (each of those belongs to a trace of its own).
//!
//! The metadata travels with the stored row, so the context crosses process boundaries: a
//! worker process on PostgreSQL continues the trace of the process that published.

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
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
    // Written once, copied into each event (a batch shares its producer).
    let mut header = Metadata::new();
    TraceContextPropagator::new().inject_context(&cx, &mut Writer(&mut header));
    for event in events {
        if !event.metadata.contains_key(TRACEPARENT) {
            for (k, v) in &header {
                event.metadata.insert(k.clone(), v.clone());
            }
        }
    }
}

/// The value of `hex`, lower-case hexadecimal digits only, at most 32 of them; `None` for any
/// other character. One pass, no intermediate string (a delivery reads a `traceparent` each).
fn lower_hex(hex: &[u8]) -> Option<u128> {
    hex.iter().try_fold(0u128, |acc, &b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(digit))
    })
}

/// The producer's context of `metadata`: a version-00 `traceparent` (what [`inject`] writes)
/// is read directly; any other form goes through the W3C propagator, which knows them all.
fn producer(metadata: &Metadata) -> Option<SpanContext> {
    let tp = metadata.get(TRACEPARENT)?;
    let b = tp.as_bytes();
    let simple = (b.len() == 55 && tp.starts_with("00-") && b[35] == b'-' && b[52] == b'-')
        .then(|| {
            Some((
                lower_hex(&b[3..35])?,
                lower_hex(&b[36..52])?,
                lower_hex(&b[53..55])?,
            ))
        })
        .flatten();
    let sc = if let Some((trace, span, flags)) = simple {
        let state = match metadata.get(TRACESTATE) {
            Some(s) => s.parse::<TraceState>().ok()?,
            None => TraceState::default(),
        };
        SpanContext::new(
            TraceId::from(trace),
            // 16 and 2 digits: the values fit.
            SpanId::from(u64::try_from(span).ok()?),
            TraceFlags::new(u8::try_from(flags).ok()?) & TraceFlags::SAMPLED,
            true,
            state,
        )
    } else {
        let cx = TraceContextPropagator::new().extract(&Reader(metadata));
        cx.span().span_context().clone()
    };
    sc.is_valid().then_some(sc)
}

/// Connects `span` (a consumer span, not yet entered) to the producer context `event`
/// carries: as its parent when `first` (the event's first delivery), else as a link.
pub(crate) fn adopt(span: &Span, event: &Event, first: bool) {
    if span.is_disabled() {
        return;
    }
    let Some(producer) = producer(&event.metadata) else {
        return;
    };
    if first {
        // Fails only without an OpenTelemetry layer, where there is nothing to connect.
        let _ = span.set_parent(Context::new().with_remote_span_context(producer));
    } else {
        span.add_link(producer);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn meta(tp: &str, ts: Option<&str>) -> Metadata {
        let mut m = Metadata::new();
        m.insert(TRACEPARENT.into(), tp.into());
        if let Some(ts) = ts {
            m.insert(TRACESTATE.into(), ts.into());
        }
        m
    }

    /// The direct reading agrees with the W3C propagator on every header it takes, and leaves
    /// the others to it.
    #[test]
    fn the_producer_is_read_as_the_propagator_reads_it() {
        let headers = [
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "garbage",
            "",
        ];
        for tp in headers {
            for ts in [None, Some("congo=t61rcWkgMzE"), Some("")] {
                let m = meta(tp, ts);
                let ours = producer(&m);
                let theirs = TraceContextPropagator::new()
                    .extract(&Reader(&m))
                    .span()
                    .span_context()
                    .clone();
                let theirs = theirs.is_valid().then_some(theirs);
                assert_eq!(ours, theirs, "{tp:?} {ts:?}");
            }
        }
        assert_eq!(producer(&Metadata::new()), None);
    }
}

//! What every publish path does beside storing its events, written once for all of them
//! (`publish`, `enqueue`, batches, and both outboxes): the `published` payload snapshots the
//! bus's configuration asks for, and the count in `events_published_total`.

use std::sync::Arc;

use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::NewEvent;
use crate::payload::{ConfigCache, NewSnapshot, published_snapshot};
use crate::store::Stored;
use crate::telemetry::Telemetry;

/// A bus's publish side: its metrics, and its payload configuration when automatic snapshots
/// are on. The default (an outbox made without a bus) counts nothing and snapshots nothing.
#[derive(Clone, Default)]
pub(crate) struct Published {
    telemetry: Option<Arc<Telemetry>>,
    snapshots: Option<Arc<ConfigCache>>,
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("counted", &self.telemetry.is_some())
            .field("snapshots", &self.snapshots.is_some())
            .finish()
    }
}

impl Published {
    /// Counting in `telemetry`, and with `snapshots` (the payload configuration) when
    /// automatic snapshots are on.
    pub(crate) fn new(telemetry: Arc<Telemetry>, snapshots: Option<Arc<ConfigCache>>) -> Published {
        Published {
            telemetry: Some(telemetry),
            snapshots,
        }
    }

    /// The `published` snapshots of `events`, when automatic snapshots are on. A snapshot of
    /// the payload as published is [shared](NewSnapshot::shared) with the event's row where
    /// the store allows it; a redacted one is compressed here, on the caller's task, not on
    /// the store's writer.
    pub(crate) fn snapshots(
        &self,
        events: &[NewEvent],
        now: Timestamp,
    ) -> Result<Vec<NewSnapshot>> {
        let Some(configs) = &self.snapshots else {
            return Ok(Vec::new());
        };
        let set = configs.get();
        let mut out = Vec::new();
        for e in events {
            if let Some(s) = published_snapshot(
                e.id,
                &e.event_type,
                &e.payload,
                set.resolve(&e.event_type),
                now,
            )? {
                out.push(s);
            }
        }
        Ok(out)
    }

    /// Counts the events a publish stored (`inserted`: one per event of `types`; only new ones
    /// count), a run of one type at a time.
    pub(crate) fn count<'a>(&self, types: impl IntoIterator<Item = &'a str>, inserted: &[Stored]) {
        let Some(telemetry) = &self.telemetry else {
            return;
        };
        let mut run: Option<(&str, u64)> = None;
        for (event_type, stored) in types.into_iter().zip(inserted) {
            if !stored.is_new() {
                continue;
            }
            match &mut run {
                Some((t, n)) if *t == event_type => *n += 1,
                _ => {
                    if let Some((t, n)) = run.take() {
                        telemetry.published(t, n);
                    }
                    run = Some((event_type, 1));
                }
            }
        }
        if let Some((t, n)) = run {
            telemetry.published(t, n);
        }
    }

    /// The producer span of a call that stores `events` (`operation`: `publish`, `enqueue`,
    /// `enqueue_batch`, `outbox`): every publish path opens its span here, before it stores
    /// `events` (with the `opentelemetry` feature the span's context is written into them).
    pub(crate) fn span(operation: &'static str, events: &mut [NewEvent]) -> tracing::Span {
        crate::telemetry::spans::send(operation, events)
    }

    /// The metrics, if any.
    pub(crate) fn telemetry(&self) -> Option<&Arc<Telemetry>> {
        self.telemetry.as_ref()
    }
}

//! Event history: completed events stay in the store, queryable for audit and replay, until a
//! retention purge removes them. Like the dead-letter inspector it needs only a [`Store`].

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, Timestamp};
use crate::error::{Error, Result};
use crate::event::Event;
use crate::payload::ConfigSource;
use crate::store::{EventQuery, Store};

/// Replaces payloads in `events` with what operators may see.
pub(crate) async fn redact_events(configs: &ConfigSource, events: &mut [Event]) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let set = configs.get().await?;
    for e in events {
        let r = set.resolve(&e.event_type);
        if r.redacts() {
            e.payload = r.redact(&e.payload);
        }
    }
    Ok(())
}

/// Events deleted per transaction by [`History::purge`], so a large purge never holds the write
/// lock for long.
pub const PURGE_CHUNK: usize = 10_000;

/// Lists and purges the event history. Payloads are shown redacted as the payload
/// configuration says (see [`crate::payload`]).
#[derive(Debug, Clone)]
pub struct History {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    chunk: usize,
    configs: Arc<ConfigSource>,
}

impl History {
    /// History on `store`, reading the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// History on `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let configs = Arc::new(ConfigSource::new(store.clone()));
        Self::with_source(store, clock, configs)
    }

    /// History sharing `configs` (a bus's own).
    pub(crate) fn with_source(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        configs: Arc<ConfigSource>,
    ) -> Self {
        History {
            store,
            clock,
            chunk: PURGE_CHUNK,
            configs,
        }
    }

    /// Sets how many events [`purge`](Self::purge) deletes per transaction ([`PURGE_CHUNK`]
    /// unless set; at least 1). Smaller chunks hold the write lock for less time each.
    #[must_use]
    pub fn purge_chunk(mut self, events: usize) -> Self {
        self.chunk = events.max(1);
        self
    }

    /// Events matching `query` (any status, type and creation-time range), newest first,
    /// payloads redacted as configured. A time range that ends where (or before) it starts
    /// selects nothing.
    pub async fn list(&self, query: EventQuery) -> Result<Vec<Event>> {
        // No event type holds a NUL (publishing refuses it): such a type selects nothing, and
        // is not sent to a store that cannot hold it.
        if query.event_type.as_ref().is_some_and(|t| t.contains('\0')) {
            return Ok(Vec::new());
        }
        // Likewise an ordering key: publishing refuses one that is empty, over-long or holds a
        // NUL, so such a key selects nothing.
        if let Some(k) = &query.ordering_key
            && (k.is_empty() || k.len() > crate::options::ORDERING_KEY_MAX || k.contains('\0'))
        {
            return Ok(Vec::new());
        }
        let mut events = self.store.list_events(query).await?;
        redact_events(&self.configs, &mut events).await?;
        Ok(events)
    }

    /// One event by id, any status, payload redacted as configured. Fails with
    /// [`Error::EventNotFound`].
    pub async fn get(&self, id: crate::EventId) -> Result<Event> {
        let mut event = self
            .store
            .get_event(id)
            .await?
            .ok_or_else(|| Error::EventNotFound(id.to_string(), ""))?;
        redact_events(&self.configs, std::slice::from_mut(&mut event)).await?;
        Ok(event)
    }

    /// Deletes `done` events completed more than `older_than` ago (`updated_at <= now -
    /// older_than`), in transactions of [`PURGE_CHUNK`] events (see
    /// [`purge_chunk`](Self::purge_chunk)). Pending, processing and dead
    /// events are never touched. Returns how many were deleted.
    pub async fn purge(&self, older_than: Duration) -> Result<u64> {
        self.purge_before(self.clock.now().minus(older_than)).await
    }

    /// [`purge`](Self::purge) of `done` events completed at or before `cutoff`.
    pub async fn purge_before(&self, cutoff: Timestamp) -> Result<u64> {
        let mut total = 0;
        loop {
            let n = self.store.purge_history(cutoff, self.chunk).await?;
            total += n;
            if n < self.chunk as u64 {
                return Ok(total);
            }
        }
    }
}

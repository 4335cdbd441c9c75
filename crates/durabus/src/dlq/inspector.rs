//! The dead-letter queue as the event bus specification describes it: dead *events*, listed
//! by page, retried, purged. The operator's view of the same data, with records, groups and
//! bulk operations, is [`DeadLetters`](super::DeadLetters). It depends only on a [`Store`],
//! so admin tools can use it without a running bus.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::dlq::{Action, Actor, ActorKind};
use crate::error::{Error, Result};
use crate::event::{Event, EventId, EventStatus};
use crate::history::redact_events;
use crate::payload::ConfigSource;
use crate::store::{EventQuery, Store};

/// Lists, retries and purges dead events.
#[derive(Debug, Clone)]
pub struct DlqInspector {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    configs: Arc<ConfigSource>,
}

/// Default page size of [`DlqInspector::list`].
pub const DEFAULT_LIMIT: u64 = 100;

/// A page of a listing: skip `offset` entries, return at most `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    /// Entries to skip. Defaults to 0.
    pub offset: u64,
    /// Most entries to return. Defaults to 100.
    pub limit: u64,
}

impl Page {
    /// A page of `limit` entries after `offset`.
    pub fn new(offset: u64, limit: u64) -> Self {
        Page { offset, limit }
    }
}

impl Default for Page {
    fn default() -> Self {
        Page {
            offset: 0,
            limit: DEFAULT_LIMIT,
        }
    }
}

impl DlqInspector {
    /// An inspector on `store`, reading the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// An inspector on `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let configs = Arc::new(ConfigSource::new(store.clone()));
        Self::with_source(store, clock, configs)
    }

    /// An inspector sharing `configs` (a bus's own).
    pub(crate) fn with_source(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        configs: Arc<ConfigSource>,
    ) -> Self {
        DlqInspector {
            store,
            clock,
            configs,
        }
    }

    /// Dead events, newest first (by `created_at`), one page of them; `Page::default()` is
    /// the first 100. Payloads are redacted as configured.
    pub async fn list(&self, page: Page) -> Result<Vec<Event>> {
        let mut events = self
            .store
            .list_events(EventQuery {
                status: Some(EventStatus::Dlq),
                offset: page.offset,
                limit: page.limit,
                ..EventQuery::default()
            })
            .await?;
        redact_events(&self.configs, &mut events).await?;
        Ok(events)
    }

    /// One dead event, its payload redacted as configured. Fails with
    /// [`Error::EventNotFound`] if no dead event has this id.
    pub async fn get(&self, id: EventId) -> Result<Event> {
        match self.store.get_event(id).await? {
            Some(mut e) if e.status == EventStatus::Dlq => {
                redact_events(&self.configs, std::slice::from_mut(&mut e)).await?;
                Ok(e)
            }
            _ => Err(Error::EventNotFound(
                id.to_string(),
                " in the dead-letter queue",
            )),
        }
    }

    /// Sends a dead event back for delivery: full reset (`pending`, `retry_count` 0, errors
    /// cleared), due now. Handlers that had already succeeded for it are not run again; its
    /// dead-letter record keeps every round's errors and counts a manual retry (actor
    /// `library`). Fails with [`Error::EventNotFound`] if no dead event has this id.
    pub async fn retry(&self, id: EventId) -> Result<()> {
        self.get(id).await?;
        super::service::act_one(
            &*self.store,
            id,
            Action::Retry,
            Actor::new("library", ActorKind::Library),
            self.clock.now(),
        )
        .await
        .map(|_| ())
    }

    /// Deletes dead events created `days` days ago or earlier (`created_at <= now - days`).
    /// Returns how many were deleted.
    pub async fn purge(&self, days: u32) -> Result<u64> {
        let now = self.clock.now();
        let cutoff = now.minus(Duration::from_secs(u64::from(days) * 86_400));
        super::rounds::purge_dead(&*self.store, cutoff, now).await
    }
}

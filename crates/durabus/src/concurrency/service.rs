//! Operators' view of concurrency limits: set, remove, list (the CLI, the admin API and the
//! dashboard go through this).

use std::sync::Arc;

use super::{ConcurrencyLimit, PartitionLimit};
use crate::actor::Actor;
use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::store::Store;

/// The concurrency limits on a store. Get one from
/// [`EventBus::concurrency_limits`](crate::EventBus::concurrency_limits), or make one over a
/// store (the CLI and the admin API do).
#[derive(Clone)]
pub struct ConcurrencyLimits {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ConcurrencyLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConcurrencyLimits").finish_non_exhaustive()
    }
}

impl ConcurrencyLimits {
    /// The limits on `store`, on the system clock.
    pub fn new(store: Arc<dyn Store>) -> ConcurrencyLimits {
        ConcurrencyLimits::with_clock(store, Arc::new(SystemClock))
    }

    /// The limits on `store`, on `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> ConcurrencyLimits {
        ConcurrencyLimits { store, clock }
    }

    /// Limits `subscription` to `max_in_flight` handler runs at once across every process
    /// (and `per_process` in each, if given); a new value replaces the old at once. Fails with
    /// [`Error::Invalid`] for a value out of range (see [`ConcurrencyLimit::check`]) and
    /// [`Error::SubscriptionNotFound`] for a subscription the store has no row of; nothing
    /// changes then.
    pub async fn set(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        actor: &Actor,
    ) -> Result<ConcurrencyLimit> {
        self.set_partitioned(subscription, max_in_flight, per_process, None, actor)
            .await
    }

    /// As [`set`](Self::set), and with `partition` given, at most its `max_in_flight` runs of
    /// each partition of the subscription's events at once (a tenant's backlog then takes
    /// turns with the other tenants' events instead of running first). `None` removes a
    /// partition limit set before. Fails with [`Error::Invalid`] for a value out of range
    /// (see [`PartitionLimit::check`]); nothing changes then.
    pub async fn set_partitioned(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        partition: Option<PartitionLimit>,
        actor: &Actor,
    ) -> Result<ConcurrencyLimit> {
        ConcurrencyLimit::check(max_in_flight, per_process)?;
        if let Some(p) = &partition {
            p.check()?;
        }
        actor.validate()?;
        let known = self.store.subscription_known(subscription).await?;
        if !known {
            return Err(Error::SubscriptionNotFound(subscription.to_owned()));
        }
        let limit = self
            .store
            .concurrency_set(
                subscription,
                max_in_flight,
                per_process,
                partition.as_ref(),
                actor,
                self.clock.now(),
            )
            .await?;
        tracing::info!(subscription, max_in_flight, ?per_process, ?partition, actor = %actor.name, "concurrency limit set");
        Ok(limit)
    }

    /// Removes `subscription`'s limit; the events waiting for a slot are due at once. Fails
    /// with [`Error::NotFound`] if it has none.
    pub async fn remove(&self, subscription: &str) -> Result<ConcurrencyLimit> {
        let removed = self
            .store
            .concurrency_remove(subscription, self.clock.now())
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("a concurrency limit of subscription {subscription:?}"),
            })?;
        tracing::info!(subscription, "concurrency limit removed");
        Ok(removed)
    }

    /// Every limit, by subscription, with the runs in flight and the events waiting.
    pub async fn list(&self) -> Result<Vec<ConcurrencyLimit>> {
        self.store.concurrency_list(self.clock.now()).await
    }
}

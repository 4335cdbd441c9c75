//! Operators' view of rate limits: set, remove, list (the CLI, the admin API and the dashboard
//! go through this).

use std::sync::Arc;
use std::time::Duration;

use super::RateLimit;
use crate::actor::Actor;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::Store;

/// The rate limits on a store. Get one from
/// [`EventBus::rate_limits`](crate::EventBus::rate_limits), or make one over a store (the CLI
/// and the admin API do).
#[derive(Clone)]
pub struct RateLimits {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").finish_non_exhaustive()
    }
}

impl RateLimits {
    /// The rate limits on `store`, on the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> RateLimits {
        RateLimits::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// The rate limits on `store`, on `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> RateLimits {
        RateLimits { store, clock }
    }

    /// Limits `subscription` to `per` handler runs per `interval`, across every process; a
    /// new value replaces the old at once. Fails with [`Error::Invalid`] for a value out of
    /// range (see [`RateLimit::check`]) and [`Error::SubscriptionNotFound`] for a
    /// subscription the store has no row of; nothing changes then.
    pub async fn set(
        &self,
        subscription: &str,
        per: u32,
        interval: Duration,
        actor: &Actor,
    ) -> Result<RateLimit> {
        RateLimit::check(per, interval)?;
        actor.validate()?;
        let known = self.store.subscription_known(subscription).await?;
        if !known {
            return Err(Error::SubscriptionNotFound(subscription.to_owned()));
        }
        let interval_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
        let limit = self
            .store
            .rate_set(subscription, per, interval_ms, actor, self.clock.now())
            .await?;
        tracing::info!(subscription, per, interval_ms, actor = %actor.name, "rate limit set");
        Ok(limit)
    }

    /// Removes `subscription`'s limit. Fails with [`Error::NotFound`] if it has none.
    pub async fn remove(&self, subscription: &str) -> Result<RateLimit> {
        let removed =
            self.store
                .rate_remove(subscription)
                .await?
                .ok_or_else(|| Error::NotFound {
                    what: format!("a rate limit of subscription {subscription:?}"),
                })?;
        tracing::info!(subscription, "rate limit removed");
        Ok(removed)
    }

    /// Every limit, by subscription.
    pub async fn list(&self) -> Result<Vec<RateLimit>> {
        self.store.rate_list().await
    }
}

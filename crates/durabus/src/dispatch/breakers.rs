//! The circuit breakers of a bus's subscriptions, kept in memory on the dispatcher (never
//! persisted), and the query API over them.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::breaker::{Admission, Breaker, BreakerConfig, BreakerSnapshot, Transition};
use crate::clock::Timestamp;
use crate::handler::Subscription;
use crate::sync::lock;

/// One subscription's breaker as [`EventBus::breakers`](crate::EventBus::breakers) reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SubscriptionBreaker {
    /// Subscription id.
    pub subscription_id: String,
    /// Stable name, if any.
    pub name: Option<String>,
    /// The subscription's pattern.
    pub event_type: String,
    /// The breaker.
    #[serde(flatten)]
    pub breaker: BreakerSnapshot,
}

/// Breakers by subscription id.
#[derive(Debug)]
pub(crate) struct Breakers {
    config: BreakerConfig,
    map: Mutex<HashMap<String, Breaker>>,
}

fn log(subscription_id: &str, t: Option<Transition>) {
    if let Some(t) = t {
        tracing::info!(
            subscription_id,
            from = %t.from,
            to = %t.to,
            "circuit breaker state changed"
        );
    }
}

impl Breakers {
    pub fn new(config: BreakerConfig) -> Self {
        Breakers {
            config,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Admits or skips each subscription for one event, all in one step, so two events
    /// dispatched at once cannot both take the half-open probe.
    pub fn admit(&self, ids: &[&str], now: Timestamp) -> Vec<Admission> {
        let mut map = lock(&self.map);
        ids.iter()
            .map(|id| {
                if !map.contains_key(*id) {
                    map.insert((*id).to_owned(), Breaker::new(self.config));
                }
                let Some(b) = map.get_mut(*id) else {
                    return Admission::Run;
                };
                let (admission, t) = b.admit(now);
                log(id, t);
                admission
            })
            .collect()
    }

    /// Records the outcome of an admitted run.
    pub fn record(&self, id: &str, now: Timestamp, success: bool) {
        if let Some(b) = lock(&self.map).get_mut(id) {
            log(id, b.record(now, success));
        }
    }

    /// Releases a probe that was admitted but did not run.
    pub fn release_probe(&self, id: &str) {
        if let Some(b) = lock(&self.map).get_mut(id) {
            b.release_probe();
        }
    }

    pub fn remove(&self, id: &str) {
        lock(&self.map).remove(id);
    }

    /// Every live subscription with its breaker (closed and empty if it never ran).
    pub fn snapshot(&self, subs: Vec<Subscription>, now: Timestamp) -> Vec<SubscriptionBreaker> {
        let map = lock(&self.map);
        subs.into_iter()
            .map(|s| {
                let breaker = map
                    .get(&s.id)
                    .map(|b| b.snapshot(now))
                    .unwrap_or_else(|| Breaker::new(self.config).snapshot(now));
                SubscriptionBreaker {
                    subscription_id: s.id,
                    name: s.name,
                    event_type: s.event_type,
                    breaker,
                }
            })
            .collect()
    }
}

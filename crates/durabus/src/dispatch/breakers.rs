//! The circuit breakers of a bus's subscriptions, kept in memory on the dispatcher (never
//! persisted), and the query API over them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::breaker::{Admission, Breaker, BreakerConfig, BreakerSnapshot, Transition};
use crate::clock::Timestamp;
use crate::handler::Subscription;
use crate::sync::lock;
use crate::telemetry::Telemetry;

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
    telemetry: Arc<Telemetry>,
    /// This process's name in the breakers it reports.
    process: String,
    /// A breaker changed since the last report.
    changed: std::sync::atomic::AtomicBool,
}

impl Breakers {
    pub fn new(config: BreakerConfig, telemetry: Arc<Telemetry>) -> Self {
        Breakers {
            config,
            map: Mutex::new(HashMap::new()),
            telemetry,
            process: crate::holder::worker_name(),
            changed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The thresholds, and whether the breakers are shared across processes.
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// This process's name in the breakers it reports.
    pub fn process(&self) -> &str {
        &self.process
    }

    /// Whether a breaker changed since the last call.
    pub fn take_changed(&self) -> bool {
        self.changed
            .swap(false, std::sync::atomic::Ordering::AcqRel)
    }

    /// Logs and counts a state change of `sub`'s breaker.
    fn changed(&self, sub: &Subscription, t: Option<Transition>) {
        if let Some(t) = t {
            self.changed
                .store(true, std::sync::atomic::Ordering::Release);
            tracing::info!(
                subscription_id = %sub.id,
                from = %t.from,
                to = %t.to,
                "circuit breaker state changed"
            );
            self.telemetry
                .breaker_transition(sub.label(), t.to.as_str());
        }
    }

    /// Admits or skips each subscription for one event, all in one step, so two events
    /// dispatched at once cannot both take the half-open probe.
    pub fn admit(&self, subs: &[&Subscription], now: Timestamp) -> Vec<Admission> {
        let mut map = lock(&self.map);
        subs.iter()
            .map(|sub| {
                // Looked up before inserting: `entry` would copy the id on every delivery.
                let (admission, t) = match map.get_mut(&sub.id) {
                    Some(b) => b.admit(now),
                    None => map
                        .entry(sub.id.clone())
                        .or_insert_with(|| Breaker::new(self.config))
                        .admit(now),
                };
                self.changed(sub, t);
                admission
            })
            .collect()
    }

    /// Records the outcome of an admitted run; returns the state change it made.
    pub fn record(&self, sub: &Subscription, now: Timestamp, success: bool) -> Option<Transition> {
        let t = lock(&self.map).get_mut(&sub.id)?.record(now, success);
        self.changed(sub, t);
        t
    }

    /// Opens `sub`'s breaker as the shared one opened at `at`, unless it is open since then.
    pub fn force_open(&self, sub: &Subscription, at: Timestamp) {
        let t = lock(&self.map)
            .entry(sub.id.clone())
            .or_insert_with(|| Breaker::new(self.config))
            .force_open(at);
        self.changed(sub, t);
    }

    /// Closes `sub`'s breaker as another process's probe closed the shared one.
    pub fn force_close(&self, sub: &Subscription, now: Timestamp) {
        let t = lock(&self.map)
            .get_mut(&sub.id)
            .and_then(|b| b.force_close(now));
        self.changed(sub, t);
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

//! The in-memory map of subscriptions and their handlers.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::handler::Handler;
use crate::pattern::Pattern;
use crate::retry::RetryOverride;

/// A live subscription: pattern, handler and options.
pub(crate) struct Subscription {
    pub id: String,
    /// The key of delivery records: the stable name if given, else the id.
    pub key: String,
    pub pattern: Pattern,
    pub handler: Arc<dyn Handler>,
    pub timeout: Duration,
    pub retry: Option<RetryOverride>,
}

/// Subscriptions in the order they were made (the order handlers run in).
#[derive(Default)]
pub(crate) struct Registry {
    subs: RwLock<Vec<Arc<Subscription>>>,
}

impl Registry {
    pub fn add(&self, sub: Subscription) {
        if let Ok(mut subs) = self.subs.write() {
            subs.push(Arc::new(sub));
        }
    }

    pub fn remove(&self, id: &str) -> bool {
        let Ok(mut subs) = self.subs.write() else {
            return false;
        };
        let before = subs.len();
        subs.retain(|s| s.id != id);
        subs.len() != before
    }

    pub fn has_key(&self, key: &str) -> bool {
        self.subs
            .read()
            .map(|s| s.iter().any(|s| s.key == key))
            .unwrap_or(false)
    }

    /// The subscriptions whose pattern matches `event_type`.
    pub fn matching(&self, event_type: &str) -> Vec<Arc<Subscription>> {
        self.subs
            .read()
            .map(|subs| {
                subs.iter()
                    .filter(|s| s.pattern.matches(event_type))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

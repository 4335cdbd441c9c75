//! The in-memory map of subscriptions and their handlers.

use std::sync::{Arc, RwLock};

use crate::sync::{read, write};

use crate::handler::{Handler, Subscription};
use crate::pattern::Pattern;

/// A live subscription: what it is, its compiled pattern and its handler.
pub(crate) struct Entry {
    pub info: Subscription,
    /// The key of delivery records: the stable name if given, else the id.
    pub key: String,
    pub pattern: Pattern,
    pub handler: Arc<dyn Handler>,
}

/// Subscriptions in the order they were made (the order handlers run in).
#[derive(Default)]
pub(crate) struct Registry {
    subs: RwLock<Vec<Arc<Entry>>>,
}

impl Registry {
    pub fn add(&self, sub: Entry) {
        write(&self.subs).push(Arc::new(sub));
    }

    pub fn remove(&self, id: &str) -> bool {
        let mut subs = write(&self.subs);
        let before = subs.len();
        subs.retain(|s| s.info.id != id);
        subs.len() != before
    }

    pub fn has_key(&self, key: &str) -> bool {
        read(&self.subs).iter().any(|s| s.key == key)
    }

    /// Every subscription, in order.
    pub fn all(&self) -> Vec<Subscription> {
        read(&self.subs).iter().map(|s| s.info.clone()).collect()
    }

    /// Every entry, in order.
    pub fn entries(&self) -> Vec<Arc<Entry>> {
        read(&self.subs).clone()
    }

    /// The subscriptions whose pattern matches `event_type`.
    pub fn matching(&self, event_type: &str) -> Vec<Arc<Entry>> {
        read(&self.subs)
            .iter()
            .filter(|s| s.pattern.matches(event_type))
            .cloned()
            .collect()
    }
}

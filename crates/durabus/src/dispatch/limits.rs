//! The subscriptions with a rate limit, as this process last read them (see [`crate::rate`]):
//! a delivery takes a slot from the store for those only. With no limit set (the usual case)
//! asking costs one atomic load.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// This process's view of which subscriptions are rate-limited.
#[derive(Debug, Default)]
pub(crate) struct Limited {
    keys: RwLock<Arc<HashSet<String>>>,
    any: AtomicBool,
}

impl Limited {
    /// The limited subscriptions' keys, `None` when there are none.
    pub fn get(&self) -> Option<Arc<HashSet<String>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        Some(crate::sync::read(&self.keys).clone())
    }

    /// Replaces the set.
    pub fn replace(&self, keys: HashSet<String>) {
        let mut slot = crate::sync::write(&self.keys);
        self.any.store(!keys.is_empty(), Ordering::Release);
        *slot = Arc::new(keys);
    }
}

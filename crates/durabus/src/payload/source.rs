//! [`ConfigSource`]: the payload configuration loaded from a store and kept fresh, shared by a
//! bus's publish path, its dispatcher and every reader that redacts what operators see.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{ConfigCache, ConfigSet};
use crate::error::Result;
use crate::store::Store;
use crate::sync::lock;

/// How old the configuration a reader holds may get before it looks at the store again (for
/// changes made by other processes; changes made through this process apply at once).
pub const CONFIG_REFRESH: Duration = Duration::from_secs(5);

/// The payload configuration, loaded from a store and kept fresh, shared by a bus's publish
/// path, its dispatcher and every reader that redacts.
#[derive(Debug)]
pub struct ConfigSource {
    store: Arc<dyn Store>,
    cache: Arc<ConfigCache>,
    loaded: Mutex<Option<Instant>>,
}

impl ConfigSource {
    /// A source on `store`, loaded on first use.
    pub fn new(store: Arc<dyn Store>) -> ConfigSource {
        ConfigSource {
            store,
            cache: Arc::new(ConfigCache::default()),
            loaded: Mutex::new(None),
        }
    }

    /// The cache it fills (what the hot path reads without waiting).
    pub fn cache(&self) -> Arc<ConfigCache> {
        self.cache.clone()
    }

    /// Loads the configuration from the store now.
    pub async fn reload(&self) -> Result<Arc<ConfigSet>> {
        let rows = self.store.payload_config_list().await?;
        self.cache.replace(ConfigSet::new(rows));
        *lock(&self.loaded) = Some(Instant::now());
        Ok(self.cache.get())
    }

    /// The configuration, reloaded if it is older than [`CONFIG_REFRESH`].
    pub async fn get(&self) -> Result<Arc<ConfigSet>> {
        let fresh = lock(&self.loaded).is_some_and(|t| t.elapsed() < CONFIG_REFRESH);
        if fresh {
            return Ok(self.cache.get());
        }
        self.reload().await
    }

    /// `text` of an event of `event_type` as an operator may see it.
    pub async fn redact(&self, event_type: &str, text: &str) -> Result<String> {
        Ok(self.get().await?.resolve(event_type).redact(text))
    }
}

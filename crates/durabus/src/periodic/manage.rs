//! Operators' view of periodic events: list, pause, resume, remove (the CLI, the admin API
//! and the dashboard go through this).

use std::sync::Arc;

use super::{PeriodicInfo, check_name};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::store::Store;

/// The periodic events on a store. Get one from
/// [`EventBus::periodics`](crate::EventBus::periodics), or make one over a store (the CLI and
/// the admin API do).
#[derive(Clone)]
pub struct Periodics {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Periodics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodics").finish_non_exhaustive()
    }
}

impl Periodics {
    /// The periodic events on `store`, on the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Periodics {
        Periodics::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// The periodic events on `store`, on `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Periodics {
        Periodics { store, clock }
    }

    /// Every definition, by name, with its next tick.
    pub async fn list(&self) -> Result<Vec<PeriodicInfo>> {
        let now = self.clock.now();
        Ok(self
            .store
            .periodic_list()
            .await?
            .into_iter()
            .map(|r| PeriodicInfo::of(r, now))
            .collect())
    }

    /// Definition `name`. Fails with [`Error::NotFound`] for an unknown name.
    pub async fn get(&self, name: &str) -> Result<PeriodicInfo> {
        check_name(name)?;
        self.list()
            .await?
            .into_iter()
            .find(|p| p.row.name == name)
            .ok_or_else(|| not_found(name))
    }

    /// Pauses `name`: its ticks are skipped until it is resumed (also across restarts and
    /// registrations). Pausing a paused one changes nothing. Fails with [`Error::NotFound`]
    /// for an unknown name.
    pub async fn pause(&self, name: &str) -> Result<PeriodicInfo> {
        self.set_paused(name, true).await
    }

    /// Resumes `name` from its next tick (ticks that came while it was paused are skipped).
    /// Fails with [`Error::NotFound`] for an unknown name.
    pub async fn resume(&self, name: &str) -> Result<PeriodicInfo> {
        self.set_paused(name, false).await
    }

    async fn set_paused(&self, name: &str, paused: bool) -> Result<PeriodicInfo> {
        check_name(name)?;
        let now = self.clock.now();
        let row = self
            .store
            .periodic_pause(name, paused, now)
            .await?
            .ok_or_else(|| not_found(name))?;
        Ok(PeriodicInfo::of(row, now))
    }

    /// Deletes `name` (until the application registers it again) and returns it as it was.
    /// Fails with [`Error::NotFound`] for an unknown name.
    pub async fn remove(&self, name: &str) -> Result<PeriodicInfo> {
        check_name(name)?;
        let row = self
            .store
            .periodic_remove(name)
            .await?
            .ok_or_else(|| not_found(name))?;
        Ok(PeriodicInfo::of(row, self.clock.now()))
    }
}

fn not_found(name: &str) -> Error {
    Error::NotFound {
        what: format!("periodic event {name:?}"),
    }
}

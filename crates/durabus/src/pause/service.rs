//! Operators' view of pauses: pause, resume, list (the bus, the CLI, the admin API and the
//! dashboard go through this), and the refresh every started bus runs.

use std::sync::Arc;
use std::time::Duration;

use super::{Pause, PauseRequest, PauseScope, PauseSet, ResumeRequest, ResumeTarget};
use crate::clock::{Clock, Timestamp};
use crate::error::{Error, Result};
use crate::store::Store;

/// How long after a pause ended each refresh still wakes events parked for it: an attempt that
/// read the pause before it ended and parked its event after (a handler of the same event may
/// run for up to its timeout in between).
const HEAL_WINDOW: Duration = Duration::from_secs(3600);

/// The pauses on a store. Get one from [`EventBus::pauses`](crate::EventBus::pauses), or
/// make one over a store (the CLI and the admin API do): a pause made here holds in every
/// started bus on the store within its
/// [`pause_refresh`](crate::BusConfig::pause_refresh).
#[derive(Clone)]
pub struct Pauses {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Pauses {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pauses").finish_non_exhaustive()
    }
}

impl Pauses {
    /// The pauses on `store`, on the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Pauses {
        Pauses::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// The pauses on `store`, on `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Pauses {
        Pauses { store, clock }
    }

    /// Pauses a subscription, every subscription matching a pattern, or the whole bus, until
    /// it is resumed or `request.until` passes; returns the pause on record.
    ///
    /// Fails with [`Error::Invalid`] for a blank reason or target or an `until` not in the
    /// future (or more than a year ahead), and [`Error::SubscriptionNotFound`] for a
    /// subscription the store has no row of (a named subscription has one once a bus has
    /// subscribed it); nothing is recorded then.
    pub async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        let now = self.clock.now();
        request.validate(now)?;
        if let PauseScope::Subscription(name) = &request.scope {
            let known = self.store.subscription_known(name).await?;
            if !known {
                return Err(Error::SubscriptionNotFound(name.clone()));
            }
        }
        let pause = self.store.pause_create(request, now).await?;
        tracing::info!(pause = pause.id, scope = %pause.scope, actor = %pause.actor.name, reason = %pause.reason, "paused");
        Ok(pause)
    }

    /// Ends pauses: the one with an id, or every active pause with exactly a scope; the
    /// events they parked are due at once. Returns the pauses it ended.
    ///
    /// Fails with [`Error::Invalid`] for an over-long reason, [`Error::NotFound`] for an
    /// unknown pause (or no active pause with the scope) and [`Error::Conflict`] for a pause
    /// that has ended already; nothing changes then.
    pub async fn resume(&self, request: ResumeRequest) -> Result<Vec<Pause>> {
        request.validate()?;
        let target = request.target.clone();
        let ended = self.store.pause_end(request, self.clock.now()).await?;
        if ended.is_empty() {
            return Err(match target {
                ResumeTarget::Id(id) => match self.store.pause_get(id).await? {
                    None => Error::NotFound {
                        what: format!("pause {id}"),
                    },
                    Some(p) => {
                        let how = p.ended.as_ref().map_or("ended", |e| e.kind.as_str());
                        Error::Conflict {
                            what: format!("pause {id}"),
                            status: how.to_owned(),
                            message: format!(
                                "pause {id} has ended already ({how}); the listing of pauses shows the active ones"
                            ),
                        }
                    }
                },
                ResumeTarget::Scope(scope) => Error::NotFound {
                    what: format!("an active pause of {scope}"),
                },
            });
        }
        for p in &ended {
            tracing::info!(pause = p.id, scope = %p.scope, "resumed");
        }
        Ok(ended)
    }

    /// The active pauses, oldest first, each with the events it parks now; with
    /// `ended_since`, also at most `limit` of those that ended since, newest first.
    pub async fn list(&self, ended_since: Option<Timestamp>, limit: usize) -> Result<Vec<Pause>> {
        self.store.pause_list(ended_since, limit).await
    }

    /// One pause by id. Fails with [`Error::NotFound`] for an unknown id.
    pub async fn get(&self, id: i64) -> Result<Pause> {
        self.store
            .pause_get(id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("pause {id}"),
            })
    }

    /// The active pauses as a refresh reads them: ends those whose `until` has come (waking
    /// what they parked) and wakes what is still parked for pauses that ended lately.
    pub(crate) async fn refresh(&self) -> Result<PauseSet> {
        let now = self.clock.now();
        let since = now.minus(HEAL_WINDOW);
        let mut all = self.store.pause_active(since).await?;
        if all
            .iter()
            .any(|p| p.ended.is_none() && p.until.is_some_and(|u| u <= now))
        {
            for p in self.store.pause_expire(now).await? {
                tracing::info!(pause = p.id, scope = %p.scope, "pause expired");
            }
            all = self.store.pause_active(since).await?;
        }
        let ended: Vec<i64> = all
            .iter()
            .filter(|p| p.ended.is_some())
            .map(|p| p.id)
            .collect();
        let woken = self.store.pause_wake(ended, now).await?;
        if woken > 0 {
            tracing::info!(
                events = woken,
                "woke events parked by pauses that had ended"
            );
        }
        Ok(PauseSet::new(all))
    }
}

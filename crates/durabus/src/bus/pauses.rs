//! Pausing and resuming from the bus (see [`crate::pause`]), and the task that keeps this
//! process's view of the active pauses fresh.

use std::sync::Arc;
use std::time::Duration;

use super::EventBus;
use crate::clock::{Clock, Timestamp};
use crate::dispatch::paused::Paused;
use crate::error::{Error, Result};
use crate::pause::{Pause, PauseRequest, PauseScope, PauseSet, ResumeRequest, ResumeTarget};
use crate::shutdown::Shutdown;
use crate::store::Store;

/// How long after a pause ended each refresh still wakes events parked for it: an attempt that
/// read the pause before it ended and parked its event after (a handler of the same event may
/// run for up to its timeout in between).
const HEAL_WINDOW: Duration = Duration::from_secs(3600);

impl EventBus {
    /// Pauses a subscription, every subscription matching a pattern, or the whole bus (see
    /// [`crate::pause`]), until it is resumed or `request.until` passes; returns the pause on
    /// record. It holds in this process at once and in every other process of the bus within
    /// [`BusConfig::pause_refresh`](crate::BusConfig::pause_refresh). Handlers already running
    /// finish; publishing goes on.
    ///
    /// Fails with [`Error::Invalid`] for a blank reason or target or an `until` not in the
    /// future (or more than a year ahead), and [`Error::SubscriptionNotFound`] for a
    /// subscription the store has no row of (named subscriptions have one once a bus has
    /// subscribed them); nothing is recorded then.
    ///
    /// ```no_run
    /// # async fn f(bus: durabus::EventBus) -> durabus::Result<()> {
    /// use durabus::{Actor, ActorKind, PauseRequest, PauseScope};
    /// let pause = bus
    ///     .pause(PauseRequest {
    ///         scope: PauseScope::Subscription("send-email".into()),
    ///         until: None,
    ///         actor: Actor::new("ops", ActorKind::Library),
    ///         reason: "the mail provider is down".into(),
    ///     })
    ///     .await?;
    /// println!("pause {} holds {} parked events", pause.id, pause.parked);
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, request: PauseRequest) -> Result<Pause> {
        let now = self.clock().now();
        request.validate(now)?;
        if let PauseScope::Subscription(name) = &request.scope {
            let known = self
                .store()
                .subscriptions()
                .await?
                .iter()
                .any(|r| r.name.as_deref() == Some(name.as_str()) || &r.id == name);
            if !known {
                return Err(Error::SubscriptionNotFound(name.clone()));
            }
        }
        let pause = self
            .store()
            .pause_create(request, now)
            .await
            .map_err(Self::map_closed)?;
        tracing::info!(pause = pause.id, scope = %pause.scope, actor = %pause.actor.name, reason = %pause.reason, "paused");
        self.refresh_pauses().await;
        Ok(pause)
    }

    /// Ends pauses: the one with an id, or every active pause with exactly a scope; their
    /// parked events are due at once. Returns the pauses it ended.
    ///
    /// Fails with [`Error::Invalid`] for an over-long reason, [`Error::NotFound`] for an
    /// unknown pause (or no active pause with the scope) and [`Error::Conflict`] for a pause
    /// that has ended already; nothing changes then.
    pub async fn resume(&self, request: ResumeRequest) -> Result<Vec<Pause>> {
        request.validate()?;
        let target = request.target.clone();
        let ended = self
            .store()
            .pause_end(request, self.clock().now())
            .await
            .map_err(Self::map_closed)?;
        if ended.is_empty() {
            return Err(match target {
                ResumeTarget::Id(id) => match self.store().pause_get(id).await? {
                    None => Error::NotFound {
                        what: format!("pause {id}"),
                    },
                    Some(p) => Error::Conflict {
                        what: format!("pause {id}"),
                        status: p
                            .ended
                            .as_ref()
                            .map_or("ended", |e| e.kind.as_str())
                            .to_owned(),
                        message: format!(
                            "pause {id} has ended already ({}); `pauses` lists the active ones",
                            p.ended.as_ref().map_or("ended", |e| e.kind.as_str())
                        ),
                    },
                },
                ResumeTarget::Scope(scope) => Error::NotFound {
                    what: format!("an active pause of {scope}"),
                },
            });
        }
        for p in &ended {
            tracing::info!(pause = p.id, scope = %p.scope, "resumed");
        }
        self.refresh_pauses().await;
        Ok(ended)
    }

    /// The active pauses, oldest first, each with the events it parks now; with
    /// `ended_since`, also at most `limit` of those that ended since, newest first.
    pub async fn pauses(&self, ended_since: Option<Timestamp>, limit: usize) -> Result<Vec<Pause>> {
        self.store().pause_list(ended_since, limit).await
    }

    /// The pauses this process holds to now, as it last read them (at most
    /// [`BusConfig::pause_refresh`](crate::BusConfig::pause_refresh) ago on a started bus),
    /// oldest first, without their parked counts.
    pub fn pauses_in_force(&self) -> Vec<Pause> {
        self.dispatcher()
            .paused()
            .get()
            .map(|s| s.pauses().to_vec())
            .unwrap_or_default()
    }

    /// Reads the active pauses into this process's view now (a failure is logged; the next
    /// refresh tries again).
    pub(super) async fn refresh_pauses(&self) {
        let d = self.dispatcher();
        if let Err(e) = refresh(self.store().as_ref(), d.paused(), self.clock().now()).await {
            tracing::warn!(error = %e, "could not read the active pauses; the next refresh tries again");
        }
    }
}

/// Reads the active pauses at `now` into `paused`: ends those whose `until` has come (waking
/// what they parked) and wakes what is still parked for pauses that ended lately.
pub(super) async fn refresh(store: &dyn Store, paused: &Paused, now: Timestamp) -> Result<()> {
    let since = now.minus(HEAL_WINDOW);
    let mut all = store.pause_active(since).await?;
    if all
        .iter()
        .any(|p| p.ended.is_none() && p.until.is_some_and(|u| u <= now))
    {
        for p in store.pause_expire(now).await? {
            tracing::info!(pause = p.id, scope = %p.scope, "pause expired");
        }
        all = store.pause_active(since).await?;
    }
    let ended: Vec<i64> = all
        .iter()
        .filter(|p| p.ended.is_some())
        .map(|p| p.id)
        .collect();
    let woken = store.pause_wake(ended, now).await?;
    if woken > 0 {
        tracing::info!(
            events = woken,
            "woke events parked by pauses that had ended"
        );
    }
    paused.replace(PauseSet::new(all));
    Ok(())
}

/// The refresh task of a started bus: every `every`, and when the earliest `until` comes.
pub(super) async fn run(
    store: Arc<dyn Store>,
    paused: Arc<Paused>,
    clock: Arc<dyn Clock>,
    every: Duration,
    hook: crate::hook::ErrorHook,
    mut shutdown: Shutdown,
) {
    loop {
        if let Err(e) = refresh(store.as_ref(), &paused, clock.now()).await {
            tracing::warn!(error = %e, "could not read the active pauses; the next refresh tries again");
            hook.report(crate::hook::ErrorSource::Pauses, &e, true);
        }
        let next = paused
            .get()
            .and_then(|s| s.next_expiry())
            .map_or(every, |u| clock.now().until(u).min(every));
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.recv() => return,
        }
    }
}

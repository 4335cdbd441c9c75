//! Pausing and resuming from the bus (see [`crate::pause`]), and the task that keeps this
//! process's view of the active pauses fresh.

use std::sync::Arc;
use std::time::Duration;

use super::EventBus;
use crate::dispatch::Dispatcher;
use crate::error::Result;
use crate::pause::{Pause, PauseRequest, Pauses, ResumeRequest};
use crate::shutdown::Shutdown;

impl EventBus {
    /// The pauses on this bus's store: pause, resume, list (see [`crate::pause`]).
    pub fn pauses(&self) -> Pauses {
        Pauses::with_clock(self.store().clone(), self.clock().clone())
    }

    /// Pauses a subscription, every subscription matching a pattern, or the whole bus, until
    /// it is resumed or `request.until` passes, and returns the pause on record (see
    /// [`Pauses::pause`] for what is refused). It holds in this process at once and in every
    /// other process of the bus within
    /// [`BusConfig::pause_refresh`](crate::BusConfig::pause_refresh). Handlers already
    /// running finish; publishing goes on.
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
        let pause = self
            .pauses()
            .pause(request)
            .await
            .map_err(Self::map_closed)?;
        self.refresh_pauses().await;
        Ok(pause)
    }

    /// Ends pauses (see [`Pauses::resume`]); here at once, in other processes within their
    /// refresh. Returns the pauses it ended.
    pub async fn resume(&self, request: ResumeRequest) -> Result<Vec<Pause>> {
        let ended = self
            .pauses()
            .resume(request)
            .await
            .map_err(Self::map_closed)?;
        self.refresh_pauses().await;
        Ok(ended)
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

    /// The rate limits on this bus's store: set, remove, list (see [`crate::rate`]). A limit
    /// set here holds in this bus at its next refresh, and in every other process within
    /// theirs.
    pub fn rate_limits(&self) -> crate::rate::RateLimits {
        crate::rate::RateLimits::with_clock(self.store().clone(), self.clock().clone())
    }

    /// The concurrency limits on this bus's store: set, remove, list (see
    /// [`crate::concurrency`]). A limit set here holds in this bus at its next refresh, and in
    /// every other process within theirs.
    pub fn concurrency_limits(&self) -> crate::concurrency::ConcurrencyLimits {
        crate::concurrency::ConcurrencyLimits::with_clock(
            self.store().clone(),
            self.clock().clone(),
        )
    }

    /// Reads the active pauses and the rate-limited subscriptions into this process's view
    /// now (a failure is logged; the next refresh tries again).
    pub(super) async fn refresh_pauses(&self) {
        let paused = self.dispatcher().paused();
        let ticket = paused.ticket();
        match self.pauses().refresh().await {
            Ok(set) => paused.replace(ticket, set),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the active pauses; the next refresh tries again");
            }
        }
        if let Err(e) = self.dispatcher().refresh_limits().await {
            tracing::warn!(error = %e, "could not read the rate limits; the next refresh tries again");
        }
    }
}

/// The refresh task of a started bus: every `every`, and when the earliest `until` comes,
/// it reads the pauses and syncs the breakers with the other processes (see
/// [`crate::breaker::report`]).
pub(super) async fn run(
    pauses: Pauses,
    dispatcher: Arc<Dispatcher>,
    every: Duration,
    hook: crate::hook::ErrorHook,
    mut shutdown: Shutdown,
) {
    let paused = dispatcher.paused().clone();
    let clock = dispatcher.clock().clone();
    let mut last_report = None;
    loop {
        let ticket = paused.ticket();
        match pauses.refresh().await {
            Ok(set) => paused.replace(ticket, set),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the active pauses; the next refresh tries again");
                hook.report(crate::hook::ErrorSource::Pauses, &e, true);
            }
        }
        if let Err(e) = dispatcher.refresh_limits().await {
            tracing::warn!(error = %e, "could not read the rate limits; the next refresh tries again");
            hook.report(crate::hook::ErrorSource::Pauses, &e, true);
        }
        match dispatcher
            .sync_breakers(clock.now(), last_report, every)
            .await
        {
            Ok(at) => last_report = at,
            Err(e) => {
                tracing::warn!(error = %e, "could not sync the breakers with the store; the next refresh tries again");
                hook.report(crate::hook::ErrorSource::Breakers, &e, true);
            }
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

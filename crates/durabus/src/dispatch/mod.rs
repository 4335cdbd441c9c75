//! The [`Dispatcher`]: it owns the subscription registry, the circuit breakers, the in-flight
//! counter, the metrics and the store handle, and turns a claimed event into a recorded
//! outcome: run the matching handlers, [`decide`](decide::decide) what that means, log and
//! count it, write it. The bus holds a dispatcher plus its own lifecycle; nothing here knows
//! the bus.

pub(crate) mod ahead;
pub(crate) mod breakers;
pub(crate) mod decide;
pub(crate) mod handoff;
pub(crate) mod inflight;
mod kept;
pub(crate) mod limits;
pub(crate) mod observer;
pub(crate) mod paused;
pub(crate) mod registry;
mod run;
mod shared_breakers;
pub(crate) mod slots;
pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use self::breakers::Breakers;
use self::decide::{Decision, Failure, OWN_LOOP, Policies, Ran, decide, emit};
use self::handoff::Handoff;
use self::inflight::InFlight;
use self::observer::Observer;
use self::registry::{Entry, Registry};
use crate::clock::{Clock, Timestamp};
use crate::config::BusConfig;
use crate::error::{Error, Result};
use crate::event::{Event, EventId};
use crate::payload::{ConfigCache, NewSnapshot, STAGE_ERROR, error_text, snapshot};
use crate::retry::RetryPolicy;
use crate::store::{Outcome, Store};
use crate::telemetry::RetryMetrics;
use crate::telemetry::{StoreCall, Telemetry};

/// An attempt's outcome and the `error` snapshot of its failure, if one is taken.
pub(crate) type Attempted = (Outcome, Option<NewSnapshot>);

/// Delivers events: the registry, breakers, in-flight tracking, metrics and store of one bus.
pub(crate) struct Dispatcher {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    config: BusConfig,
    registry: Registry,
    breakers: Breakers,
    metrics: Arc<RetryMetrics>,
    observers: Vec<Arc<dyn Observer>>,
    telemetry: Arc<Telemetry>,
    inflight: Arc<InFlight>,
    /// The payload configuration (for `error` snapshots), kept fresh by the bus.
    payloads: Arc<ConfigCache>,
    /// Where an enqueue hands its event to the idle worker loop.
    handoff: Arc<Handoff>,
    /// What every publish path does beside storing: `published` snapshots and counts.
    published: crate::published::Published,
    /// The pauses in force, as this process last read them.
    paused: Arc<paused::Paused>,
    /// The rate-limited subscriptions, as this process last read them.
    limited: limits::Limited,
    /// The concurrency-limited subscriptions and the per-process semaphores.
    slots: slots::Slots,
}

impl Dispatcher {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        config: BusConfig,
        payloads: Arc<ConfigCache>,
    ) -> Dispatcher {
        let metrics = Arc::new(RetryMetrics::default());
        let kind = crate::telemetry::StoreKind::of(&store.backend());
        let telemetry = Arc::new(Telemetry::new(config.metrics.clone(), kind));
        let published = crate::published::Published::new(
            telemetry.clone(),
            config.payload_snapshots.then(|| payloads.clone()),
        );
        Dispatcher {
            store,
            clock,
            breakers: Breakers::new(config.breaker, telemetry.clone()),
            config,
            registry: Registry::default(),
            observers: vec![metrics.clone()],
            telemetry,
            metrics,
            inflight: Arc::new(InFlight::default()),
            payloads,
            handoff: Handoff::new(),
            published,
            paused: Arc::new(paused::Paused::default()),
            limited: limits::Limited::default(),
            slots: slots::Slots::default(),
        }
    }

    /// Reads which subscriptions have a rate limit.
    pub async fn refresh_limits(&self) -> Result<()> {
        let keys = self
            .store
            .rate_list()
            .await?
            .into_iter()
            .map(|l| l.subscription)
            .collect();
        self.limited.replace(keys);
        self.refresh_slots().await
    }

    /// The pauses in force, as this process last read them.
    pub fn paused(&self) -> &Arc<paused::Paused> {
        &self.paused
    }

    /// What every publish path does beside storing: `published` snapshots and counts.
    pub fn published(&self) -> &crate::published::Published {
        &self.published
    }

    /// The `error` snapshot of a failed attempt, if automatic snapshots are on and the type's
    /// configuration stores the stage. A snapshot that cannot be made is logged, never fails
    /// the delivery.
    fn error_snapshot(
        &self,
        id: EventId,
        event_type: &str,
        payload: &str,
        log: &decide::Log,
    ) -> Option<NewSnapshot> {
        let decide::Log::Failed(f) = log else {
            return None;
        };
        if !self.config.payload_snapshots {
            return None;
        }
        let set = self.payloads.get();
        let text = error_text(payload, &f.error, f.attempt);
        match snapshot(
            id,
            event_type,
            STAGE_ERROR,
            &text,
            set.resolve(event_type),
            self.clock.now(),
        ) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(event_id = %id, error = %e, "could not take an error snapshot");
                self.config
                    .on_error
                    .report(crate::hook::ErrorSource::Snapshot, &e, false);
                None
            }
        }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn config(&self) -> &BusConfig {
        &self.config
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn breakers(&self) -> &Breakers {
        &self.breakers
    }

    pub fn metrics(&self) -> &RetryMetrics {
        &self.metrics
    }

    /// The Prometheus metrics this dispatcher reports to.
    pub fn telemetry(&self) -> &Arc<Telemetry> {
        &self.telemetry
    }

    pub fn inflight(&self) -> &Arc<InFlight> {
        &self.inflight
    }

    /// Where an enqueue hands its event straight to the worker loop while it is idle.
    pub fn handoff(&self) -> &Arc<Handoff> {
        &self.handoff
    }

    /// The matching subscriptions of `event_type` and their merged retry policy.
    fn policy_for(&self, event_type: &str) -> (Vec<Arc<Entry>>, RetryPolicy) {
        let subs = self.registry.matching(event_type);
        let policy = RetryPolicy::merge(
            &self.config.retry,
            subs.iter().filter_map(|s| s.info.retry.as_ref()),
        );
        (subs, policy)
    }

    fn policies<'a>(&'a self, retry: &'a RetryPolicy) -> Policies<'a> {
        Policies {
            retry,
            dead_letters: &self.config.dead_letters,
        }
    }

    /// Logs a decision and tells the observers (`created`: when the event was published;
    /// `now`: when the pass ended, on the bus clock).
    fn account(
        &self,
        decision: &Decision,
        id: EventId,
        event_type: &str,
        prior: u32,
        (created, now): (Timestamp, Timestamp),
    ) {
        emit(&decision.log, id, event_type);
        if let decide::Log::Failed(f) = &decision.log {
            let hook = &self.config.on_error;
            if !f.exhausted_by_interruptions && hook.hears_handler_failures() {
                hook.report(
                    crate::hook::ErrorSource::Handler {
                        event_id: f.event_id,
                        event_type: f.event_type.clone(),
                        subscription_id: f.subscription_id.clone(),
                        attempt: f.attempt,
                    },
                    &crate::error::Error::HandlerFailed {
                        subscription: f.subscription_id.clone(),
                        message: f.error.clone(),
                    },
                    !f.dead_lettered,
                );
            }
        }
        for o in &self.observers {
            o.pass_finished(event_type, prior, decision.pass);
        }
        if !crate::pattern::is_system_type(event_type) {
            self.telemetry
                .pass_finished(event_type, decision.pass, between(created, now));
        }
    }

    /// Writes outcomes, timing the store call for the metrics.
    async fn write_outcomes(
        &self,
        outcomes: Vec<Outcome>,
        snapshots: Vec<NewSnapshot>,
    ) -> Result<Vec<bool>> {
        crate::fail_point!("handler.before_record");
        let started = std::time::Instant::now();
        let result = self
            .store
            .record_many_with(outcomes, snapshots, self.clock.now())
            .await;
        self.telemetry
            .store_call(StoreCall::Record, started.elapsed());
        result
    }

    /// One delivery pass over a `processing` event: the matching handlers that have not yet
    /// handled it (and are not cancelled for it) run in subscription order until one fails; returns the outcome to record and
    /// the snapshot of a failure.
    pub async fn attempt(&self, event: Event) -> Attempted {
        let (subs, policy) = self.policy_for(&event.event_type);
        // The bus clock is read once before the handlers run and once after each handler: a
        // delivery's breaker admission and start latency share the first; the read after the
        // last handler also serves the decision and the time-to-done.
        let started = self.clock.now();
        let (ran, ended) = if decide::exhausted(&event, &policy) {
            // Every allowed attempt was used by processes that died during it: a handler
            // that kills its process must not loop forever.
            let ran = Ran::Exhausted {
                subscription: subs
                    .iter()
                    .find(|s| {
                        !event.delivered.contains(&s.key) && !event.cancelled.contains(&s.key)
                    })
                    .map(|s| (s.info.id.clone(), s.key.clone())),
            };
            (ran, None)
        } else {
            if event.retry_count == 0
                && event.delivered.is_empty()
                && !subs.is_empty()
                && !crate::pattern::is_system_type(&event.event_type)
            {
                self.telemetry
                    .handler_started(between(event.created_at, started));
            }
            self.run_handlers(&event, &subs, started).await
        };
        let (id, prior, event_type) = (event.id, event.retry_count, event.event_type.clone());
        let created = event.created_at;
        let payload = self.config.payload_snapshots.then(|| event.payload.clone());
        let now = ended.unwrap_or_else(|| self.clock.now());
        let decision = decide(event, ran, self.policies(&policy), now, fastrand::f64());
        self.account(&decision, id, &event_type, prior, (created, now));
        let snap = payload.and_then(|p| self.error_snapshot(id, &event_type, &p, &decision.log));
        (decision.outcome, snap)
    }

    /// Delivers a `processing` event and records the outcome (an inline publish).
    pub async fn deliver(&self, event: Event) {
        let (outcome, snap) = self.attempt(event).await;
        self.record(vec![outcome], snap.into_iter().collect()).await;
    }

    /// Writes outcomes (and their snapshots) in one store call, retrying with back-off while
    /// the store fails (a lock held too long, say): giving up would leave the events
    /// `processing` until the next start. Stops when the store is closed; the next start then
    /// recovers the events.
    pub async fn record(&self, outcomes: Vec<Outcome>, snapshots: Vec<NewSnapshot>) {
        let mut pause = Duration::from_millis(10);
        loop {
            match self
                .write_outcomes(outcomes.clone(), snapshots.clone())
                .await
            {
                Ok(flags) => {
                    for (o, applied) in outcomes.iter().zip(&flags) {
                        if !applied {
                            tracing::warn!(event_id = %o.id(), "outcome not recorded: the event is no longer processing");
                        }
                    }
                    self.parked_for_slots(&outcomes, &flags).await;
                    return;
                }
                Err(Error::StoreClosed) => {
                    tracing::warn!(
                        events = outcomes.len(),
                        "store closed before outcomes were recorded; the next start recovers them"
                    );
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, kind = %e.kind(), ?pause, "recording outcomes failed; retrying");
                    self.config
                        .on_error
                        .report(crate::hook::ErrorSource::RecordOutcomes, &e, true);
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
            }
        }
    }

    /// Records the result an own loop reports for an event it polled: done, or a failed
    /// attempt decided, logged and counted like a handler's failure.
    pub async fn finalize(&self, id: EventId, success: bool) -> Result<()> {
        let event = self
            .store
            .get_event(id)
            .await?
            .ok_or_else(|| Error::EventNotFound(id.to_string(), ""))?;
        let (_, policy) = self.policy_for(&event.event_type);
        let ran = Ran::Handlers {
            delivered: event.delivered.clone(),
            failure: (!success).then(|| Failure {
                subscription_id: OWN_LOOP.to_owned(),
                key: None,
                error: "finalized as failed".to_owned(),
                causes: Vec::new(),
                permanent: false,
                hold_key: false,
            }),
            deferred_until: None,
            snoozed: None,
        };
        let (prior, event_type, created) = (
            event.retry_count,
            event.event_type.clone(),
            event.created_at,
        );
        let payload = self.config.payload_snapshots.then(|| event.payload.clone());
        let now = self.clock.now();
        let decision = decide(event, ran, self.policies(&policy), now, fastrand::f64());
        let snap = payload.and_then(|p| self.error_snapshot(id, &event_type, &p, &decision.log));
        let applied = self
            .store
            .record_many_with(
                vec![decision.outcome.clone()],
                snap.into_iter().collect(),
                now,
            )
            .await?;
        if applied.first() != Some(&true) {
            return Err(Error::NotHeld(id.to_string()));
        }
        self.account(&decision, id, &event_type, prior, (created, now));
        Ok(())
    }
}

/// Time from `then` to `now` on the bus clock (zero if the clock went back).
fn between(then: Timestamp, now: Timestamp) -> Duration {
    Duration::from_millis(u64::try_from(now.as_millis() - then.as_millis()).unwrap_or(0))
}

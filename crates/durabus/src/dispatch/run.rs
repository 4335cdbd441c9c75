//! One attempt's handler runs: each pending subscription's handler inside its `process` span,
//! behind its breaker, with its timeout; snoozes counted against the subscription's cap.

use std::sync::Arc;

use super::Dispatcher;
use super::decide::{Failure, Ran};
use super::registry::Entry;
use crate::breaker::Admission;
use crate::clock::Timestamp;
use crate::event::Event;
use crate::handler::HandlerOutcome;
use crate::telemetry::{RunResult, spans};

impl Dispatcher {
    /// Runs the pending handlers of `event` (`now`: the bus clock before the first runs);
    /// returns what ran and when the last handler that ran ended.
    pub(super) async fn run_handlers(
        &self,
        event: &Event,
        subs: &[Arc<Entry>],
        now: Timestamp,
    ) -> (Ran, Option<Timestamp>) {
        let mut delivered = event.delivered.clone();
        // Neither handled already nor cancelled for this event.
        let mut pending: Vec<&Arc<Entry>> = subs
            .iter()
            .filter(|s| !delivered.iter().any(|k| k == &s.key) && !event.cancelled.contains(&s.key))
            .collect();
        let mut deferred_until: Option<Timestamp> = None;
        if let Some(pauses) = self.paused.get() {
            // A paused subscription's handler does not run: the event is parked for it (due
            // at its pause's mark, later than any breaker's time, so the earlier time wins and
            // the event comes back to be parked again if the pause still holds).
            pending.retain(|s| match pauses.covering(&s.key, now) {
                Some(p) => {
                    let mark = crate::pause::parked_at(p.id);
                    deferred_until = Some(deferred_until.map_or(mark, |t| t.min(mark)));
                    false
                }
                None => true,
            });
        }
        if let Some(limited) = self.limited.get() {
            self.take_rate_slots(event, &mut pending, &limited, now, &mut deferred_until)
                .await;
        }
        let infos: Vec<&crate::handler::Subscription> = pending.iter().map(|s| &s.info).collect();
        let mut admissions = self.breakers.admit(&infos, now);
        if self.breakers.config().shared {
            self.take_shared_probes(&pending, &mut admissions, now)
                .await;
        }
        let mut snoozed: Option<(Timestamp, Vec<String>)> = None;
        // When the last handler that ran ended: what the breakers and the decision are told.
        let mut ended = None;
        for (i, (sub, admission)) in pending.iter().zip(&admissions).enumerate() {
            if let Admission::Skip { retry_at } = admission {
                // Open breaker: this handler gets the event later; the others run now.
                deferred_until = Some(deferred_until.map_or(*retry_at, |t| t.min(*retry_at)));
                continue;
            }
            let held = match self.take_slot(event, sub, self.clock.now()).await {
                Ok(held) => held,
                Err(until) => {
                    // Every slot of its concurrency limit is taken: the event waits in line.
                    if *admission == Admission::Probe {
                        self.breakers.release_probe(&sub.info.id);
                    }
                    deferred_until = Some(deferred_until.map_or(until, |t| t.min(until)));
                    continue;
                }
            };
            let started = std::time::Instant::now();
            let span = spans::process("deliver", event, sub.info.label());
            let run =
                crate::handler::run_handler(sub.handler.as_ref(), event.clone(), sub.info.timeout);
            let result = spans::inside(&span, run).await;
            let outcome = RunResult::of(&result);
            spans::ended(&span, outcome);
            drop(span);
            self.give_back(sub, held, result.is_ok()).await;
            self.telemetry
                .handler_finished(sub.info.label(), outcome, started.elapsed());
            let at = self.clock.now();
            ended = Some(at);
            let result = match result {
                HandlerOutcome::Snoozed(delay) => match self.snooze(event, sub, *admission).await {
                    // Not a failure and not a success: the breaker does not hear of it.
                    Ok(()) => {
                        let due = at.plus(delay);
                        let (until, keys) = snoozed.get_or_insert_with(|| (due, Vec::new()));
                        *until = (*until).min(due);
                        keys.push(sub.key.clone());
                        continue;
                    }
                    Err(failure) => failure,
                },
                other => other,
            };
            let permanent = result.is_permanent();
            if permanent {
                // Not the downstream's fault: the breaker does not hear of it (a probe it
                // admitted is given back).
                if *admission == Admission::Probe {
                    self.breakers.release_probe(&sub.info.id);
                }
            } else {
                let t = self.breakers.record(&sub.info, at, result.is_ok());
                if let Some(t) = t
                    && self.breakers.config().shared
                {
                    self.share_transition(sub, t, at).await;
                }
            }
            let Some((error, causes)) = result.into_failure() else {
                delivered.push(sub.key.clone());
                continue;
            };
            // Handlers after the failure do not run: a probe admitted for one of them is
            // released, or its breaker would wait for that probe forever.
            for (later, adm) in pending.iter().zip(&admissions).skip(i + 1) {
                if *adm == Admission::Probe {
                    self.breakers.release_probe(&later.info.id);
                }
            }
            let ran = Ran::Handlers {
                delivered,
                failure: Some(Failure {
                    subscription_id: sub.info.id.clone(),
                    key: Some(sub.key.clone()),
                    error,
                    causes,
                    permanent,
                    hold_key: sub.info.hold_key_on_dead_letter,
                }),
                deferred_until,
                snoozed: None,
            };
            return (ran, ended);
        }
        let ran = Ran::Handlers {
            delivered,
            failure: None,
            deferred_until,
            snoozed,
        };
        (ran, ended)
    }

    /// Takes a rate-limit slot for each pending subscription that has a limit: one whose slot
    /// is ahead is left out, the event put off to that slot (reserved for it). A store that
    /// cannot answer puts the event off by a second.
    async fn take_rate_slots(
        &self,
        event: &Event,
        pending: &mut Vec<&Arc<Entry>>,
        limited: &std::collections::HashSet<String>,
        now: Timestamp,
        deferred_until: &mut Option<Timestamp>,
    ) {
        let mut kept = Vec::with_capacity(pending.len());
        for sub in pending.drain(..) {
            if !limited.contains(&sub.key) {
                kept.push(sub);
                continue;
            }
            let wait = match self.store.rate_take(event.id, &sub.key, now).await {
                Ok(None | Some(crate::rate::RateTake::Run)) => {
                    kept.push(sub);
                    continue;
                }
                Ok(Some(crate::rate::RateTake::WaitUntil(t))) => t,
                Err(e) => {
                    tracing::warn!(subscription = %sub.key, error = %e, "could not take a rate-limit slot; the event waits");
                    now.plus(std::time::Duration::from_secs(1))
                }
            };
            *deferred_until = Some(deferred_until.map_or(wait, |t| t.min(wait)));
        }
        *pending = kept;
    }

    /// Whether `sub`'s handler may snooze `event` once more (fewer than its `max_snoozes` so
    /// far): `Ok`, after giving back a probe the breaker admitted it with; else the failure the
    /// snooze counts as.
    async fn snooze(
        &self,
        event: &Event,
        sub: &Entry,
        admission: Admission,
    ) -> std::result::Result<(), HandlerOutcome> {
        let cap = sub.info.max_snoozes;
        let used = self.store.snoozes(event.id, &sub.key).await.map_err(|e| {
            HandlerOutcome::Error(
                format!("the handler snoozed and its snoozes could not be counted: {e}"),
                Vec::new(),
            )
        })?;
        if used >= cap {
            return Err(HandlerOutcome::Error(
                format!(
                    "the handler snoozed {} times, the most max_snoozes allows ({cap})",
                    used + 1
                ),
                Vec::new(),
            ));
        }
        if admission == Admission::Probe {
            self.breakers.release_probe(&sub.info.id);
        }
        Ok(())
    }
}

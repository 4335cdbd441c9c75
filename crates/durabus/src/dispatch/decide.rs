//! The one decision: what an attempt's result means for the event. A pure function of the
//! event as claimed, what happened, the retry policy, the time and a jitter draw, so every path
//! that ends an attempt (the bus's workers, an inline publish, `finalize` of an own loop) writes
//! the same outcome, logs the same fields and counts the same metrics.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::dlq::{DeadLetterPolicy, Death};
use crate::event::{Event, EventId};
use crate::retry::{RetryPolicy, jitter};
use crate::store::Outcome;
use crate::telemetry::Pass;

/// The subscription id logged for failures reported through `finalize` (an own loop has no
/// subscription that ran).
pub(crate) const OWN_LOOP: &str = "poll/finalize";

/// A handler (or an own loop) that failed the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// The subscription whose handler failed.
    pub subscription_id: String,
    /// Its delivery key (name or id), written into the error text; `None` for an own loop.
    pub key: Option<String>,
    /// What went wrong.
    pub error: String,
    /// The error's chain of sources, outermost first.
    pub causes: Vec<String>,
    /// No retry can mend it ([`Permanent`](crate::handler::Permanent)): dead-lettered now.
    pub permanent: bool,
    /// Dead-lettered, the event keeps its ordering key held (the failing subscription's
    /// `hold_key_on_dead_letter`).
    pub hold_key: bool,
}

/// What happened during one pass over an event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ran {
    /// Nothing ran: every attempt the policy allows had been used by interrupted deliveries
    /// (crash recovery and lease takeovers count them). `subscription` names the first
    /// matching subscription that had not handled the event, if any: its id and key.
    Exhausted {
        subscription: Option<(String, String)>,
    },
    /// Handlers ran (or an own loop reported its result).
    Handlers {
        /// Delivery keys of every subscription that has now handled the event.
        delivered: Vec<String>,
        /// The failure that ended the pass, if one did.
        failure: Option<Failure>,
        /// When an open breaker will admit a handler that was skipped, if one was.
        deferred_until: Option<Timestamp>,
        /// Handlers that snoozed: when the first wants to be called again, and their keys.
        snoozed: Option<(Timestamp, Vec<String>)>,
    },
}

/// The fields of the warning every failed attempt logs (the retry policy document's list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailureLog {
    pub event_id: EventId,
    pub event_type: String,
    pub subscription_id: String,
    /// The attempt that failed, 1-based.
    pub attempt: u32,
    pub max_attempts: u32,
    /// Until the next attempt; 0 when dead-lettered.
    pub delay_ms: u64,
    pub error: String,
    pub dead_lettered: bool,
    /// The attempts were used up by interrupted deliveries, not by handler failures.
    pub exhausted_by_interruptions: bool,
}

/// What a pass logs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Log {
    /// Nothing (a success).
    Nothing,
    /// An open breaker deferred the event until then.
    Deferred { until: Timestamp },
    /// A pause of one of its subscriptions (or of the bus) parked the event.
    Parked { pause: i64 },
    /// Every slot of a subscription's concurrency limit was taken: the event waits in line.
    WaitingForSlot,
    /// A handler snoozed: the event is due again then.
    Snoozed { until: Timestamp },
    /// The attempt failed.
    Failed(FailureLog),
}

/// The decision: what to record, how to count it, what to log.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub outcome: Outcome,
    pub pass: Pass,
    pub log: Log,
}

/// Whether the event may not be attempted again: its failed attempts (interrupted ones
/// included) already exceed the policy's retries.
pub(crate) fn exhausted(event: &Event, policy: &RetryPolicy) -> bool {
    event.retry_count > policy.max_retries
}

/// The retry policy and the dead-letter policy in force for one event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policies<'a> {
    pub retry: &'a RetryPolicy,
    pub dead_letters: &'a DeadLetterPolicy,
}

/// Decides what the pass `ran` over `event` (as claimed) means. `u` is a uniform draw in
/// `[0, 1)` for the back-off jitter.
pub(crate) fn decide(
    event: Event,
    ran: Ran,
    policies: Policies<'_>,
    now: Timestamp,
    u: f64,
) -> Decision {
    let policy = policies.retry;
    let prior = event.retry_count;
    match ran {
        Ran::Exhausted { subscription } => {
            let error = event.last_error().unwrap_or("interrupted").to_owned();
            let (subscription_id, key) = subscription.unzip();
            let log = FailureLog {
                event_id: event.id,
                event_type: event.event_type.clone(),
                subscription_id: subscription_id.unwrap_or_default(),
                attempt: prior,
                max_attempts: policy.max_attempts(),
                delay_ms: 0,
                error: error.clone(),
                dead_lettered: true,
                exhausted_by_interruptions: true,
            };
            let death = Death::new(
                event.id,
                &event.event_type,
                key.as_deref(),
                &error,
                Vec::new(),
                event.errors.clone(),
                prior,
                policies.dead_letters.clone(),
            );
            Decision {
                outcome: Outcome::Dead {
                    id: event.id,
                    retry_count: prior,
                    errors: event.errors,
                    delivered: event.delivered,
                    death: Box::new(death),
                },
                pass: Pass::Failed { dead: true },
                log: Log::Failed(log),
            }
        }
        Ran::Handlers {
            delivered,
            failure: None,
            deferred_until,
            snoozed: Some((at, subscriptions)),
        } => {
            // Not a failed attempt: retry count and errors stay as they are; the snoozes are
            // counted per subscription.
            let until = deferred_until.map_or(at, |d| d.min(at));
            Decision {
                outcome: Outcome::Snooze {
                    id: event.id,
                    delivered,
                    next_attempt_at: until,
                    subscriptions,
                },
                pass: Pass::Deferred,
                log: Log::Snoozed { until },
            }
        }
        Ran::Handlers {
            delivered,
            failure: None,
            deferred_until: Some(until),
            snoozed: None,
        } => Decision {
            // Not a failed attempt: retry count and errors stay as they are.
            outcome: Outcome::Retry {
                id: event.id,
                retry_count: prior,
                errors: event.errors,
                delivered,
                next_attempt_at: until,
            },
            pass: Pass::Deferred,
            log: match crate::pause::parked_by(until) {
                Some(pause) => Log::Parked { pause },
                None if until == crate::concurrency::WAIT_MARK => Log::WaitingForSlot,
                None => Log::Deferred { until },
            },
        },
        Ran::Handlers {
            delivered,
            failure: None,
            deferred_until: None,
            snoozed: None,
        } => Decision {
            outcome: Outcome::Done {
                id: event.id,
                delivered,
            },
            pass: Pass::Succeeded,
            log: Log::Nothing,
        },
        Ran::Handlers {
            delivered,
            failure: Some(failure),
            ..
        } => {
            let attempt = prior.saturating_add(1);
            let dead = failure.permanent || attempt > policy.max_retries;
            let delay = if dead {
                Duration::ZERO
            } else {
                jitter(policy.delay(attempt + 1), u)
            };
            let mut errors = event.errors;
            errors.push(match &failure.key {
                Some(key) => format!("attempt {attempt} [{key}]: {}", failure.error),
                None => format!("attempt {attempt}: {}", failure.error),
            });
            let hold_key = failure.hold_key;
            let death = dead.then(|| {
                Box::new(
                    Death::new(
                        event.id,
                        &event.event_type,
                        failure.key.as_deref(),
                        &failure.error,
                        failure.causes.clone(),
                        errors.clone(),
                        attempt,
                        // A permanent failure is not auto-retried either: it waits for an operator.
                        if failure.permanent {
                            DeadLetterPolicy::manual_only()
                        } else {
                            policies.dead_letters.clone()
                        },
                    )
                    .holding_key(hold_key),
                )
            });
            let log = FailureLog {
                event_id: event.id,
                event_type: event.event_type,
                subscription_id: failure.subscription_id,
                attempt,
                max_attempts: policy.max_attempts(),
                delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                error: failure.error,
                dead_lettered: dead,
                exhausted_by_interruptions: false,
            };
            let outcome = if let Some(death) = death {
                Outcome::Dead {
                    id: event.id,
                    retry_count: attempt,
                    errors,
                    delivered,
                    death,
                }
            } else {
                Outcome::Retry {
                    id: event.id,
                    retry_count: attempt,
                    errors,
                    delivered,
                    next_attempt_at: now.plus(delay),
                }
            };
            Decision {
                outcome,
                pass: Pass::Failed { dead },
                log: Log::Failed(log),
            }
        }
    }
}

/// Writes a decision's log line: a warning with the retry policy document's fields for a
/// failed attempt, an info line for a deferral.
pub(crate) fn emit(log: &Log, event: EventId, event_type: &str) {
    match log {
        Log::Nothing => {}
        Log::Deferred { until } => tracing::info!(
            event_id = %event,
            event_type,
            next_attempt_at = %until,
            "event deferred: a matching subscription's circuit breaker is open or its rate limit's next slot is ahead"
        ),
        Log::Parked { pause } => tracing::debug!(
            event_id = %event,
            event_type,
            pause,
            "event parked: a matching subscription is paused; it is due when the pause ends"
        ),
        Log::WaitingForSlot => tracing::debug!(
            event_id = %event,
            event_type,
            "event waits in line: every slot of a matching subscription's concurrency limit is taken"
        ),
        Log::Snoozed { until } => tracing::debug!(
            event_id = %event,
            event_type,
            next_attempt_at = %until,
            "event snoozed by a handler"
        ),
        Log::Failed(f) if f.exhausted_by_interruptions => tracing::warn!(
            event_id = %f.event_id,
            event_type = %f.event_type,
            subscription_id = %f.subscription_id,
            attempt = f.attempt,
            max_attempts = f.max_attempts,
            delay_ms = f.delay_ms,
            error = %f.error,
            dead_lettered = f.dead_lettered,
            "attempts exhausted by interrupted deliveries; dead-lettering"
        ),
        Log::Failed(f) => tracing::warn!(
            event_id = %f.event_id,
            event_type = %f.event_type,
            subscription_id = %f.subscription_id,
            attempt = f.attempt,
            max_attempts = f.max_attempts,
            delay_ms = f.delay_ms,
            error = %f.error,
            dead_lettered = f.dead_lettered,
            "event delivery failed"
        ),
    }
}

#[cfg(test)]
mod tests;

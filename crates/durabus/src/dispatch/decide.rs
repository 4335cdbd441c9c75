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
            deferred_until: Some(until),
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
            log: Log::Deferred { until },
        },
        Ran::Handlers {
            delivered,
            failure: None,
            deferred_until: None,
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
            let dead = attempt > policy.max_retries;
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
            let death = dead.then(|| {
                Box::new(Death::new(
                    event.id,
                    &event.event_type,
                    failure.key.as_deref(),
                    &failure.error,
                    failure.causes.clone(),
                    errors.clone(),
                    attempt,
                    policies.dead_letters.clone(),
                ))
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
            "event deferred: a circuit breaker is open for a matching subscription"
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
#[allow(clippy::expect_used)]
mod tests {
    use super::*;
    use crate::event::{EventStatus, NewEvent};

    const NOW: Timestamp = Timestamp(1_000_000);

    fn event(retry_count: u32, errors: &[&str]) -> Event {
        let mut e = NewEvent::new("order.paid", &1)
            .map(|n| n.into_event(EventStatus::Processing, Timestamp(0)))
            .unwrap_or_else(|e| panic!("{e}"));
        e.retry_count = retry_count;
        e.errors = errors.iter().map(|s| (*s).to_owned()).collect();
        e.delivered = vec!["audit".into()];
        e
    }

    fn policy(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            ..RetryPolicy::default()
        }
    }

    static DEAD_LETTERS: std::sync::LazyLock<DeadLetterPolicy> =
        std::sync::LazyLock::new(DeadLetterPolicy::default);

    fn decide(event: Event, ran: Ran, retry: &RetryPolicy, now: Timestamp, u: f64) -> Decision {
        super::decide(
            event,
            ran,
            Policies {
                retry,
                dead_letters: &DEAD_LETTERS,
            },
            now,
            u,
        )
    }

    fn failed(key: Option<&str>) -> Ran {
        Ran::Handlers {
            delivered: vec!["audit".into()],
            failure: Some(Failure {
                subscription_id: "sub-1".into(),
                key: key.map(str::to_owned),
                error: "card refused".into(),
                causes: vec!["connection reset".into()],
            }),
            deferred_until: None,
        }
    }

    #[test]
    fn success_is_done_with_the_delivery_records() {
        let e = event(1, &["attempt 1 [pay]: x"]);
        let id = e.id;
        let d = decide(
            e,
            Ran::Handlers {
                delivered: vec!["audit".into(), "pay".into()],
                failure: None,
                deferred_until: None,
            },
            &policy(3),
            NOW,
            0.5,
        );
        assert_eq!(
            d.outcome,
            Outcome::Done {
                id,
                delivered: vec!["audit".into(), "pay".into()]
            }
        );
        assert_eq!(d.pass, Pass::Succeeded);
        assert_eq!(d.log, Log::Nothing);
    }

    #[test]
    fn a_failure_with_retries_left_is_scheduled_with_the_backoff_and_logged() {
        let e = event(1, &["attempt 1 [pay]: x"]);
        let id = e.id;
        // Attempt 2 failed: attempt 3 waits base * 2 = 2 s; u = 0.5 is no jitter.
        let d = decide(e, failed(Some("pay")), &policy(3), NOW, 0.5);
        match &d.outcome {
            Outcome::Retry {
                id: i,
                retry_count,
                errors,
                delivered,
                next_attempt_at,
            } => {
                assert_eq!(*i, id);
                assert_eq!(*retry_count, 2);
                assert_eq!(errors.len(), 2);
                assert_eq!(errors[1], "attempt 2 [pay]: card refused");
                assert_eq!(delivered, &vec!["audit".to_owned()]);
                assert_eq!(*next_attempt_at, NOW.plus(Duration::from_secs(2)));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.pass, Pass::Failed { dead: false });
        let Log::Failed(log) = d.log else {
            panic!("no failure log")
        };
        assert_eq!(
            log,
            FailureLog {
                event_id: id,
                event_type: "order.paid".into(),
                subscription_id: "sub-1".into(),
                attempt: 2,
                max_attempts: 4,
                delay_ms: 2000,
                error: "card refused".into(),
                dead_lettered: false,
                exhausted_by_interruptions: false,
            }
        );
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        for (u, ms) in [(0.0, 900), (0.999_999, 1099)] {
            let d = decide(event(0, &[]), failed(Some("pay")), &policy(3), NOW, u);
            let Log::Failed(log) = d.log else {
                panic!("no log")
            };
            assert_eq!(log.delay_ms, ms, "u = {u}");
        }
    }

    #[test]
    fn the_last_allowed_failure_is_a_dead_letter() {
        let e = event(3, &["a", "b", "c"]);
        let id = e.id;
        let mut d = decide(e, failed(Some("pay")), &policy(3), NOW, 0.5);
        // The announcement's own id is fresh; everything else is decided.
        let announced = match &mut d.outcome {
            Outcome::Dead { death, .. } => death.announcement.take(),
            other => panic!("{other:?}"),
        };
        let errors = vec![
            "a".to_owned(),
            "b".into(),
            "c".into(),
            "attempt 4 [pay]: card refused".into(),
        ];
        assert_eq!(
            d.outcome,
            Outcome::Dead {
                id,
                retry_count: 4,
                errors: errors.clone(),
                delivered: vec!["audit".into()],
                death: Box::new(Death {
                    announcement: None,
                    ..Death::new(
                        id,
                        "order.paid",
                        Some("pay"),
                        "card refused",
                        vec!["connection reset".into()],
                        errors,
                        4,
                        DeadLetterPolicy::default(),
                    )
                }),
            }
        );
        let announced = announced.expect("a dead letter is announced");
        assert_eq!(announced.event_type, "system.dead_letter");
        assert_eq!(d.pass, Pass::Failed { dead: true });
        let Log::Failed(log) = d.log else {
            panic!("no log")
        };
        assert!(log.dead_lettered);
        assert_eq!((log.attempt, log.max_attempts, log.delay_ms), (4, 4, 0));
    }

    #[test]
    fn an_own_loops_failure_has_no_key_in_its_error() {
        let d = decide(event(0, &[]), failed(None), &policy(1), NOW, 0.5);
        let Outcome::Retry { errors, .. } = &d.outcome else {
            panic!("{:?}", d.outcome)
        };
        assert_eq!(errors, &vec!["attempt 1: card refused".to_owned()]);
    }

    #[test]
    fn a_breaker_deferral_keeps_count_and_errors() {
        let e = event(1, &["attempt 1 [pay]: x"]);
        let id = e.id;
        let until = NOW.plus(Duration::from_secs(30));
        let d = decide(
            e,
            Ran::Handlers {
                delivered: vec!["audit".into(), "mail".into()],
                failure: None,
                deferred_until: Some(until),
            },
            &policy(3),
            NOW,
            0.5,
        );
        assert_eq!(
            d.outcome,
            Outcome::Retry {
                id,
                retry_count: 1,
                errors: vec!["attempt 1 [pay]: x".into()],
                delivered: vec!["audit".into(), "mail".into()],
                next_attempt_at: until,
            }
        );
        assert_eq!(d.pass, Pass::Deferred);
        assert_eq!(d.log, Log::Deferred { until });
    }

    #[test]
    fn a_failure_wins_over_a_deferral() {
        let ran = Ran::Handlers {
            delivered: vec![],
            failure: Some(Failure {
                subscription_id: "s".into(),
                key: Some("k".into()),
                error: "e".into(),
                causes: vec![],
            }),
            deferred_until: Some(NOW),
        };
        let d = decide(event(0, &[]), ran, &policy(3), NOW, 0.5);
        assert!(matches!(d.outcome, Outcome::Retry { retry_count: 1, .. }));
        assert_eq!(d.pass, Pass::Failed { dead: false });
    }

    #[test]
    fn attempts_used_up_by_interruptions_dead_letter_without_running() {
        let e = event(
            4,
            &[
                "interrupted: a",
                "interrupted: b",
                "interrupted: c",
                "interrupted: d",
            ],
        );
        let id = e.id;
        assert!(exhausted(&e, &policy(3)));
        assert!(!exhausted(&event(3, &[]), &policy(3)));
        let d = decide(
            e,
            Ran::Exhausted {
                subscription: Some(("sub-1".into(), "pay".into())),
            },
            &policy(3),
            NOW,
            0.5,
        );
        match &d.outcome {
            Outcome::Dead {
                id: i,
                retry_count: 4,
                errors,
                death,
                ..
            } => {
                assert_eq!(*i, id);
                assert_eq!(errors.len(), 4);
                assert_eq!(death.subscription.as_deref(), Some("pay"));
                assert_eq!(death.error, "interrupted: d");
                assert_eq!(death.attempts, 4);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.pass, Pass::Failed { dead: true });
        let Log::Failed(log) = d.log else {
            panic!("no log")
        };
        assert_eq!(
            log,
            FailureLog {
                event_id: id,
                event_type: "order.paid".into(),
                subscription_id: "sub-1".into(),
                attempt: 4,
                max_attempts: 4,
                delay_ms: 0,
                error: "interrupted: d".into(),
                dead_lettered: true,
                exhausted_by_interruptions: true,
            }
        );
    }
}

#![allow(clippy::expect_used)]
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
            permanent: false,
            hold_key: false,
        }),
        deferred_until: None,
        snoozed: None,
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
            snoozed: None,
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
    let (announced, new_group) = match &mut d.outcome {
        Outcome::Dead { death, .. } => (death.announcement.take(), death.new_group.take()),
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
                new_group: None,
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
    // And its group, should the store find it new.
    let new_group = new_group.expect("a group to announce if new");
    assert_eq!(new_group.event_type, "system.failure_group.new");
    let payload: serde_json::Value = serde_json::from_str(&new_group.payload).unwrap_or_default();
    assert_eq!(payload["type"], "order.paid");
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
            snoozed: None,
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
            permanent: false,
            hold_key: false,
        }),
        deferred_until: Some(NOW),
        snoozed: None,
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

#[test]
fn a_snooze_reschedules_at_the_earliest_wanted_time_without_a_failure() {
    let e = event(1, &["attempt 1 [pay]: x"]);
    let id = e.id;
    let until = Timestamp(NOW.0 + 30_000);
    let breaker = Timestamp(NOW.0 + 10_000);
    let d = decide(
        e,
        Ran::Handlers {
            delivered: vec!["audit".into()],
            failure: None,
            deferred_until: Some(breaker),
            snoozed: Some((until, vec!["pay".into()])),
        },
        &policy(3),
        NOW,
        0.5,
    );
    assert_eq!(
        d.outcome,
        Outcome::Snooze {
            id,
            delivered: vec!["audit".into()],
            next_attempt_at: breaker,
            subscriptions: vec!["pay".into()],
        }
    );
    assert_eq!(d.pass, Pass::Deferred);
    assert_eq!(d.log, Log::Snoozed { until: breaker });
}

#[test]
fn a_permanent_failure_is_a_dead_letter_with_retries_left() {
    let mut ran = failed(Some("pay"));
    if let Ran::Handlers {
        failure: Some(f), ..
    } = &mut ran
    {
        f.permanent = true;
    }
    let d = decide(event(0, &[]), ran, &policy(5), NOW, 0.5);
    match d.outcome {
        Outcome::Dead {
            retry_count,
            errors,
            death,
            ..
        } => {
            assert_eq!(retry_count, 1, "one attempt, counted");
            assert!(death.policy.auto_retry.is_empty(), "no auto retry either");
            assert_eq!(errors, vec!["attempt 1 [pay]: card refused".to_owned()]);
        }
        other => panic!("expected a dead letter, got {other:?}"),
    }
    assert_eq!(d.pass, Pass::Failed { dead: true });
    // The same failure, not permanent, is retried.
    let d = decide(event(0, &[]), failed(Some("pay")), &policy(5), NOW, 0.5);
    assert!(
        matches!(d.outcome, Outcome::Retry { .. }),
        "{:?}",
        d.outcome
    );
}

#[test]
fn pauses_and_concurrency_limits_log_what_holds_the_event() {
    for (until, log) in [
        (crate::pause::parked_at(7), Log::Parked { pause: 7 }),
        (crate::concurrency::WAIT_MARK, Log::WaitingForSlot),
    ] {
        let d = decide(
            event(0, &[]),
            Ran::Handlers {
                delivered: Vec::new(),
                failure: None,
                deferred_until: Some(until),
                snoozed: None,
            },
            &policy(3),
            NOW,
            0.5,
        );
        assert_eq!(d.pass, Pass::Deferred);
        assert_eq!(d.log, log);
        let Outcome::Retry {
            retry_count,
            next_attempt_at,
            ..
        } = d.outcome
        else {
            panic!("{:?}", d.outcome)
        };
        assert_eq!((retry_count, next_attempt_at), (0, until));
    }
}

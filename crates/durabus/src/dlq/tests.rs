#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::clock::Timestamp;
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventId;
use std::time::Duration;

const H: u64 = 3600;

fn t(secs: u64) -> Timestamp {
    Timestamp(1_767_225_600_000).plus(Duration::from_secs(secs))
}

fn operator() -> Actor {
    Actor::new("ann", ActorKind::Cli)
}

fn update(change: Result<Change>) -> (State, bool) {
    match change {
        Ok(Change::Update {
            state,
            requeue,
            withdraw: false,
        }) => (state, requeue),
        other => panic!("expected an update, got {other:?}"),
    }
}

fn kind(change: Result<Change>) -> Option<ErrorKind> {
    change.err().map(|e| e.kind())
}

#[test]
fn the_auto_retry_schedule_is_1h_6h_24h_then_manual() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let s = State::created(t(0), &policy);
    assert_eq!(s.status, DeadLetterStatus::Pending);
    assert_eq!(s.next_auto_retry_at, Some(t(H)), "1 h after creation");
    let mut s = s;
    let mut retried_at = Vec::new();
    for (n, wait) in [(1u32, 6 * H), (2, 24 * H)] {
        let at = s.next_auto_retry_at.unwrap();
        let (r, requeue) = update(apply(id, &s, &Action::Retry, &Actor::auto_retry(), at));
        assert!(requeue);
        assert_eq!(r.status, DeadLetterStatus::Retrying);
        assert_eq!(r.auto_retry_count, n);
        assert_eq!(r.next_auto_retry_at, None, "nothing due while retrying");
        // The round fails a few seconds later: the next is due `wait` after the retry.
        s = r.died_again(&policy);
        assert_eq!(s.status, DeadLetterStatus::Pending);
        assert_eq!(
            s.next_auto_retry_at,
            Some(at.plus(Duration::from_secs(wait)))
        );
        assert_eq!(s.rounds, n + 1);
        retried_at.push(at);
    }
    let at = s.next_auto_retry_at.unwrap();
    let (r, _) = update(apply(id, &s, &Action::Retry, &Actor::auto_retry(), at));
    assert_eq!(r.auto_retry_count, 3);
    let s = r.died_again(&policy);
    assert_eq!(
        s.next_auto_retry_at, None,
        "after three auto retries: manual only"
    );
    assert_eq!(s.status, DeadLetterStatus::Pending);
    // A manual retry is still possible, and counted apart.
    let (r, _) = update(apply(id, &s, &Action::Retry, &operator(), t(100 * H)));
    assert_eq!((r.auto_retry_count, r.manual_retry_count), (3, 1));
    assert_eq!(r.last_retry_by.as_deref(), Some("ann"));
    let done = r.delivered(t(100 * H + 1));
    assert_eq!(done.status, DeadLetterStatus::Resolved);
    assert_eq!(done.resolved_by.as_deref(), Some("ann"));
    assert_eq!(done.resolved_at, Some(t(100 * H + 1)));
}

#[test]
fn a_manual_retry_before_the_schedule_keeps_the_schedule_counting_from_it() {
    let policy = DeadLetterPolicy::default();
    let s = State::created(t(0), &policy);
    let (r, _) = update(apply(
        EventId::new(),
        &s,
        &Action::Retry,
        &operator(),
        t(600),
    ));
    let s = r.died_again(&policy);
    assert_eq!(s.auto_retry_count, 0);
    assert_eq!(s.manual_retry_count, 1);
    assert_eq!(
        s.next_auto_retry_at,
        Some(t(600 + H)),
        "the first auto retry is still owed, an hour after the last retry"
    );
}

#[test]
fn an_auto_retry_that_delivers_is_resolved_by_auto_retry() {
    let policy = DeadLetterPolicy::default();
    let s = State::created(t(0), &policy);
    let (r, _) = update(apply(
        EventId::new(),
        &s,
        &Action::Retry,
        &Actor::auto_retry(),
        t(H),
    ));
    let done = r.delivered(t(H + 5));
    assert_eq!(done.resolved_by.as_deref(), Some(AUTO_RETRY));
}

#[test]
fn no_schedule_means_manual_only_from_the_start() {
    let s = State::created(t(0), &DeadLetterPolicy::manual_only());
    assert_eq!(s.next_auto_retry_at, None);
    let custom = DeadLetterPolicy {
        auto_retry: vec![Duration::from_secs(60)],
    };
    assert_eq!(
        State::created(t(0), &custom).next_auto_retry_at,
        Some(t(60))
    );
}

#[test]
fn resolve_and_abandon_rules() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let pending = State::created(t(0), &policy);
    let resolve = Action::Resolve {
        note: "refunded by hand".into(),
    };
    let (resolved, requeue) = update(apply(id, &pending, &resolve, &operator(), t(5)));
    assert!(!requeue);
    assert_eq!(resolved.status, DeadLetterStatus::Resolved);
    assert_eq!(
        resolved.resolution_note.as_deref(),
        Some("refunded by hand")
    );
    assert_eq!(resolved.resolved_by.as_deref(), Some("ann"));
    assert_eq!(resolved.next_auto_retry_at, None);
    // Nothing happens to a resolved record.
    for action in [
        Action::Retry,
        resolve.clone(),
        Action::Abandon { note: None },
    ] {
        let e = apply(id, &resolved, &action, &operator(), t(6)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict);
        assert!(e.to_string().contains("resolved"), "{e}");
        assert!(matches!(e, Error::Conflict { ref status, .. } if status == "resolved"));
    }
    // Abandon stops auto retries; a manual retry or a resolve is still possible.
    let (abandoned, _) = update(apply(
        id,
        &pending,
        &Action::Abandon {
            note: Some("customer gone".into()),
        },
        &operator(),
        t(5),
    ));
    assert_eq!(abandoned.status, DeadLetterStatus::Abandoned);
    assert_eq!(abandoned.next_auto_retry_at, None);
    assert_eq!(
        kind(apply(
            id,
            &abandoned,
            &Action::Abandon { note: None },
            &operator(),
            t(6)
        )),
        Some(ErrorKind::Conflict)
    );
    let (r, requeue) = update(apply(id, &abandoned, &Action::Retry, &operator(), t(7)));
    assert!(requeue);
    assert_eq!(r.status, DeadLetterStatus::Retrying);
    // If that round fails too, it is abandoned again (no auto retries).
    let again = r.died_again(&policy);
    assert_eq!(again.status, DeadLetterStatus::Abandoned);
    assert_eq!(again.next_auto_retry_at, None);
    assert_eq!(again.resolution_note.as_deref(), Some("customer gone"));
    let (closed, _) = update(apply(id, &abandoned, &resolve, &operator(), t(8)));
    assert_eq!(closed.status, DeadLetterStatus::Resolved);
}

#[test]
fn a_record_being_retried_waits_for_its_round_once_a_worker_has_its_event() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let (mut retrying, _) = update(apply(
        id,
        &State::created(t(0), &policy),
        &Action::Retry,
        &operator(),
        t(1),
    ));
    assert!(!retrying.round_started);
    retrying.round_started = true;
    for action in [
        Action::Retry,
        Action::Resolve { note: "x".into() },
        Action::Abandon { note: None },
        Action::Purge,
    ] {
        let e = apply(id, &retrying, &action, &operator(), t(2)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "{action:?}");
        assert!(e.to_string().contains("retrying"), "{e}");
    }
}

#[test]
fn a_retry_no_worker_has_picked_up_can_be_called_off() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let (retrying, _) = update(apply(
        id,
        &State::created(t(0), &policy),
        &Action::Retry,
        &operator(),
        t(1),
    ));
    let withdrawn = |change: Result<Change>| match change {
        Ok(Change::Update {
            state,
            requeue: false,
            withdraw: true,
        }) => state,
        other => panic!("expected the retry called off, got {other:?}"),
    };
    let resolved = withdrawn(apply(
        id,
        &retrying,
        &Action::Resolve {
            note: "fixed by hand".into(),
        },
        &operator(),
        t(2),
    ));
    assert_eq!(resolved.status, DeadLetterStatus::Resolved);
    assert_eq!(resolved.resolution_note.as_deref(), Some("fixed by hand"));
    let abandoned = withdrawn(apply(
        id,
        &retrying,
        &Action::Abandon { note: None },
        &operator(),
        t(2),
    ));
    assert_eq!(abandoned.status, DeadLetterStatus::Abandoned);
    assert_eq!(abandoned.next_auto_retry_at, None);
    // Neither a second retry nor a purge: those wait for the round.
    for action in [Action::Retry, Action::Purge] {
        assert_eq!(
            kind(apply(id, &retrying, &action, &operator(), t(2))),
            Some(ErrorKind::Conflict),
            "{action:?}"
        );
    }
}

#[test]
fn purge_deletes_anything_not_being_retried() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let pending = State::created(t(0), &policy);
    assert_eq!(
        apply(id, &pending, &Action::Purge, &operator(), t(1)).ok(),
        Some(Change::Delete)
    );
    let (resolved, _) = update(apply(
        id,
        &pending,
        &Action::Resolve { note: "ok".into() },
        &operator(),
        t(1),
    ));
    assert_eq!(
        apply(id, &resolved, &Action::Purge, &operator(), t(2)).ok(),
        Some(Change::Delete)
    );
}

#[test]
fn a_resolve_needs_a_note() {
    assert_eq!(
        Action::Resolve { note: "  ".into() }
            .validate()
            .map_err(|e| e.kind()),
        Err(ErrorKind::InvalidInput)
    );
    assert!(Action::Resolve { note: "ok".into() }.validate().is_ok());
    assert!(Action::Abandon { note: None }.validate().is_ok());
    assert!(
        Action::Abandon {
            note: Some("x".repeat(3000))
        }
        .validate()
        .is_err()
    );
    assert!(Actor::new(" ", ActorKind::Cli).validate().is_err());
}

#[test]
fn a_death_announces_itself_unless_it_is_a_system_event() {
    let id = EventId::new();
    let d = Death::new(
        id,
        "order.paid",
        Some("payments"),
        "card 42 refused",
        vec!["io: reset".into()],
        vec!["attempt 1 [payments]: card 42 refused".into()],
        1,
        DeadLetterPolicy::default(),
    );
    assert_eq!(
        d.fingerprint,
        fingerprint::fingerprint("payments", "card 7 refused")
    );
    assert_eq!(d.signature, "card <n> refused");
    let a = d.announcement.expect("announced");
    assert_eq!(a.event_type, SYSTEM_DEAD_LETTER);
    let payload: serde_json::Value = serde_json::from_str(&a.payload).unwrap_or_default();
    assert_eq!(payload["event_id"], id.to_string());
    assert_eq!(payload["type"], "order.paid");
    assert_eq!(payload["error"], "card 42 refused");
    assert_eq!(payload["attempts"], 1);
    assert_eq!(payload["fingerprint"], d.fingerprint);
    let g = d.new_group.expect("a new group is announced");
    assert_eq!(g.event_type, SYSTEM_FAILURE_GROUP_NEW);
    let payload: serde_json::Value = serde_json::from_str(&g.payload).unwrap_or_default();
    assert_eq!(payload["fingerprint"], d.fingerprint);
    assert_eq!(payload["signature"], "card <n> refused");
    assert_eq!(payload["subscription"], "payments");
    assert_eq!(payload["event_id"], id.to_string());
    let quiet = Death::new(
        id,
        SYSTEM_DEAD_LETTER,
        Some("alerts"),
        "pager down",
        vec![],
        vec![],
        4,
        DeadLetterPolicy::default(),
    );
    assert!(quiet.announcement.is_none(), "no cascade");
    assert!(quiet.new_group.is_none(), "no cascade");
}

#[test]
fn filters_are_checked() {
    assert!(DeadLetterFilter::default().is_empty());
    let bad_glob = DeadLetterFilter {
        event_type: Some("a b".into()),
        ..DeadLetterFilter::default()
    };
    assert!(bad_glob.validate().is_err());
    let empty_range = DeadLetterFilter {
        created_from: Some(t(5)),
        created_before: Some(t(5)),
        ..DeadLetterFilter::default()
    };
    // Valid: it selects nothing (no JSON Schema can compare two fields, so the API's
    // document could not say it is refused).
    assert!(empty_range.validate().is_ok());
    for group in ["", &"é".repeat(65)] {
        let bad = DeadLetterFilter {
            group: Some(group.into()),
            ..DeadLetterFilter::default()
        };
        assert!(bad.validate().is_err(), "{group:?}");
    }
    let many_chars = DeadLetterFilter {
        group: Some("é".repeat(64)),
        ..DeadLetterFilter::default()
    };
    assert!(many_chars.validate().is_ok(), "64 characters, 128 bytes");
    assert!(
        Keyset {
            before: None,
            limit: 1001
        }
        .validate()
        .is_err()
    );
}

#[test]
fn group_deltas_follow_open_and_closed() {
    use DeadLetterStatus::*;
    let d = |b, a| {
        let g = group_delta("f", b, a);
        (g.count, g.open)
    };
    assert_eq!(d(None, Some(Pending)), (1, 1));
    assert_eq!(d(Some(Pending), Some(Retrying)), (0, 0));
    assert_eq!(d(Some(Retrying), Some(Resolved)), (0, -1));
    assert_eq!(d(Some(Abandoned), Some(Retrying)), (0, 1));
    assert_eq!(d(Some(Resolved), None), (-1, 0));
    assert_eq!(d(Some(Pending), None), (-1, -1));
}

#[test]
fn a_second_death_appends_a_round_and_may_change_group() {
    let policy = DeadLetterPolicy::default();
    let id = EventId::new();
    let death = |msg: &str| {
        Death::new(
            id,
            "order.paid",
            Some("pay"),
            msg,
            vec![],
            vec![format!("attempt 1 [pay]: {msg}")],
            1,
            policy.clone(),
        )
    };
    let first = plan_death(None, &death("card 1 refused"), t(0));
    assert_eq!(first.history.len(), 1);
    assert_eq!(first.group.count, 1);
    assert!(first.old_group.is_none());
    let (retrying, _) = update(apply(id, &first.state, &Action::Retry, &operator(), t(10)));
    let old = Existing {
        state: retrying.clone(),
        fingerprint: death("card 1 refused").fingerprint,
        history: first.history.clone(),
    };
    let same = plan_death(Some(old.clone()), &death("card 2 refused"), t(20));
    assert_eq!(same.history.len(), 2, "the first round is kept");
    assert_eq!(same.history[1].round, 2);
    assert_eq!(same.history[1].retried_by.as_deref(), Some("ann"));
    assert_eq!(same.history[0], first.history[0]);
    assert_eq!((same.group.count, same.group.open), (0, 0));
    let moved = plan_death(Some(old), &death("timeout"), t(20));
    let og = moved.old_group.expect("left its group");
    assert_eq!((og.count, og.open), (-1, -1));
    assert_eq!((moved.group.count, moved.group.open), (1, 1));
}

#[test]
fn errors_written_by_the_dispatcher_split_into_key_and_message() {
    assert_eq!(
        split_error("attempt 3 [payments]: card refused: stolen"),
        (Some("payments"), "card refused: stolen")
    );
    assert_eq!(
        split_error("attempt 2: finalized as failed"),
        (None, "finalized as failed")
    );
    assert_eq!(
        split_error("interrupted: the process stopped"),
        (None, "interrupted: the process stopped")
    );
    assert_eq!(split_error("attempt x: y"), (None, "attempt x: y"));
}

#[test]
fn deltas_sum_by_group() {
    let d = |f: &str, count, open| GroupDelta {
        fingerprint: f.into(),
        count,
        open,
    };
    assert_eq!(
        sum_deltas([
            d("a", 0, -1),
            d("b", -1, 0),
            d("a", 0, -1),
            d("c", 1, 1),
            d("c", -1, -1)
        ]),
        vec![d("a", 0, -2), d("b", -1, 0)]
    );
}

#[test]
fn each_status_offers_exactly_the_actions_the_rules_allow() {
    use DeadLetterStatus::*;
    assert_eq!(
        Action::allowed(Pending),
        vec!["retry", "resolve", "abandon", "purge"]
    );
    assert_eq!(Action::allowed(Retrying), vec!["resolve", "abandon"]);
    assert_eq!(
        Action::allowed(Abandoned),
        vec!["retry", "resolve", "purge"]
    );
    assert_eq!(Action::allowed(Resolved), vec!["purge"]);
}

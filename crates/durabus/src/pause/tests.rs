//! The pure rules of pauses.

use super::*;
use crate::actor::ActorKind;

fn pause(id: i64, scope: PauseScope, until: Option<i64>) -> Pause {
    Pause {
        id,
        scope,
        actor: Actor::new("ops", ActorKind::Cli),
        reason: "downstream down".into(),
        paused_at: Timestamp(0),
        until: until.map(Timestamp),
        ended: None,
        parked: 0,
    }
}

#[test]
fn scopes_cover_what_they_name() {
    assert!(PauseScope::Bus.covers("anything"));
    assert!(PauseScope::Subscription("mail".into()).covers("mail"));
    assert!(!PauseScope::Subscription("mail".into()).covers("mailer"));
    let m = PauseScope::Matching("pay*-eu".into());
    assert!(m.covers("payments-eu"));
    assert!(m.covers("pay-eu"));
    assert!(!m.covers("payments-us"));
    assert!(!m.covers("xpay-eu"));
    assert!(PauseScope::Matching("*".into()).covers(""));
    assert!(PauseScope::Matching("a*b*c".into()).covers("aXbYc"));
    assert!(!PauseScope::Matching("a*b*c".into()).covers("aXcYb"));
    assert!(!PauseScope::Matching("ab*ba".into()).covers("aba"));
}

#[test]
fn the_set_answers_the_oldest_pause_in_force() {
    let set = PauseSet::new(vec![
        pause(1, PauseScope::Matching("pay*".into()), Some(100)),
        pause(2, PauseScope::Subscription("payments".into()), None),
    ]);
    assert_eq!(
        set.covering("payments", Timestamp(50)).map(|p| p.id),
        Some(1)
    );
    // Pause 1's until has passed: pause 2 still holds it.
    assert_eq!(
        set.covering("payments", Timestamp(100)).map(|p| p.id),
        Some(2)
    );
    assert_eq!(set.covering("payroll", Timestamp(100)), None);
    assert_eq!(set.bus(Timestamp(0)), None);
    assert_eq!(set.next_expiry(), Some(Timestamp(100)));
    let mut ended = pause(3, PauseScope::Bus, None);
    ended.ended = Some(PauseEnd {
        kind: PauseEndKind::Resumed,
        at: Timestamp(1),
        actor: Actor::new("ops", ActorKind::Cli),
        reason: None,
    });
    assert!(PauseSet::new(vec![ended]).is_empty());
}

#[test]
fn parking_marks_name_their_pause_and_no_claim_reaches_them() {
    assert_eq!(parked_by(parked_at(42)), Some(42));
    assert_eq!(parked_by(Timestamp(1_700_000_000_000)), None);
    // Later than any time a clock here will show: 3000-01-01 is 32,503,680,000,000 ms.
    assert!(parked_at(0).0 > 32_503_680_000_000);
}

#[test]
fn requests_are_checked() {
    let now = Timestamp(1_000_000);
    let ok = PauseRequest {
        scope: PauseScope::Subscription("mail".into()),
        until: Some(Timestamp(2_000_000)),
        actor: Actor::new("ops", ActorKind::Cli),
        reason: "smtp down".into(),
    };
    assert!(ok.validate(now).is_ok());
    let bad = |r: PauseRequest| r.validate(now).map_err(|e| e.to_string()).err();
    let mut r = ok.clone();
    r.reason = "  ".into();
    assert!(bad(r).is_some_and(|e| e.contains("reason")));
    let mut r = ok.clone();
    r.until = Some(now);
    assert!(bad(r).is_some_and(|e| e.contains("until")));
    let mut r = ok.clone();
    r.until = Some(now.plus(std::time::Duration::from_secs(MAX_PAUSE_SECONDS + 1)));
    assert!(bad(r).is_some_and(|e| e.contains("until")));
    let mut r = ok.clone();
    r.scope = PauseScope::Matching(String::new());
    assert!(bad(r).is_some_and(|e| e.contains("target")));
    let mut r = ok;
    r.scope = PauseScope::Subscription("x".repeat(TARGET_MAX_CHARS + 1));
    assert!(bad(r).is_some_and(|e| e.contains("target")));
}

#[test]
fn scopes_round_trip_through_their_stored_form_and_json() {
    for s in [
        PauseScope::Bus,
        PauseScope::Subscription("a".into()),
        PauseScope::Matching("a*".into()),
    ] {
        assert_eq!(PauseScope::parse(s.kind(), s.target()), Some(s.clone()));
        let json = serde_json::to_string(&s).unwrap_or_default();
        assert_eq!(serde_json::from_str::<PauseScope>(&json).ok(), Some(s));
    }
    assert_eq!(
        serde_json::to_string(&PauseScope::Subscription("m".into())).unwrap_or_default(),
        r#"{"kind":"subscription","target":"m"}"#
    );
    assert_eq!(PauseScope::parse("other", "x"), None);
}

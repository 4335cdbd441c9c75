#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::error::ErrorKind;

fn event(event_type: &str, created: i64, status: EventStatus) -> Event {
    Event {
        id: EventId::new(),
        event_type: event_type.into(),
        payload: r#"{"n":1}"#.into(),
        status,
        retry_count: 0,
        errors: Vec::new(),
        metadata: [("tenant".to_owned(), "a".to_owned())].into(),
        delivered: Vec::new(),
        created_at: Timestamp(created),
        updated_at: Timestamp(created),
        next_attempt_at: None,
        dlq_at: None,
        dlq_count: 0,
        priority: 0,
        deliver_at: None,
        cancelled: Vec::new(),
        cancel_requested: false,
        ordering_key: None,
    }
}

#[test]
fn a_selection_needs_a_start_ids_or_all() {
    let e = ReplaySelection::default().validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("start time"), "{e}");
    ReplaySelection {
        all: true,
        ..ReplaySelection::default()
    }
    .validate()
    .unwrap();
    ReplaySelection::ids([EventId::new()]).validate().unwrap();
    ReplaySelection::range(Timestamp(5), None)
        .validate()
        .unwrap();
}

#[test]
fn bad_selections_are_refused_with_the_reason() {
    let field = |e: crate::Error| e.invalid_value().map(|v| (v.field, v.problem, v.accepted));
    // A range that ends where it starts is valid and selects nothing.
    let empty_range = ReplaySelection::range(Timestamp(10), Some(Timestamp(10)));
    empty_range.validate().unwrap();
    assert!(!empty_range.matches(&event("order.created", 10, EventStatus::Done)));
    let bad_type = ReplaySelection::range(Timestamp(0), None).types(["order..x"]);
    let e = bad_type.validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(field(e).unwrap().0, "pattern");
    let many = ReplaySelection::ids((0..=MAX_IDS).map(|_| EventId::new()));
    let (f, problem, accepted) = field(many.validate().unwrap_err()).unwrap();
    assert_eq!(f, "ids");
    assert_eq!(problem, format!("{} ids", MAX_IDS + 1));
    assert!(
        accepted.starts_with(&format!("at most {MAX_IDS} ids")),
        "{accepted}"
    );
    let rate = ReplayRequest::new(ReplaySelection::range(Timestamp(0), None)).rate_limit(0);
    let e = rate.validate().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "rate_limit: 0 events/s; accepted: 1 to {MAX_RATE} events/s, or none for an unthrottled replay"
        )
    );
}

#[test]
fn matching_holds_every_criterion() {
    let sel = ReplaySelection::range(Timestamp(100), Some(Timestamp(200)))
        .types(["order.*"])
        .statuses([EventStatus::Done]);
    assert!(sel.matches(&event("order.created", 100, EventStatus::Done)));
    assert!(!sel.matches(&event("order.created", 200, EventStatus::Done)));
    assert!(!sel.matches(&event("order.created", 99, EventStatus::Done)));
    assert!(!sel.matches(&event("user.created", 150, EventStatus::Done)));
    assert!(!sel.matches(&event("order.created", 150, EventStatus::Dlq)));
    let one = event("user.created", 150, EventStatus::Pending);
    assert!(ReplaySelection::ids([one.id]).matches(&one));
    assert!(!ReplaySelection::ids([EventId::new()]).matches(&one));
}

#[test]
fn system_events_are_left_out_unless_named() {
    let all = ReplaySelection {
        all: true,
        ..ReplaySelection::default()
    };
    let dead = event("system.dead_letter", 1, EventStatus::Done);
    assert!(!all.matches(&dead));
    assert!(!all.clone().types(["*"]).matches(&dead));
    assert!(all.types(["system.*"]).matches(&dead));
}

#[test]
fn freezing_cuts_the_range_at_the_submit_time() {
    let open = ReplaySelection::range(Timestamp(0), None).frozen(Timestamp(1_000));
    assert_eq!(open.to, Some(Timestamp(1_001)));
    assert!(open.matches(&event("a.b", 1_000, EventStatus::Done)));
    assert!(!open.matches(&event("a.b", 1_001, EventStatus::Done)));
    let earlier =
        ReplaySelection::range(Timestamp(0), Some(Timestamp(500))).frozen(Timestamp(1_000));
    assert_eq!(earlier.to, Some(Timestamp(500)));
}

#[test]
fn a_republished_event_is_new_and_says_what_it_replays() {
    let original = event("order.created", 5, EventStatus::Done);
    let new = republish(&original, "op-1");
    assert_ne!(new.id, original.id);
    assert_eq!(new.event_type, original.event_type);
    assert_eq!(new.payload, original.payload);
    assert_eq!(new.metadata["tenant"], "a");
    assert_eq!(new.metadata[REPLAY_OF], original.id.to_string());
    assert_eq!(new.metadata[REPLAY_OPERATION], "op-1");
}

#[test]
fn announcements_are_system_events() {
    let actor = Actor::new("ops", crate::dlq::ActorKind::Cli);
    let sel = ReplaySelection::range(Timestamp(0), None);
    let started = started_event(&ReplayStarted {
        operation: "op",
        actor: &actor,
        mode: ReplayMode::Republish,
        selection: &sel,
        total: 3,
        rate_limit: Some(10),
    })
    .unwrap();
    assert_eq!(started.event_type, STARTED);
    let v: serde_json::Value = serde_json::from_str(&started.payload).unwrap();
    assert_eq!(v["total"], 3);
    assert_eq!(v["mode"], "republish");
    let done = completed_event(&ReplayCompleted {
        operation: "op",
        status: "cancelled",
        processed: 1,
        skipped: 0,
        errors: 0,
        duration_ms: 7,
        actor: &actor,
    })
    .unwrap();
    assert_eq!(done.event_type, COMPLETED);
    let v: serde_json::Value = serde_json::from_str(&done.payload).unwrap();
    assert_eq!(v["status"], "cancelled");
}

#[test]
fn summaries_round_trip_and_keep_the_first_failures() {
    let mut s = ReplaySummary::default();
    s.count("a");
    s.count("a");
    for _ in 0..MAX_FAILURES + 5 {
        s.fail(EventId::new(), "boom".into());
    }
    assert_eq!(s.by_type["a"], 2);
    assert_eq!(s.failures.len(), MAX_FAILURES);
    let back = ReplaySummary::from_json("op", Some(&s.to_json().unwrap())).unwrap();
    assert_eq!(back, s);
    assert_eq!(
        ReplaySummary::from_json("op", None).unwrap(),
        ReplaySummary::default()
    );
    let bad = ReplaySummary::from_json("op", Some(&serde_json::json!({"by_type": 3})));
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::Corrupt);
}

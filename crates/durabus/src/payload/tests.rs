#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use super::*;

const NOW: Timestamp = Timestamp(1_767_225_600_000);

fn config(t: &str, stages: &[&str], days: u32, redact: &[&str]) -> PayloadConfig {
    PayloadConfig {
        event_type: t.into(),
        stages: stages.iter().map(|s| (*s).to_owned()).collect(),
        retention_days: days,
        redact: redact.iter().map(|s| (*s).to_owned()).collect(),
        redact_before_store: false,
        updated_at: NOW,
        updated_by: "ann".into(),
    }
}

#[test]
fn the_most_specific_configuration_decides() {
    let set = ConfigSet::new(vec![
        config("*", &["published"], 7, &["$.secret"]),
        config("order.paid", &["error", "webhook_raw"], 30, &[]),
    ]);
    let paid = set.resolve("order.paid");
    assert!(paid.stores("error") && paid.stores("webhook_raw"));
    assert!(!paid.stores("published"), "its own row, not merged with *");
    assert_eq!(paid.retention_days, 30);
    assert!(!paid.redacts());
    let other = set.resolve("user.created");
    assert!(other.stores("published") && !other.stores("error"));
    assert_eq!(other.retention_days, 7);
    assert!(other.redacts());
    // Without rows: every stage, 14 days.
    let none = ConfigSet::default();
    assert!(none.resolve("x").stores("anything"));
    assert_eq!(none.resolve("x").retention_days, DEFAULT_RETENTION_DAYS);
    let all = ConfigSet::new(vec![config("*", &["*"], 1, &[])]);
    assert!(all.resolve("x").stores("agent_response"));
    let nothing = ConfigSet::new(vec![config("*", &[], 1, &[])]);
    assert!(!nothing.resolve("x").stores("published"));
}

#[test]
fn configurations_are_checked() {
    assert!(config("", &["*"], 1, &[]).validate().is_err(), "empty type");
    assert!(config("a b", &["*"], 1, &[]).validate().is_err());
    assert!(
        config("order.*", &["*"], 1, &[]).validate().is_err(),
        "a glob is not a type"
    );
    assert!(config("x", &["bad stage"], 1, &[]).validate().is_err());
    assert!(
        config("x", &["*"], 1, &["card"]).validate().is_err(),
        "bad path"
    );
    assert!(
        config("x", &["free_form-stage.v2"], 0, &["$.a"])
            .validate()
            .is_ok()
    );
    assert!(
        config("system.dead_letter", &["*"], 1, &[])
            .validate()
            .is_ok()
    );
    assert!(retention_days(-1).is_err());
    assert_eq!(retention_days(0).ok(), Some(0));
}

#[test]
fn snapshots_follow_the_configuration() {
    let id = EventId::new();
    let text = r#"{"card":{"number":"4111"},"order":7}"#;
    let plain = Resolved::from_config(&config("x", &["published"], 1, &["$.card.number"]));
    assert!(
        snapshot(id, "x", "error", text, &plain, NOW)
            .unwrap()
            .is_none()
    );
    let s = snapshot(id, "x", "published", text, &plain, NOW)
        .unwrap()
        .unwrap();
    assert_eq!(compress::gunzip(&s.blob).unwrap(), text, "stored as given");
    assert_eq!(s.size_original, text.len() as u64);
    assert_eq!(
        plain.redact(text),
        r#"{"card":{"number":"[redacted]"},"order":7}"#
    );
    let mut never = config("x", &["*"], 1, &["$.card.number"]);
    never.redact_before_store = true;
    let never = Resolved::from_config(&never);
    let s = snapshot(id, "x", "published", text, &never, NOW)
        .unwrap()
        .unwrap();
    assert!(
        !compress::gunzip(&s.blob).unwrap().contains("4111"),
        "never stored"
    );
}

#[test]
fn retention_cutoffs_per_type() {
    let set = ConfigSet::new(vec![
        config("*", &["*"], 14, &[]),
        config("a", &["*"], 1, &[]),
    ]);
    let r = set.retention(NOW);
    assert_eq!(r.cutoff("a"), NOW.minus(Duration::from_secs(86_400)));
    assert_eq!(r.cutoff("b"), NOW.minus(Duration::from_secs(14 * 86_400)));
    assert_eq!(r.latest(), r.cutoff("a"));
}

#[test]
fn an_error_snapshot_holds_payload_and_error() {
    let v: serde_json::Value = serde_json::from_str(&error_text(r#"{"a":1}"#, "boom", 2)).unwrap();
    assert_eq!(v["payload"]["a"], 1);
    assert_eq!(v["error"], "boom");
    assert_eq!(v["attempt"], 2);
}

#[test]
fn error_snapshots_are_redacted_inside_their_payload() {
    let r = Resolved::from_config(&config("x", &["*"], 1, &["$.card"]));
    let text = error_text(r#"{"card":"4111","n":1}"#, "boom", 1);
    let shown: serde_json::Value =
        serde_json::from_str(&r.redact_stage(STAGE_ERROR, &text)).unwrap();
    assert_eq!(shown["payload"]["card"], "[redacted]");
    assert_eq!(shown["payload"]["n"], 1);
    assert_eq!(shown["error"], "boom");
    assert_eq!(
        r.redact_stage("published", r#"{"card":"4111"}"#),
        r#"{"card":"[redacted]"}"#
    );
}

#![allow(clippy::unwrap_used)]

use super::*;
use crate::error::ErrorKind;

fn at(rfc3339: &str) -> Timestamp {
    Timestamp(
        chrono::DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis(),
    )
}

fn field(p: &Periodic) -> Option<String> {
    p.check()
        .err()
        .and_then(|e| e.invalid_value())
        .map(|i| i.field)
}

#[test]
fn a_schedule_is_read_in_its_time_zone_daylight_saving_included() {
    let paris = Schedule::parse("0 9 * * *", "Europe/Paris").unwrap();
    // Summer: UTC+2; winter: UTC+1.
    assert_eq!(
        paris.next_after(at("2026-07-01T00:00:00Z")),
        Some(at("2026-07-01T07:00:00Z"))
    );
    assert_eq!(
        paris.next_after(at("2026-01-10T00:00:00Z")),
        Some(at("2026-01-10T08:00:00Z"))
    );
    let utc = Schedule::parse("*/15 * * * *", "UTC").unwrap();
    assert_eq!(
        utc.next_after(at("2026-01-10T10:15:00Z")),
        Some(at("2026-01-10T10:30:00Z")),
        "strictly after"
    );
    assert_eq!(
        utc.latest_at(at("2026-01-10T10:15:00Z")),
        Some(at("2026-01-10T10:15:00Z")),
        "at or before"
    );
}

#[test]
fn the_due_tick_is_the_latest_after_the_cursor_and_none_while_paused() {
    let p = Periodic::new("every-15", "*/15 * * * *", "x.tick", &1).unwrap();
    let mut row = p.row(at("2026-01-10T10:01:00Z"));
    let s = row.parsed().unwrap();
    assert_eq!(row.due(&s, at("2026-01-10T10:14:59Z")), None);
    assert_eq!(
        row.due(&s, at("2026-01-10T10:15:00Z")),
        Some(at("2026-01-10T10:15:00Z"))
    );
    // Down for an hour: the latest missed tick once, not four.
    assert_eq!(
        row.due(&s, at("2026-01-10T11:20:00Z")),
        Some(at("2026-01-10T11:15:00Z"))
    );
    row.cursor = at("2026-01-10T11:15:00Z");
    assert_eq!(row.due(&s, at("2026-01-10T11:20:00Z")), None);
    row.paused = true;
    assert_eq!(row.due(&s, at("2026-01-10T12:00:00Z")), None);
    let info = PeriodicInfo::of(row.clone(), at("2026-01-10T11:20:00Z"));
    assert_eq!(info.next_tick, None, "paused: no next tick");
    row.paused = false;
    let info = PeriodicInfo::of(row, at("2026-01-10T11:20:00Z"));
    assert_eq!(info.next_tick, Some(at("2026-01-10T11:30:00Z")));
}

#[test]
fn a_ticks_event_has_a_fixed_time_ordered_id_and_its_metadata() {
    let t = at("2026-01-10T10:15:00Z");
    assert_eq!(
        tick_id("a", t),
        tick_id("a", t),
        "the same in every process"
    );
    assert_ne!(tick_id("a", t), tick_id("b", t));
    assert_ne!(
        tick_id("a", t),
        tick_id("a", t.plus(std::time::Duration::from_secs(1)))
    );
    let id = tick_id("a", t).0;
    assert_eq!(id.get_version_num(), 7);
    let (secs, _) = id.get_timestamp().unwrap().to_unix();
    assert_eq!(i64::try_from(secs).unwrap() * 1000, t.as_millis());
    let row = Periodic::new("a", "*/15 * * * *", "x.tick", &serde_json::json!({"k": 1}))
        .unwrap()
        .priority(4)
        .row(t);
    let e = row.event(t).unwrap();
    assert_eq!(e.id, tick_id("a", t));
    assert_eq!(e.event_type, "x.tick");
    assert_eq!(e.payload, r#"{"k":1}"#);
    assert_eq!(e.options.priority_value(), 4);
    assert_eq!(e.metadata.get(META_PERIODIC).map(String::as_str), Some("a"));
    assert_eq!(
        e.metadata.get(META_TICK).cloned(),
        Some(t.as_millis().to_string())
    );
}

#[test]
fn bad_definitions_are_typed_errors() {
    let p = |name: &str, cron: &str| Periodic::new(name, cron, "x.tick", &1).unwrap();
    assert_eq!(field(&p("ok-1:a.b_c", "0 9 * * *")), None);
    assert_eq!(field(&p("", "0 9 * * *")).as_deref(), Some("name"));
    assert_eq!(field(&p("has space", "0 9 * * *")).as_deref(), Some("name"));
    assert_eq!(
        field(&p(&"n".repeat(NAME_MAX + 1), "0 9 * * *")).as_deref(),
        Some("name")
    );
    assert_eq!(field(&p("a", "every day")).as_deref(), Some("schedule"));
    assert_eq!(
        field(&p("a", "0 9 * * *").timezone("Mars/Olympus")).as_deref(),
        Some("timezone")
    );
    assert_eq!(
        field(&p("a", "0 9 * * *").priority(101)).as_deref(),
        Some("priority")
    );
    let system = Periodic::new("a", "0 9 * * *", "system.mine", &1).unwrap();
    assert_eq!(system.check().unwrap_err().kind(), ErrorKind::InvalidInput);
}

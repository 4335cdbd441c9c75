//! Periodic events, on every store: published once per tick across buses (processes), paused,
//! resumed and removed, the latest missed tick published after a time with no bus, and bad
//! definitions refused.

use std::time::Duration;

use durabus::periodic::tick_id;
use durabus::{ErrorKind, EventBus, EventQuery, Periodic, Timestamp};

use crate::support::*;

const MINUTE: Duration = Duration::from_secs(60);

/// A bus that publishes periodic events and delivers nothing (the events stay to be counted).
async fn publisher(h: &Harness) -> EventBus {
    let bus = h.builder().await.deliver(false).build().await.unwrap();
    bus.start().await.unwrap();
    bus
}

fn every_minute(name: &str, event_type: &str) -> Periodic {
    Periodic::new(
        name,
        "* * * * *",
        event_type,
        &serde_json::json!({"n": name}),
    )
    .unwrap()
}

/// The ids of the stored events of `event_type`, oldest first.
async fn published(bus: &EventBus, event_type: &str) -> Vec<durabus::EventId> {
    let mut ids: Vec<_> = bus
        .history()
        .list(EventQuery {
            event_type: Some(event_type.to_owned()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id)
        .collect();
    ids.sort();
    ids
}

async fn published_reach(bus: &EventBus, event_type: &str, n: usize) -> Vec<durabus::EventId> {
    eventually(&format!("{n} {event_type} event(s)"), || async {
        let ids = published(bus, event_type).await;
        (ids.len() >= n).then_some(ids)
    })
    .await
}

/// 30 s into the minute after the clock's reading.
fn mid_minute(h: &Harness) -> Timestamp {
    let t = h.clock.now().as_millis();
    Timestamp(t - t.rem_euclid(60_000) + 90_000)
}

pub async fn each_tick_is_published_once_across_buses(h: &Harness) {
    h.clock.set(mid_minute(h));
    let (a, b) = (publisher(h).await, publisher(h).await);
    // Every process registers it, as an application does on each start.
    for bus in [&a, &b] {
        bus.periodic(every_minute("heartbeat", "p.beat"))
            .await
            .unwrap();
    }
    let first = Timestamp(h.clock.now().as_millis() + 30_000);
    h.advance(Duration::from_secs(30));
    let ids = published_reach(&a, "p.beat", 1).await;
    assert_eq!(ids, vec![tick_id("heartbeat", first)]);
    h.advance(MINUTE);
    let ids = published_reach(&a, "p.beat", 2).await;
    assert_eq!(ids.len(), 2, "once per tick, not once per bus: {ids:?}");
    assert_eq!(ids[1], tick_id("heartbeat", first.plus(MINUTE)));
    let e = a.store().get_event(ids[1]).await.unwrap().unwrap();
    assert_eq!(
        e.metadata.get("periodic").map(String::as_str),
        Some("heartbeat")
    );
    assert_eq!(e.payload, r#"{"n":"heartbeat"}"#);
    // The tick is recorded just after its event is stored.
    let second = first.plus(MINUTE);
    let listed = eventually("the second tick recorded", || async {
        let listed = a.periodics().list().await.unwrap();
        (listed.len() == 1 && listed[0].row.last_tick == Some(second)).then_some(listed)
    })
    .await;
    assert_eq!(listed[0].row.last_event_id, Some(ids[1]));
    assert_eq!(listed[0].next_tick, Some(first.plus(MINUTE * 2)));
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

pub async fn a_paused_definition_skips_its_ticks_until_resumed(h: &Harness) {
    h.clock.set(mid_minute(h));
    let bus = publisher(h).await;
    bus.periodic(every_minute("held", "p.held")).await.unwrap();
    bus.periodic(every_minute("sentinel", "p.sentinel"))
        .await
        .unwrap();
    let periodics = bus.periodics();
    let paused = periodics.pause("held").await.unwrap();
    assert!(paused.row.paused);
    assert_eq!(paused.next_tick, None);
    // Registering again (a restart of the application) keeps it paused.
    let again = bus.periodic(every_minute("held", "p.held")).await.unwrap();
    assert!(again.row.paused);
    h.advance(MINUTE);
    // The sentinel's tick is published: the paused one's, at the same time, is not.
    published_reach(&bus, "p.sentinel", 1).await;
    assert!(published(&bus, "p.held").await.is_empty());
    h.advance(Duration::from_secs(20));
    let resumed = periodics.resume("held").await.unwrap();
    assert!(!resumed.row.paused);
    let next = resumed.next_tick.unwrap();
    assert!(
        next > h.clock.now(),
        "the tick missed while paused is skipped"
    );
    h.clock.set(next);
    let ids = published_reach(&bus, "p.held", 1).await;
    assert_eq!(ids, vec![tick_id("held", next)]);
    // Removed: gone from the list, and its ticks are no longer published.
    periodics.remove("held").await.unwrap();
    assert_eq!(periodics.list().await.unwrap().len(), 1);
    h.advance(MINUTE);
    published_reach(&bus, "p.sentinel", 3).await;
    assert_eq!(published(&bus, "p.held").await.len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn the_latest_missed_tick_is_published_once_after_downtime(h: &Harness) {
    h.clock.set(mid_minute(h));
    let registered = h.clock.now();
    let bus = h.builder().await.deliver(false).build().await.unwrap();
    bus.periodic(every_minute("catch-up", "p.late"))
        .await
        .unwrap();
    // No bus runs for an hour.
    h.advance(MINUTE * 60);
    bus.start().await.unwrap();
    let ids = published_reach(&bus, "p.late", 1).await;
    let latest =
        Timestamp(h.clock.now().as_millis() - h.clock.now().as_millis().rem_euclid(60_000));
    assert!(latest > registered);
    assert_eq!(
        ids,
        vec![tick_id("catch-up", latest)],
        "one, for the latest tick"
    );
    bus.shutdown().await.unwrap();
}

pub async fn bad_definitions_and_unknown_names_are_refused(h: &Harness) {
    let bus = h.bus().await;
    let bad = [
        (
            Periodic::new("", "* * * * *", "p.x", &1).unwrap(),
            ErrorKind::InvalidInput,
        ),
        (
            Periodic::new("a", "every day", "p.x", &1).unwrap(),
            ErrorKind::InvalidInput,
        ),
        (
            Periodic::new("a", "* * * * *", "p.x", &1)
                .unwrap()
                .timezone("Nowhere/City"),
            ErrorKind::InvalidInput,
        ),
        (
            Periodic::new("a", "* * * * *", "system.x", &1).unwrap(),
            ErrorKind::InvalidInput,
        ),
    ];
    for (p, kind) in bad {
        assert_eq!(bus.periodic(p).await.unwrap_err().kind(), kind);
    }
    let periodics = bus.periodics();
    assert!(periodics.list().await.unwrap().is_empty(), "nothing stored");
    for err in [
        periodics.pause("nope").await.unwrap_err(),
        periodics.resume("nope").await.unwrap_err(),
        periodics.remove("nope").await.unwrap_err(),
        periodics.get("nope").await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    }
    assert_eq!(
        periodics.pause("bad name").await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    bus.shutdown().await.unwrap();
}

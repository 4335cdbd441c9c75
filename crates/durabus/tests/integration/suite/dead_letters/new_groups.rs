//! A failure group seen for the first time is announced with a `system.failure_group.new`
//! event, in the transaction that creates the group: once per group, never for a later
//! failure of the same group, never for a system event's failure (no cascade).

use super::*;

fn new_groups_of(events: &[Event]) -> Vec<serde_json::Value> {
    events.iter().map(Event::payload_value).collect()
}

async fn new_group_events(bus: &EventBus) -> Vec<Event> {
    bus.history()
        .list(EventQuery {
            event_type: Some("system.failure_group.new".into()),
            ..EventQuery::default()
        })
        .await
        .unwrap()
}

pub async fn a_new_failure_group_is_announced_once(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    bus.subscribe(
        "ledger.*",
        |_e: Event| async { Err("ledger at 10.0.0.7 timed out after 30s".into()) },
        SubscribeOptions::default()
            .name("ledger")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let first = bus.publish("pay.charge", &1u64).await.unwrap();
    let group = bus.dead_letters().get(first).await.unwrap().fingerprint;
    let announced = new_group_events(&bus).await;
    assert_eq!(announced.len(), 1);
    let payload = &new_groups_of(&announced)[0];
    assert_eq!(payload["fingerprint"], group.as_str());
    assert_eq!(payload["subscription"], "payments");
    assert_eq!(payload["type"], "pay.charge");
    assert_eq!(payload["event_id"], first.to_string());
    assert_eq!(payload["error"], "card for order 1 refused");
    assert!(payload["signature"].is_string(), "{payload}");
    assert_eq!(
        announced[0].status,
        EventStatus::Pending,
        "delivered like any event"
    );

    // The same failure again (another order: the same group) announces nothing.
    let second = bus.publish("pay.charge", &2u64).await.unwrap();
    assert_eq!(
        bus.dead_letters().get(second).await.unwrap().fingerprint,
        group
    );
    assert_eq!(new_group_events(&bus).await.len(), 1);

    // Another failure is another group: announced.
    let other = bus.publish("ledger.post", &3u64).await.unwrap();
    let announced = new_group_events(&bus).await;
    assert_eq!(announced.len(), 2);
    let fingerprints: Vec<String> = new_groups_of(&announced)
        .iter()
        .map(|p| p["fingerprint"].as_str().unwrap().to_owned())
        .collect();
    let other_group = bus.dead_letters().get(other).await.unwrap().fingerprint;
    assert!(fingerprints.contains(&group) && fingerprints.contains(&other_group));
    assert_ne!(group, other_group);
    bus.shutdown().await.unwrap();
}

pub async fn group_trends_count_dead_letters_per_hour_and_mark_new_groups(h: &Harness) {
    let bus = paying_bus(h, Arc::new(AtomicBool::new(false))).await;
    let first = bus.publish("pay.charge", &1u64).await.unwrap();
    h.advance(Duration::from_secs(3 * 3600));
    bus.publish("pay.charge", &2u64).await.unwrap();
    bus.publish("pay.charge", &3u64).await.unwrap();
    h.advance(Duration::from_secs(3600 - 1));
    let group = bus.dead_letters().get(first).await.unwrap().fingerprint;
    let trends = bus.dead_letters().group_trends(10).await.unwrap();
    assert_eq!(trends.len(), 1);
    let t = &trends[0];
    assert_eq!(t.group.fingerprint, group);
    assert!(t.new, "first seen 4 hours ago");
    assert_eq!(t.hourly.len(), durabus::dlq::TREND_HOURS);
    let mut expected = vec![0u64; 24];
    // Now is 4 h (less a second) after the first: it fell 20 h into the window, the others 23.
    expected[20] = 1;
    expected[23] = 2;
    assert_eq!(t.hourly, expected);
    assert_eq!(t.hourly.iter().sum::<u64>(), 3);

    // Two days on: no longer new, nothing in the last day.
    h.advance(Duration::from_secs(2 * 24 * 3600));
    let t = &bus.dead_letters().group_trends(10).await.unwrap()[0];
    assert!(!t.new);
    assert_eq!(t.hourly, vec![0u64; 24]);
    assert_eq!(t.group.count, 3, "the group itself is unchanged");
    bus.shutdown().await.unwrap();
}

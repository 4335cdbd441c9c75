//! Dead-letter records by event type and status in the metrics: the types with the most open
//! dead letters each under their name, the rest as `other`, every status of each present, and
//! the counts following records as they are resolved, abandoned, sent back and purged.

use std::collections::BTreeMap;
use std::time::Duration;

use durabus::{Actor, ActorKind, Event, EventBus, MetricsConfig, RetryOverride, SubscribeOptions};

use super::telemetry::scrape;
use crate::support::*;

/// The `dead_letter_records` series of a scrape: (type, status) → value.
fn records(s: &prometheus_parse::Scrape) -> BTreeMap<(String, String), f64> {
    s.samples
        .iter()
        .filter(|x| x.metric == "durabus_dead_letter_records")
        .map(|x| {
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("not a gauge: {other:?}"),
            };
            let label = |k: &str| x.labels.get(k).unwrap().to_owned();
            ((label("type"), label("status")), v)
        })
        .collect()
}

fn at(series: &BTreeMap<(String, String), f64>, ty: &str, status: &str) -> f64 {
    *series
        .get(&(ty.to_owned(), status.to_owned()))
        .unwrap_or_else(|| panic!("no {ty} {status} in {series:?}"))
}

async fn bus_labelling(h: &Harness, types: u32) -> EventBus {
    let metrics = MetricsConfig {
        dead_letter_types: types,
        ..MetricsConfig::default()
    };
    super::group_metrics::bus_with_metrics(h, metrics).await
}

pub async fn dead_letters_are_counted_by_type_and_status_with_bounded_labels(h: &Harness) {
    let bus = bus_labelling(h, 2).await;
    bus.subscribe(
        "dt.*",
        |_e: Event| async move { Err("down".into()) },
        SubscribeOptions::default()
            .name("dt")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    // 3 of a, 2 of b, 1 each of c and d: a and b labelled, c and d summed as other.
    let mut ids: BTreeMap<&str, Vec<durabus::EventId>> = BTreeMap::new();
    for (ty, n) in [("dt.a", 3), ("dt.b", 2), ("dt.c", 1), ("dt.d", 1)] {
        for i in 0..n {
            let id = bus.publish(ty, &i).await.unwrap();
            ids.entry(ty).or_default().push(id);
        }
    }
    let s = records(&scrape(&bus).await);
    assert_eq!(s.len(), 12, "a, b and other, four statuses each: {s:?}");
    assert_eq!(at(&s, "dt.a", "pending"), 3.0);
    assert_eq!(at(&s, "dt.b", "pending"), 2.0);
    assert_eq!(at(&s, "other", "pending"), 2.0);
    for ty in ["dt.a", "dt.b", "other"] {
        for status in ["retrying", "resolved", "abandoned"] {
            assert_eq!(at(&s, ty, status), 0.0, "{ty} {status}");
        }
    }

    // Closing records moves them between statuses; the ranking follows the open ones.
    let ann = Actor::new("ann", ActorKind::Library);
    let dl = bus.dead_letters();
    for id in &ids["dt.a"][..2] {
        dl.resolve(*id, "handled by hand", &ann).await.unwrap();
    }
    dl.abandon(ids["dt.a"][2], None, &ann).await.unwrap();
    // Past the gauges' cache.
    h.advance(Duration::from_secs(60));
    let s = records(&scrape(&bus).await);
    assert_eq!(at(&s, "dt.b", "pending"), 2.0, "{s:?}");
    // c and d (1 open each) now outrank a (none open); c wins the tie by name.
    assert_eq!(at(&s, "dt.c", "pending"), 1.0, "{s:?}");
    assert!(
        !s.contains_key(&("dt.a".to_owned(), "pending".to_owned())),
        "{s:?}"
    );
    assert_eq!(at(&s, "other", "pending"), 1.0, "d: {s:?}");
    assert_eq!(at(&s, "other", "resolved"), 2.0, "a: {s:?}");
    assert_eq!(at(&s, "other", "abandoned"), 1.0, "a: {s:?}");

    // Purged records leave the counts.
    let purged = bus.dlq().purge(0).await.unwrap();
    assert!(purged >= 3, "the closed records at least: {purged}");
    h.advance(Duration::from_secs(60));
    let s = records(&scrape(&bus).await);
    let total: f64 = s.values().sum();
    let left = bus
        .dead_letters()
        .list(
            durabus::DeadLetterFilter::default(),
            durabus::Keyset::default(),
        )
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(total, left as f64, "{s:?}");
    assert_eq!(at(&s, "other", "resolved"), 0.0, "{s:?}");
    bus.shutdown().await.unwrap();
}

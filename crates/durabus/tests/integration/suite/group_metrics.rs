//! The failure groups in the metrics: each of the largest groups under its fingerprint, the rest
//! as `other`, new groups counted for an hour; the series stay bounded with 10,000 distinct
//! errors.

use std::time::Duration;

use durabus::dlq::Death;
use durabus::{
    DeadLetterPolicy, Event, EventBus, InsertMode, MetricsConfig, NewEvent, Outcome, RetryOverride,
    SubscribeOptions,
};

use super::telemetry::{num, scrape};
use crate::support::*;

/// A word for `i` without digits or hex letters, so each is its own failure group.
fn word(mut i: usize) -> String {
    let mut w = String::new();
    loop {
        w.push(char::from(b'g' + (i % 20) as u8));
        i /= 20;
        if i == 0 {
            return w;
        }
    }
}

/// A bus whose breaker never trips, with these metrics settings.
pub(super) async fn bus_with_metrics(h: &Harness, metrics: MetricsConfig) -> EventBus {
    // The configuration replaces the builder's: the breaker is set in it.
    h.builder()
        .await
        .config(durabus::BusConfig {
            metrics,
            breaker: breaker_never_trips(),
            ..durabus::BusConfig::default()
        })
        .build()
        .await
        .unwrap()
}

async fn bus_labelling(h: &Harness, groups: u32) -> EventBus {
    let metrics = MetricsConfig {
        failure_groups: groups,
        ..MetricsConfig::default()
    };
    bus_with_metrics(h, metrics).await
}

/// The `failure_group_dead_letters` series of a scrape: group → value.
fn group_series(s: &prometheus_parse::Scrape) -> std::collections::BTreeMap<String, f64> {
    s.samples
        .iter()
        .filter(|x| x.metric == "durabus_failure_group_dead_letters")
        .map(|x| {
            let v = match x.value {
                prometheus_parse::Value::Gauge(v) => v,
                ref other => panic!("not a gauge: {other:?}"),
            };
            (x.labels.get("group").unwrap().to_owned(), v)
        })
        .collect()
}

pub async fn the_largest_failure_groups_are_labelled_and_new_ones_counted(h: &Harness) {
    let bus = bus_labelling(h, 3).await;
    bus.subscribe(
        "fg.*",
        |e: Event| async move { Err(format!("failure {}", e.payload::<String>().unwrap()).into()) },
        SubscribeOptions::default()
            .name("fg")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    // Groups of 5, 4, 3, 2 and 1 dead letters.
    let kinds = ["alpha", "beta", "gamma", "delta", "epsilon"];
    let mut fingerprints = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let mut last = None;
        for _ in 0..(5 - k) {
            last = Some(bus.publish("fg.work", kind).await.unwrap());
        }
        let d = bus.dead_letters().get(last.unwrap()).await.unwrap();
        fingerprints.push(d.fingerprint);
    }
    let s = scrape(&bus).await;
    let series = group_series(&s);
    assert_eq!(series.len(), 4, "three groups and other: {series:?}");
    for (fp, n) in fingerprints.iter().zip([5.0, 4.0, 3.0]) {
        assert_eq!(series.get(fp), Some(&n), "{series:?}");
    }
    assert_eq!(
        series.get("other"),
        Some(&3.0),
        "delta and epsilon: {series:?}"
    );
    assert_eq!(num(&s, "durabus_failure_groups_new", &[]), 5.0);

    // An hour later (and past the gauges' cache) none is new; the counts stay.
    h.advance(Duration::from_secs(3601));
    let s = scrape(&bus).await;
    assert_eq!(num(&s, "durabus_failure_groups_new", &[]), 0.0);
    assert_eq!(group_series(&s).get("other"), Some(&3.0));
    bus.shutdown().await.unwrap();
}

pub async fn ten_thousand_distinct_errors_stay_eleven_series(h: &Harness) {
    let bus = bus_labelling(h, 10).await;
    let store = bus.store();
    let now = h.clock.now();
    let n = 10_000;
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let events: Vec<NewEvent> = chunk
            .iter()
            .map(|i| NewEvent::new("fg.many", i).unwrap())
            .collect();
        let ids: Vec<_> = events.iter().map(|e| e.id).collect();
        store
            .insert(events, InsertMode::Claimed, now)
            .await
            .unwrap();
        let outcomes = chunk
            .iter()
            .zip(ids)
            .map(|(i, id)| {
                let error = format!("failure {}", word(*i));
                Outcome::Dead {
                    id,
                    retry_count: 0,
                    errors: vec![error.clone()],
                    delivered: vec![],
                    death: Box::new(Death::new(
                        id,
                        "fg.many",
                        Some("fg"),
                        &error,
                        vec![],
                        vec![error.clone()],
                        1,
                        DeadLetterPolicy::default(),
                    )),
                }
            })
            .collect();
        store.record_many(outcomes, now).await.unwrap();
    }
    assert_eq!(
        bus.dead_letters().groups(u32::MAX).await.unwrap().len(),
        n,
        "each error is its own group"
    );
    let s = scrape(&bus).await;
    let series = group_series(&s);
    assert_eq!(series.len(), 11, "ten groups and other");
    assert_eq!(series.values().sum::<f64>(), n as f64);
    assert_eq!(series.get("other"), Some(&((n - 10) as f64)));
    assert_eq!(num(&s, "durabus_failure_groups_new", &[]), n as f64);
    bus.shutdown().await.unwrap();
}

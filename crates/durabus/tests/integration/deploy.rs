//! The alert rules and the Grafana dashboard in `deploy/` name only metrics a running bus
//! exposes (scraped here from a bus on SQLite and, when reachable, on PostgreSQL), and the
//! dashboard is well-formed JSON with a query in every panel.

use std::collections::BTreeSet;

use durabus::{
    Actor, ActorKind, BreakerConfig, BusBuilder, Event, EventBus, EventStatus, PgOptions,
    ReplayHooks, ReplayRequest, ReplaySelection, RetryOverride, RunOptions, SubscribeOptions,
};

const ALERTS: &str = include_str!("../../../../deploy/prometheus/alerts.yml");
const DASHBOARD: &str = include_str!("../../../../deploy/grafana/durabus.json");

/// Every `durabus_…` name in `text`.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("durabus_") {
        let start = i + at;
        let before = start.checked_sub(1).map(|b| bytes[b]);
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        // Not part of a longer word (a path such as docs/OPERATIONS.md#durabus… is skipped).
        if !before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'#') {
            out.insert(text[start..end].to_owned());
        }
        i = end;
    }
    out
}

/// The sample names an exposition can hold: gauges as typed, counters with `_total`,
/// histograms with `_bucket`, `_sum` and `_count`.
fn exposed(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if f.next() != Some("#") || f.next() != Some("TYPE") {
            continue;
        }
        let (Some(name), Some(kind)) = (f.next(), f.next()) else {
            continue;
        };
        match kind {
            "counter" => {
                out.insert(format!("{name}_total"));
            }
            "histogram" => {
                for s in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{s}"));
                }
            }
            _ => {
                out.insert(name.to_owned());
            }
        }
    }
    out
}

/// Runs a little of everything on `bus` (so every family has a sample: empty families are not
/// exposed), then scrapes it.
async fn scrape(builder: BusBuilder) -> String {
    let bus = builder
        .breaker(BreakerConfig {
            min_samples: 1,
            ..BreakerConfig::default()
        })
        .build()
        .await
        .unwrap();
    let ok = |_e: Event| async { Ok(()) };
    let fail = |_e: Event| async { Err::<(), durabus::BoxError>("down".into()) };
    bus.subscribe("deploy.ok", ok, SubscribeOptions::default())
        .await
        .unwrap();
    let never = RetryOverride::default().max_retries(0);
    bus.subscribe(
        "deploy.dead",
        fail,
        SubscribeOptions::default().retry(never),
    )
    .await
    .unwrap();
    bus.subscribe("deploy.flaky", fail, SubscribeOptions::default())
        .await
        .unwrap();
    bus.start().await.unwrap();
    let from = bus.clock().now();
    bus.publish("deploy.ok", &1).await.unwrap();
    let dead = bus.publish("deploy.dead", &1).await.unwrap();
    bus.publish("deploy.flaky", &1).await.unwrap();
    let queued = bus.enqueue("deploy.ok", &2).await.unwrap();
    for _ in 0..1000 {
        let e = bus.store().get_event(queued).await.unwrap().unwrap();
        if e.status == EventStatus::Done {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let ann = Actor::new("ann", ActorKind::Library);
    bus.dead_letters().retry(dead, &ann).await.unwrap();
    let replays = bus.replays();
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(from, None).types(["deploy.ok"])),
            &ann,
        )
        .await
        .unwrap();
    replays
        .run(&op.id, &RunOptions::default(), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    // A pause in force, so its gauges have series.
    bus.pause(durabus::PauseRequest {
        scope: durabus::PauseScope::Matching("nothing-*".into()),
        until: None,
        actor: ann.clone(),
        reason: "the pause gauges".into(),
    })
    .await
    .unwrap();
    let text = bus.metrics_text().await.unwrap();
    bus.shutdown().await.unwrap();
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_dashboard_name_only_exposed_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = EventBus::builder().sqlite(dir.path().join("m.db"));
    let mut names = exposed(&scrape(sqlite).await);
    assert!(names.contains("durabus_sqlite_wal_bytes"));
    if crate::support::pg_available().await {
        let schema = crate::support::unique_schema();
        let builder = EventBus::builder().postgres_with(
            crate::support::pg_url(),
            PgOptions {
                schema: schema.clone(),
                ..PgOptions::default()
            },
        );
        let pg = exposed(&scrape(builder).await);
        assert!(pg.contains("durabus_live_workers"));
        names.extend(pg);
        crate::support::drop_schema(&schema).await;
    }
    let alerts = referenced(ALERTS);
    let dashboard = referenced(DASHBOARD);
    assert!(alerts.len() >= 8, "{alerts:?}");
    assert!(dashboard.len() >= 20, "{dashboard:?}");
    for (file, used) in [("alerts.yml", &alerts), ("durabus.json", &dashboard)] {
        let unknown: Vec<&String> = used.iter().filter(|n| !names.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics no bus exposes: {unknown:?}"
        );
    }
}

#[test]
fn the_dashboard_is_json_with_a_query_in_every_panel() {
    let d: serde_json::Value = serde_json::from_str(DASHBOARD).unwrap();
    let panels = d["panels"].as_array().unwrap();
    let titles: Vec<&str> = panels
        .iter()
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    for want in [
        "Throughput",
        "Failure rate",
        "Latency",
        "Queue",
        "Dead letters",
        "breakers",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(want)),
            "no {want} panel in {titles:?}"
        );
    }
    for p in panels {
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        for t in targets {
            assert!(
                t["expr"].as_str().unwrap().contains("durabus_"),
                "{}",
                p["title"]
            );
        }
    }
}

#[test]
fn the_name_scanner_finds_names_and_skips_anchors() {
    let found = referenced("rate(durabus_a_total[5m]) docs/X.md#durabusx durabus_b{job=\"x\"}");
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        vec!["durabus_a_total".to_owned(), "durabus_b".to_owned()]
    );
}

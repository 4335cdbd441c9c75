//! Prometheus metrics, read back through a real exposition parser: counters after a scripted
//! run (successes, retries, dead letters, a timeout, a panic), the documented buckets, the
//! store gauges (cached, then refreshed), dead-letter actions and replays counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::telemetry::LATENCY_BUCKETS;
use durabus::{
    Actor, ActorKind, Event, EventStatus, ReplayHooks, ReplayRequest, ReplaySelection,
    RetryOverride, RunOptions, SubscribeOptions,
};
use prometheus_parse::{Scrape, Value};

use crate::support::*;

/// Parses an exposition; every line must be understood.
pub fn parse(text: &str) -> Scrape {
    assert!(text.ends_with("# EOF\n"), "{text}");
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap()
}

/// The value of the sample `name` whose labels include `labels`.
pub fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a number: {other:?}"),
        })
}

pub fn num(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    value(s, name, labels).unwrap_or_else(|| panic!("no {name} {labels:?}"))
}

pub async fn scrape(bus: &durabus::EventBus) -> Scrape {
    parse(&bus.metrics_text().await.unwrap())
}

pub async fn counters_follow_a_scripted_run(h: &Harness) {
    let bus = h
        .builder()
        .await
        .breaker(breaker_never_trips())
        .build()
        .await
        .unwrap();
    let flaky_calls = Arc::new(AtomicU32::new(0));
    let fc = flaky_calls.clone();
    bus.subscribe(
        "m.*",
        move |e: Event| {
            let fc = fc.clone();
            async move {
                match e.event_type.as_str() {
                    "m.flaky" if fc.fetch_add(1, Ordering::SeqCst) == 0 => Err("once".into()),
                    "m.dead" => Err("always".into()),
                    "m.panic" => panic!("boom"),
                    "m.slow" => {
                        std::future::pending::<()>().await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        },
        SubscribeOptions::default()
            .name("orders")
            .timeout(Duration::from_millis(5))
            .retry(RetryOverride::default().max_retries(1)),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let mut ids = Vec::new();
    for t in ["m.ok", "m.ok", "m.flaky", "m.dead", "m.panic", "m.slow"] {
        ids.push((t, bus.publish(t, &1).await.unwrap()));
    }
    h.advance(Duration::from_secs(2));
    for (t, id) in &ids {
        let status = match *t {
            "m.ok" | "m.flaky" => EventStatus::Done,
            _ => EventStatus::Dlq,
        };
        wait_status(&bus, *id, status).await;
    }
    let s = eventually("every outcome counted", || {
        let bus = bus.clone();
        async move {
            let s = scrape(&bus).await;
            let done = value(&s, "durabus_events_delivered_total", &[("type", "m.ok")]);
            let dead = value(
                &s,
                "durabus_events_dead_lettered_total",
                &[("type", "m.slow")],
            );
            (done == Some(2.0) && dead == Some(1.0)).then_some(s)
        }
    })
    .await;
    let published = |t| num(&s, "durabus_events_published_total", &[("type", t)]);
    assert_eq!((published("m.ok"), published("m.slow")), (2.0, 1.0));
    assert_eq!(
        num(&s, "durabus_events_delivered_total", &[("type", "m.flaky")]),
        1.0
    );
    for t in ["m.flaky", "m.dead", "m.panic", "m.slow"] {
        assert_eq!(
            num(&s, "durabus_events_retried_total", &[("type", t)]),
            1.0,
            "{t}"
        );
    }
    for t in ["m.dead", "m.panic", "m.slow"] {
        assert_eq!(
            num(&s, "durabus_events_dead_lettered_total", &[("type", t)]),
            1.0
        );
    }
    // A type's counters start at zero (not absent) once the type is seen.
    assert_eq!(
        value(
            &s,
            "durabus_events_dead_lettered_total",
            &[("type", "m.ok")]
        ),
        Some(0.0),
    );
    let runs = |r| {
        num(
            &s,
            "durabus_handler_runs_total",
            &[("subscription", "orders"), ("result", r)],
        )
    };
    // ok: 2 m.ok + the flaky retry; error: flaky once, dead twice; a timeout and a panic twice.
    assert_eq!(
        (runs("ok"), runs("error"), runs("timeout"), runs("panic")),
        (3.0, 3.0, 2.0, 2.0)
    );
    // Histograms with the documented buckets.
    let buckets = |name: &str, labels: &[(&str, &str)]| -> Vec<f64> {
        let sample = s
            .samples
            .iter()
            .find(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
            .unwrap_or_else(|| panic!("no histogram {name}"));
        let Value::Histogram(b) = &sample.value else {
            panic!("{name} is not a histogram")
        };
        b.iter().map(|c| c.less_than).collect()
    };
    let mut expected: Vec<f64> = LATENCY_BUCKETS.to_vec();
    expected.push(f64::INFINITY);
    assert_eq!(buckets("durabus_delivery_latency_seconds", &[]), expected);
    assert_eq!(
        buckets(
            "durabus_handler_duration_seconds",
            &[("subscription", "orders")]
        ),
        expected
    );
    // Every published event started once (first attempts only).
    assert_eq!(num(&s, "durabus_delivery_latency_seconds_count", &[]), 6.0);
    assert_eq!(
        num(
            &s,
            "durabus_handler_duration_seconds_count",
            &[("subscription", "orders")]
        ),
        10.0
    );
    assert_eq!(
        num(
            &s,
            "durabus_processing_seconds_count",
            &[("type", "m.flaky")]
        ),
        1.0
    );
    // The flaky event was done 2 s after its publish (the retry waited on the bus clock).
    assert!(num(&s, "durabus_processing_seconds_sum", &[("type", "m.flaky")]) >= 1.0);
    for op in ["insert", "claim", "record"] {
        assert!(
            num(
                &s,
                "durabus_db_query_duration_seconds_count",
                &[("operation", op)]
            ) >= 1.0,
            "{op}"
        );
    }
    // The breaker gauge and the process.
    assert_eq!(
        num(&s, "durabus_breaker_state", &[("subscription", "orders")]),
        0.0
    );
    assert!(num(&s, "durabus_process_resident_memory_bytes", &[]) > 0.0);
    assert!(num(&s, "durabus_process_open_fds", &[]) > 0.0);
    assert!(value(&s, "durabus_process_uptime_seconds", &[]).is_some());
    assert!(value(&s, "durabus_process_cpu_seconds_total", &[]).is_some());
    bus.shutdown().await.unwrap();
}

pub async fn gauges_come_from_the_store_and_are_cached(h: &Harness) {
    let bus = h.bus().await;
    // Three waiting, one dead letter (dead at once: no retries), whose `system.dead_letter`
    // and `system.failure_group.new` announcements wait too (the bus is not started).
    h.advance(Duration::from_secs(100));
    for i in 0..3u64 {
        bus.enqueue("g.wait", &i).await.unwrap();
    }
    bus.subscribe(
        "g.dead",
        |_e: Event| async { Err("no".into()) },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let dead = bus.publish("g.dead", &1).await.unwrap();
    assert_eq!(get(&bus, dead).await.status, EventStatus::Dlq);
    h.advance(Duration::from_secs(30));
    let s = scrape(&bus).await;
    assert_eq!(num(&s, "durabus_events", &[("status", "pending")]), 5.0);
    assert_eq!(num(&s, "durabus_events", &[("status", "processing")]), 0.0);
    assert_eq!(num(&s, "durabus_oldest_due_event_age_seconds", &[]), 30.0);
    assert_eq!(
        num(&s, "durabus_dead_letters", &[("status", "pending")]),
        1.0
    );
    assert_eq!(
        num(&s, "durabus_dead_letters", &[("status", "retrying")]),
        0.0
    );
    assert_eq!(
        num(&s, "durabus_oldest_pending_dead_letter_age_seconds", &[]),
        30.0
    );
    let sqlite = value(&s, "durabus_sqlite_wal_bytes", &[]);
    let pool = value(&s, "durabus_db_pool_connections", &[("state", "max")]);
    match bus.store().backend() {
        durabus::store::Backend::Sqlite(_) => {
            assert!(sqlite.is_some() && pool.is_none());
        }
        _ => {
            assert!(sqlite.is_none() && pool.unwrap() >= 1.0);
            assert_eq!(num(&s, "durabus_db_pool_waiters", &[]), 0.0);
            assert_eq!(num(&s, "durabus_live_workers", &[]), 0.0);
        }
    }
    // Cached: within the refresh interval a new event does not show; after it, it does.
    bus.enqueue("g.wait", &4).await.unwrap();
    h.advance(Duration::from_secs(14));
    let cached = scrape(&bus).await;
    assert_eq!(
        num(&cached, "durabus_events", &[("status", "pending")]),
        5.0
    );
    h.advance(Duration::from_secs(2));
    let fresh = scrape(&bus).await;
    assert_eq!(num(&fresh, "durabus_events", &[("status", "pending")]), 6.0);
    assert_eq!(
        num(&fresh, "durabus_oldest_due_event_age_seconds", &[]),
        46.0
    );
    // Retried: the dead letter is retrying until delivered.
    let ann = Actor::new("ann", ActorKind::Library);
    bus.dead_letters().retry(dead, &ann).await.unwrap();
    h.advance(Duration::from_secs(16));
    let s = scrape(&bus).await;
    assert_eq!(
        num(&s, "durabus_dead_letters", &[("status", "pending")]),
        0.0
    );
    assert_eq!(
        num(&s, "durabus_dead_letters", &[("status", "retrying")]),
        1.0
    );
    assert_eq!(
        num(&s, "durabus_oldest_pending_dead_letter_age_seconds", &[]),
        0.0
    );
    assert_eq!(
        num(
            &s,
            "durabus_dead_letter_actions_total",
            &[("action", "retry"), ("actor_kind", "library")]
        ),
        1.0
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_store_that_cannot_be_read_shows_down_and_the_counters_stay(h: &Harness) {
    let bus = h.bus().await;
    for i in 0..2u64 {
        bus.enqueue("u.wait", &i).await.unwrap();
    }
    h.advance(Duration::from_secs(3));
    let s = scrape(&bus).await;
    assert_eq!(num(&s, "durabus_store_up", &[]), 1.0);
    assert_eq!(num(&s, "durabus_events", &[("status", "pending")]), 2.0);
    assert_eq!(num(&s, "durabus_oldest_due_event_age_seconds", &[]), 3.0);
    // The store goes away: the next refresh cannot read it. The scrape still answers: the
    // store is down, its gauges keep their last values, the counters are all there.
    bus.store().close().await.unwrap();
    h.advance(Duration::from_secs(16));
    let down = parse(
        &bus.metrics_text()
            .await
            .expect("a store that cannot be read must not fail the scrape"),
    );
    assert_eq!(num(&down, "durabus_store_up", &[]), 0.0);
    assert_eq!(num(&down, "durabus_events", &[("status", "pending")]), 2.0);
    // Ages are as of the last read: they do not grow on what is no longer known (an age
    // alert must not fire on a guess while the store is down).
    assert_eq!(num(&down, "durabus_oldest_due_event_age_seconds", &[]), 3.0);
    assert_eq!(
        num(
            &down,
            "durabus_events_published_total",
            &[("type", "u.wait")]
        ),
        2.0
    );
    assert!(value(&down, "durabus_process_uptime_seconds", &[]).is_some());
    // Within the refresh interval the failure is cached, as a success would be.
    h.advance(Duration::from_secs(5));
    assert_eq!(num(&scrape(&bus).await, "durabus_store_up", &[]), 0.0);
    // Shutting down a bus whose store is gone may report that; it is not what is tested.
    let _ = bus.shutdown().await;
}

pub async fn replays_are_counted(h: &Harness) {
    let bus = h.bus().await;
    let from = bus.clock().now();
    for i in 0..3u64 {
        bus.enqueue("r.item", &i).await.unwrap();
    }
    let ann = Actor::new("ann", ActorKind::Library);
    let replays = bus.replays();
    let op = replays
        .submit(
            &ReplayRequest::new(ReplaySelection::range(from, None)),
            &ann,
        )
        .await
        .unwrap();
    replays
        .run(&op.id, &RunOptions::default(), &ReplayHooks::new(), |_| {})
        .await
        .unwrap();
    let s = scrape(&bus).await;
    assert_eq!(
        num(&s, "durabus_replay_events_total", &[("result", "replayed")]),
        3.0
    );
    assert_eq!(
        num(&s, "durabus_replays_total", &[("status", "completed")]),
        1.0
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_bad_prefix_is_refused_and_a_good_one_is_used(h: &Harness) {
    let bad = h
        .builder()
        .await
        .config(durabus::BusConfig {
            metrics: durabus::MetricsConfig {
                prefix: "9bad-prefix".into(),
                ..durabus::MetricsConfig::default()
            },
            ..durabus::BusConfig::default()
        })
        .build()
        .await;
    assert_eq!(
        bad.err().map(|e| e.kind()),
        Some(durabus::ErrorKind::InvalidInput)
    );
    let bus = h
        .builder()
        .await
        .config(durabus::BusConfig {
            metrics: durabus::MetricsConfig {
                prefix: "shop_bus_".into(),
                ..durabus::MetricsConfig::default()
            },
            ..durabus::BusConfig::default()
        })
        .build()
        .await
        .unwrap();
    bus.enqueue("p.one", &1).await.unwrap();
    let s = scrape(&bus).await;
    assert_eq!(
        num(&s, "shop_bus_events_published_total", &[("type", "p.one")]),
        1.0
    );
    assert!(s.samples.iter().all(|x| x.metric.starts_with("shop_bus_")));
    bus.shutdown().await.unwrap();
}

/// The error hook hears handler failures only when the application asks: each failed attempt
/// with the event, type, subscription and attempt, `retrying` until the event is dead-lettered.
pub async fn handler_failures_reach_the_error_hook_when_asked(h: &Harness) {
    type Heard = (String, durabus::ErrorKind, bool, String);
    let heard: Arc<std::sync::Mutex<Vec<Heard>>> = Arc::default();
    let failing = |bus: durabus::EventBus| async move {
        bus.subscribe(
            "hook.*",
            |_e: Event| async { Err("ledger refused".into()) },
            SubscribeOptions::default()
                .name("ledger")
                .retry(RetryOverride::default().max_retries(1)),
        )
        .await
        .unwrap();
        bus
    };
    for asked in [false, true] {
        heard.lock().unwrap().clear();
        let seen = heard.clone();
        let bus = h
            .builder()
            .await
            .breaker(breaker_never_trips())
            .on_error(move |e| {
                seen.lock().unwrap().push((
                    e.source.to_string(),
                    e.kind(),
                    e.retrying,
                    e.error.to_string(),
                ))
            })
            .report_handler_failures(asked)
            .build()
            .await
            .unwrap();
        let bus = failing(bus).await;
        let id = bus.publish("hook.charge", &1).await.unwrap();
        let first = get(&bus, id).await;
        assert_eq!(first.retry_count, 1);
        h.clock.set(first.next_attempt_at.unwrap());
        bus.start().await.unwrap();
        wait_status(&bus, id, EventStatus::Dlq).await;
        bus.shutdown().await.unwrap();
        let heard = heard.lock().unwrap().clone();
        let handlers: Vec<&Heard> = heard
            .iter()
            .filter(|(_, kind, ..)| *kind == durabus::ErrorKind::Handler)
            .collect();
        if !asked {
            assert!(handlers.is_empty(), "not asked: {heard:?}");
            continue;
        }
        assert_eq!(handlers.len(), 2, "{heard:?}");
        for (i, (source, _, retrying, error)) in handlers.iter().enumerate() {
            assert!(
                source.contains(&format!("event {id} (attempt {})", i + 1)),
                "{source}"
            );
            assert!(source.contains("hook.charge"), "{source}");
            assert!(error.contains("ledger refused"), "{error}");
            assert_eq!(*retrying, i == 0, "the second attempt dead-letters");
        }
    }
}

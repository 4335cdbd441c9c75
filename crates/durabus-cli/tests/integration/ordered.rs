//! Ordering keys across processes: three `bench-worker` processes on one PostgreSQL schema,
//! 100 keys × 100 events, handlers failing at random (retried). A checker reads every handler
//! call the workers reported and asserts that, per key, the calls happened in publish order and
//! never two at once. The same checker, given a run of the same events without ordering keys,
//! finds the violations: it can fail.

use std::collections::HashMap;

use durabus::{EventBus, NewEvent, PgOptions};

use crate::workers::{
    Worker, admin, count, drop_schema, pg_url, prepare, schema, start_workers, stop, wait_done,
};

const KEYS: u64 = 100;
const PER_KEY: u64 = 100;

/// One handler call as a worker reported it.
#[derive(Debug, Clone)]
struct Call {
    start: u64,
    end: u64,
    n: u64,
    ok: bool,
}

/// Every call of a keyed payload, per key.
fn calls_by_key(workers: &[Worker]) -> HashMap<String, Vec<Call>> {
    let mut by_key: HashMap<String, Vec<Call>> = HashMap::new();
    for w in workers {
        for line in std::fs::read_to_string(&w.report)
            .unwrap_or_default()
            .lines()
        {
            let f: Vec<&str> = line.split(' ').collect();
            let [_, _, start, end, key, n, outcome] = f[..] else {
                panic!("a report line of another shape: {line}");
            };
            if key == "-" {
                continue;
            }
            by_key.entry(key.to_owned()).or_default().push(Call {
                start: start.parse().unwrap(),
                end: end.parse().unwrap(),
                n: n.parse().unwrap(),
                ok: outcome == "ok",
            });
        }
    }
    by_key
}

/// Per key: no two calls overlap, and the calls, by start, handle 0, 1, 2, … in order (a
/// failed call of n is followed by n again until it succeeds, then n + 1). Returns the first
/// violation found.
fn check(by_key: &HashMap<String, Vec<Call>>, per_key: u64) -> Result<(), String> {
    for (key, calls) in by_key {
        let mut calls = calls.clone();
        calls.sort_by_key(|c| (c.start, c.end));
        let mut next = 0;
        for (i, c) in calls.iter().enumerate() {
            if i > 0 && c.start < calls[i - 1].end {
                return Err(format!(
                    "key {key}: calls of {} and {} overlapped",
                    calls[i - 1].n,
                    c.n
                ));
            }
            if c.n != next {
                return Err(format!(
                    "key {key}: {} was handled when {next} was due",
                    c.n
                ));
            }
            if c.ok {
                next += 1;
            }
        }
        if next != per_key {
            return Err(format!("key {key}: {next} of {per_key} events handled"));
        }
    }
    Ok(())
}

/// Publishes `KEYS` × `PER_KEY` events, in rounds of one event per key (so a key's events
/// are interleaved with every other key's), with ordering keys or without.
async fn publish_keyed(schema: &str, ordered: bool) {
    let bus = EventBus::builder()
        .postgres_with(
            pg_url(),
            PgOptions {
                schema: schema.to_owned(),
                ..PgOptions::default()
            },
        )
        .build()
        .await
        .unwrap();
    for n in 0..PER_KEY {
        let events: Vec<NewEvent> = (0..KEYS)
            .map(|k| {
                let key = format!("k{k}");
                let e = NewEvent::new("bench.ordered", &serde_json::json!({"key": key, "n": n}))
                    .unwrap();
                if ordered { e.ordering_key(key) } else { e }
            })
            .collect();
        bus.enqueue_batch(events).await.unwrap();
    }
    bus.shutdown().await.unwrap();
}

async fn run(ordered: bool) -> Option<HashMap<String, Vec<Call>>> {
    let pool = admin().await?;
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    prepare(&schema).await;
    let args = [
        "--fail-percent",
        "10",
        "--retry-ms",
        "2",
        "--max-retries",
        "1000",
        "--concurrency",
        "8",
    ];
    let mut workers = start_workers(&schema, dir.path(), 3, &args);
    publish_keyed(&schema, ordered).await;
    let total = i64::try_from(KEYS * PER_KEY).unwrap();
    wait_done(&pool, &schema, total).await;
    stop(&mut workers);
    let live = count(&pool, &format!("SELECT count(*) FROM \"{schema}\".events")).await;
    assert_eq!(live, 0, "every event done");
    drop_schema(&pool, &schema).await;
    Some(calls_by_key(&workers))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_handle_each_key_in_publish_order_one_at_a_time() {
    let Some(calls) = run(true).await else { return };
    assert_eq!(calls.len(), usize::try_from(KEYS).unwrap());
    let failures = calls.values().flatten().filter(|c| !c.ok).count();
    assert!(failures > 0, "handlers failed at random, and were retried");
    check(&calls, PER_KEY).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checker_fails_a_run_without_ordering_keys() {
    let Some(calls) = run(false).await else {
        return;
    };
    let found = check(&calls, PER_KEY);
    assert!(
        found.is_err(),
        "three processes, eight slots each, no keys: order cannot hold"
    );
}

#[test]
fn the_checker_catches_a_swap_and_an_overlap() {
    let call = |start, end, n, ok| Call { start, end, n, ok };
    let good = vec![
        call(0, 10, 0, false),
        call(11, 20, 0, true),
        call(21, 30, 1, true),
    ];
    let by = |calls: Vec<Call>| HashMap::from([("k".to_owned(), calls)]);
    assert_eq!(check(&by(good), 2), Ok(()));
    let swapped = vec![call(0, 10, 1, true), call(11, 20, 0, true)];
    assert!(check(&by(swapped), 2).is_err());
    let overlapping = vec![call(0, 10, 0, true), call(5, 20, 1, true)];
    assert!(check(&by(overlapping), 2).is_err());
}

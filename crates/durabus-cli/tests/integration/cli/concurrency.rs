//! Concurrency limits from the command line and across `durabus worker` processes on
//! PostgreSQL: at most N runs of a subscription at once, and at most M of each tenant.

use std::path::Path;
use std::time::Duration;

use super::pauses::{eventually, one_line_failure, run, workers};
use super::{json, stderr, stdout};

#[test]
fn concurrency_limits_are_set_listed_and_removed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = ["--db", "c.db"];
    let first = run(
        dir,
        &db,
        &["worker", "--handler", "api.*=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let set = json(&run(
        dir,
        &db,
        &[
            "--json",
            "concurrency-limit",
            "set",
            "api.*",
            "--max",
            "8",
            "--per-process",
            "2",
        ],
    ));
    assert_eq!(
        (set["max_in_flight"].as_u64(), set["per_process"].as_u64()),
        (Some(8), Some(2))
    );
    let listed = stdout(&run(dir, &db, &["concurrency-limit", "list"]));
    assert!(listed.contains("api.*") && listed.contains('8'), "{listed}");
    one_line_failure(
        &run(
            dir,
            &db,
            &["concurrency-limit", "set", "api.*", "--max", "0"],
        ),
        "max_in_flight",
    );
    one_line_failure(
        &run(
            dir,
            &db,
            &["concurrency-limit", "set", "nobody", "--max", "1"],
        ),
        "not found",
    );
    let removed = run(dir, &db, &["concurrency-limit", "remove", "api.*"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    one_line_failure(
        &run(dir, &db, &["concurrency-limit", "remove", "api.*"]),
        "not found",
    );
    // A limit per tenant: set, shown, refused when half given or malformed.
    let set = json(&run(
        dir,
        &db,
        &[
            "--json",
            "concurrency-limit",
            "set",
            "api.*",
            "--max",
            "50",
            "--partition-by",
            "metadata.tenant",
            "--per-partition",
            "2",
        ],
    ));
    assert_eq!(
        set["partition"],
        serde_json::json!({"by": "metadata.tenant", "max_in_flight": 2})
    );
    let listed = stdout(&run(dir, &db, &["concurrency-limit", "list"]));
    assert!(listed.contains("2 by metadata.tenant"), "{listed}");
    for (args, needle) in [
        (
            &["--partition-by", "metadata.tenant"][..],
            "--per-partition",
        ),
        (&["--per-partition", "2"][..], "--partition-by"),
        (
            &["--partition-by", "tenant", "--per-partition", "2"][..],
            "partition_by",
        ),
        (
            &["--partition-by", "ordering_key", "--per-partition", "0"][..],
            "per_partition",
        ),
    ] {
        let mut all = vec!["concurrency-limit", "set", "api.*", "--max", "5"];
        all.extend_from_slice(args);
        let o = run(dir, &db, &all);
        assert!(!o.status.success(), "{args:?}: {}", stdout(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    let listed = json(&run(dir, &db, &["--json", "concurrency-limit", "list"]));
    assert_eq!(listed[0]["max_in_flight"], 50, "unchanged: {listed}");
}

/// A fresh schema on the test server, with subscription `job` made by a first worker run,
/// and a directory for the workers' records; the schema is dropped at the end.
struct Pg {
    rt: tokio::runtime::Runtime,
    pool: durabus::sqlx::PgPool,
    dir: tempfile::TempDir,
    url: String,
    schema: String,
}

impl Pg {
    /// `None` when the server is not there (a skip outside CI).
    fn new() -> Option<Pg> {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let pool = rt.block_on(crate::workers::admin())?;
        let pg = Pg {
            rt,
            pool,
            dir: tempfile::tempdir().unwrap(),
            url: crate::workers::pg_url(),
            schema: crate::workers::schema(),
        };
        let db = ["--db", pg.url.as_str(), "--schema", pg.schema.as_str()];
        let first = run(
            pg.dir.path(),
            &db,
            &["worker", "--handler", "job=true", "--exit-when-idle"],
        );
        assert!(first.status.success(), "{}", stderr(&first));
        Some(pg)
    }
}

impl Pg {
    /// Publishes `events` in one batch, as an application would.
    fn publish(&self, events: Vec<durabus::NewEvent>) {
        self.rt.block_on(async {
            let bus = durabus::EventBus::builder()
                .postgres_with(
                    self.url.clone(),
                    durabus::PgOptions {
                        schema: self.schema.clone(),
                        ..durabus::PgOptions::default()
                    },
                )
                .build()
                .await
                .unwrap();
            bus.enqueue_batch(events).await.unwrap();
            bus.shutdown().await.unwrap();
        });
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        self.rt
            .block_on(crate::workers::drop_schema(&self.pool, &self.schema));
    }
}

/// The handler runs recorded in `spans.txt` as (start, end) in ns.
fn spans(dir: &Path) -> Vec<(u128, u128)> {
    std::fs::read_to_string(dir.join("spans.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (s, e) = l.split_once(' ')?;
            Some((s.parse().ok()?, e.parse().ok()?))
        })
        .collect()
}

/// The most runs in flight at one moment.
fn most_overlapping(spans: &[(u128, u128)]) -> usize {
    let mut edges: Vec<(u128, i32)> = spans
        .iter()
        .flat_map(|(s, e)| [(*s, 1), (*e, -1)])
        .collect();
    // An end before a start at the same instant: touching runs do not overlap.
    edges.sort_unstable_by_key(|(t, d)| (*t, *d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

#[test]
fn the_overlap_checker_counts_runs_in_flight() {
    assert_eq!(most_overlapping(&[(0, 10), (5, 15), (10, 20)]), 2);
    assert_eq!(most_overlapping(&[(0, 10), (1, 9), (2, 8)]), 3);
    assert_eq!(most_overlapping(&[]), 0);
}

#[test]
fn three_worker_processes_hold_a_concurrency_limit_on_postgres() {
    let Some(pg) = Pg::new() else {
        return;
    };
    let (dir, url, schema) = (pg.dir.path(), &pg.url, &pg.schema);
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    let set = run(dir, &db, &["concurrency-limit", "set", "job", "--max", "2"]);
    assert!(set.status.success(), "{}", stderr(&set));
    let workers = workers(
        dir,
        &db,
        r#"job=s=$(date +%s%N); sleep 0.05; echo "$s $(date +%s%N)" >> spans.txt"#,
        3,
    );
    // A backlog at once, as an application's batch publishes it.
    let publish = |n: usize| {
        pg.publish(
            (0..n)
                .map(|i| durabus::NewEvent::new("job", &i).unwrap())
                .collect(),
        );
    };
    publish(30);
    eventually("30 runs", || spans(dir).len() >= 30);
    let limited = most_overlapping(&spans(dir));
    // The checker can fail: without the limit, the same load overlaps more than 2.
    let removed = run(dir, &db, &["concurrency-limit", "remove", "job"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    std::thread::sleep(Duration::from_millis(1200));
    std::fs::remove_file(dir.join("spans.txt")).unwrap();
    publish(30);
    eventually("30 more runs", || spans(dir).len() >= 30);
    let unlimited = most_overlapping(&spans(dir));
    eprintln!("concurrency limit 2: at most {limited} at once; without it: {unlimited}");
    assert!(limited <= 2, "{limited} runs at once under a limit of 2");
    assert!(
        unlimited > 2,
        "the checker never saw more than 2 without the limit: {unlimited}"
    );
    drop(workers);
}

/// The handler runs recorded in `tenants.txt` as tenant → (start, end) in ns.
fn tenant_spans(dir: &Path) -> std::collections::HashMap<String, Vec<(u128, u128)>> {
    let mut out: std::collections::HashMap<String, Vec<(u128, u128)>> = Default::default();
    for l in std::fs::read_to_string(dir.join("tenants.txt"))
        .unwrap_or_default()
        .lines()
    {
        let mut parts = l.split(' ');
        if let (Some(t), Some(s), Some(e)) = (parts.next(), parts.next(), parts.next())
            && let (Ok(s), Ok(e)) = (s.parse(), e.parse())
        {
            out.entry(t.to_owned()).or_default().push((s, e));
        }
    }
    out
}

#[test]
fn three_worker_processes_hold_a_limit_per_tenant_on_postgres() {
    let Some(pg) = Pg::new() else {
        return;
    };
    let (dir, url, schema) = (pg.dir.path(), &pg.url, &pg.schema);
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    let set = run(
        dir,
        &db,
        &[
            "concurrency-limit",
            "set",
            "job",
            "--max",
            "100",
            "--partition-by",
            "metadata.tenant",
            "--per-partition",
            "2",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    let workers = workers(
        dir,
        &db,
        r#"job=t=$(tr -d '"'); s=$(date +%s%N); sleep 0.05; echo "$t $s $(date +%s%N)" >> tenants.txt"#,
        3,
    );
    // Three tenants' events at once, 12 each.
    pg.publish(
        (0..36)
            .map(|i| {
                let tenant = format!("t{}", i % 3);
                durabus::NewEvent::new("job", &tenant)
                    .unwrap()
                    .with_metadata("tenant", tenant)
            })
            .collect(),
    );
    eventually("36 runs", || {
        tenant_spans(dir).values().map(Vec::len).sum::<usize>() >= 36
    });
    let by_tenant = tenant_spans(dir);
    let all: Vec<(u128, u128)> = by_tenant.values().flatten().copied().collect();
    let each: Vec<(String, usize)> = by_tenant
        .iter()
        .map(|(t, s)| (t.clone(), most_overlapping(s)))
        .collect();
    let together = most_overlapping(&all);
    eprintln!("limit 2 per tenant: at most {each:?} at once; all tenants together: {together}");
    assert_eq!(by_tenant.len(), 3, "{by_tenant:?}");
    for (t, most) in &each {
        assert!(
            *most <= 2,
            "tenant {t}: {most} runs at once under a limit of 2"
        );
    }
    // The checker sees the tenants run beside each other: merged, it counts more than 2 (a
    // limit that held all tenants to 2 together, or a checker that cannot count, would not).
    assert!(
        together > 2,
        "all tenants together never ran more than 2 at once: {together}"
    );
    drop(workers);
}

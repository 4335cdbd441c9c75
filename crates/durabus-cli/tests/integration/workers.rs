//! Many worker processes on one PostgreSQL database: `durabus bench-worker` processes deliver,
//! this test publishes and checks every event was completed, with workers killed and
//! connections terminated mid-run. Each test has its own schema. Unreachable PostgreSQL:
//! skipped, or failed with CI=true.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use durabus::sqlx::{self, AssertSqlSafe, Row};
use durabus::{EventBus, NewEvent, PgOptions};

pub(crate) fn pg_url() -> String {
    std::env::var("DURABUS_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub(crate) async fn admin() -> Option<sqlx::PgPool> {
    let pool = tokio::time::timeout(
        Duration::from_secs(5),
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&pg_url()),
    )
    .await
    .ok()
    .and_then(Result::ok);
    if pool.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PostgreSQL at {} is unreachable and CI=true requires it",
            pg_url()
        );
        eprintln!("skipped: PostgreSQL at {} is unreachable", pg_url());
    }
    pool
}

pub(crate) fn schema() -> String {
    format!("w_{}", durabus::EventId::new().0.simple())
}

pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) report: PathBuf,
}

pub(crate) fn start_workers(
    schema: &str,
    dir: &std::path::Path,
    n: usize,
    extra: &[&str],
) -> Vec<Worker> {
    (0..n)
        .map(|k| {
            let report = dir.join(format!("w{k}.txt"));
            let mut child = Command::new(env!("CARGO_BIN_EXE_durabus"))
                .args([
                    "--db",
                    &pg_url(),
                    "--schema",
                    schema,
                    "bench-worker",
                    "--report",
                ])
                .arg(&report)
                .args(extra)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let mut line = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            assert_eq!(line.trim(), "ready");
            Worker { child, report }
        })
        .collect()
}

pub(crate) fn stop(workers: &mut [Worker]) {
    for w in workers.iter_mut() {
        drop(w.child.stdin.take());
    }
    for w in workers.iter_mut() {
        if w.child.try_wait().unwrap().is_none() {
            assert!(w.child.wait().unwrap().success());
        }
    }
}

/// Handler calls per event id, over every worker's report.
fn calls(workers: &[Worker]) -> HashMap<String, u32> {
    let mut calls = HashMap::new();
    for w in workers {
        for line in std::fs::read_to_string(&w.report)
            .unwrap_or_default()
            .lines()
        {
            let id = line.split(' ').next().unwrap().to_owned();
            *calls.entry(id).or_default() += 1;
        }
    }
    calls
}

pub(crate) async fn count(pool: &sqlx::PgPool, sql: &str) -> i64 {
    sqlx::query(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
        .try_get(0)
        .unwrap()
}

/// How long the workers may go without finishing a single event before a test calls them
/// stuck. The tests assert progress, not a pace: on a loaded machine a run may take minutes.
const STALL: Duration = Duration::from_secs(60);

/// Waits until `n` events are done; fails if none finishes for [`STALL`].
pub(crate) async fn wait_done(pool: &sqlx::PgPool, schema: &str, n: i64) {
    let (mut last, mut since) = (-1, Instant::now());
    loop {
        let done = count(
            pool,
            &format!("SELECT count(*) FROM \"{schema}\".event_log WHERE status = 'done'"),
        )
        .await;
        if done >= n {
            return;
        }
        if done > last {
            (last, since) = (done, Instant::now());
        }
        assert!(
            since.elapsed() < STALL,
            "stuck: {done} of {n} events done, none for {STALL:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn publish(schema: &str, n: u64) -> Vec<durabus::EventId> {
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
    let mut ids = Vec::new();
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let events: Vec<_> = chunk
            .iter()
            .map(|i| NewEvent::new("bench.work", &i).unwrap())
            .collect();
        ids.extend(bus.enqueue_batch(events).await.unwrap());
    }
    bus.shutdown().await.unwrap();
    ids
}

pub(crate) async fn drop_schema(pool: &sqlx::PgPool, schema: &str) {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// Creates the schema before workers start (they would race to create it otherwise; that
/// race is safe too, but the test is about delivery).
pub(crate) async fn prepare(schema: &str) {
    publish(schema, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_worker_processes_complete_every_event_exactly_once() {
    let Some(pool) = admin().await else { return };
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    prepare(&schema).await;
    let mut workers = start_workers(&schema, dir.path(), 4, &[]);
    let ids = publish(&schema, 20_000).await;
    wait_done(&pool, &schema, 20_000).await;
    stop(&mut workers);
    let calls = calls(&workers);
    assert_eq!(calls.len(), 20_000, "every event handled");
    for id in &ids {
        assert_eq!(calls.get(&id.to_string()), Some(&1), "event {id}");
    }
    let busy = workers
        .iter()
        .filter(|w| std::fs::metadata(&w.report).map(|m| m.len()).unwrap_or(0) > 0)
        .count();
    assert!(
        busy >= 2,
        "the work was shared ({busy} workers handled events)"
    );
    let live = count(&pool, &format!("SELECT count(*) FROM \"{schema}\".events")).await;
    assert_eq!(live, 0, "nothing left in the live table");
    drop_schema(&pool, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_events_are_reclaimed_after_its_lease() {
    let Some(pool) = admin().await else { return };
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    prepare(&schema).await;
    let args = ["--lease-ms", "1000", "--handler-ms", "5", "--sync-report"];
    let mut workers = start_workers(&schema, dir.path(), 3, &args);
    let ids = publish(&schema, 3_000).await;
    wait_done(&pool, &schema, 300).await;
    // SIGKILL: no shutdown, no release; its claimed events keep its lease until it expires.
    workers[0].child.kill().unwrap();
    workers[0].child.wait().unwrap();
    wait_done(&pool, &schema, 3_000).await;
    stop(&mut workers[1..]);
    let calls = calls(&workers);
    for id in &ids {
        assert!(
            calls.contains_key(&id.to_string()),
            "event {id} never handled"
        );
    }
    let reclaimed = count(
        &pool,
        &format!(
            "SELECT count(*) FROM \"{schema}\".event_log
             WHERE retry_count >= 1 AND attempts >= 2 AND last_error LIKE '%interrupted%'"
        ),
    )
    .await;
    assert!(
        reclaimed >= 1,
        "the killed worker held events that were reclaimed"
    );
    let live = count(&pool, &format!("SELECT count(*) FROM \"{schema}\".events")).await;
    assert_eq!(live, 0);
    drop_schema(&pool, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_carry_on_when_their_connections_are_terminated() {
    let Some(pool) = admin().await else { return };
    let schema = schema();
    let dir = tempfile::tempdir().unwrap();
    prepare(&schema).await;
    let args = ["--lease-ms", "2000", "--handler-ms", "1"];
    let mut workers = start_workers(&schema, dir.path(), 2, &args);
    let ids = publish(&schema, 4_000).await;
    wait_done(&pool, &schema, 500).await;
    for _ in 0..3 {
        let killed = count(
            &pool,
            &format!(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE application_name LIKE 'durabus {schema} %'"
            ),
        )
        .await;
        assert!(killed >= 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_done(&pool, &schema, 4_000).await;
    stop(&mut workers);
    let calls = calls(&workers);
    for id in &ids {
        assert!(
            calls.contains_key(&id.to_string()),
            "event {id} never handled"
        );
    }
    let live = count(&pool, &format!("SELECT count(*) FROM \"{schema}\".events")).await;
    assert_eq!(live, 0);
    drop_schema(&pool, &schema).await;
}

fn cli(schema: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_durabus"))
        .args(["--db", &pg_url(), "--schema", schema])
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cli_command_works_on_postgres() {
    let Some(pool) = admin().await else { return };
    let schema = schema();
    // Inspection never creates the schema.
    let missing = cli(&schema, &["dlq", "list"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no durabus tables"));
    let demo = json(&cli(&schema, &["demo", "--json"]));
    assert_eq!(demo["dead_lettered"], 1);
    let dead = json(&cli(&schema, &["dlq", "list", "--json"]));
    let id = dead["items"][0]["event_id"].as_str().unwrap().to_owned();
    assert_eq!(dead["items"][0]["status"], "pending");
    let groups = json(&cli(&schema, &["dlq", "groups", "--json"]));
    assert_eq!(groups[0]["count"], 1);
    let shown = json(&cli(&schema, &["dlq", "show", &id, "--json"]));
    assert_eq!(
        shown["error_history"][0]["errors"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    let done = json(&cli(
        &schema,
        &["events", "list", "--status", "done", "--json"],
    ));
    // Eleven of the demo's events (its reminder and shipment steps among them), the
    // `system.dead_letter` announcement and the `system.failure_group.new` one (its failure
    // was a first).
    assert_eq!(done.as_array().unwrap().len(), 13);
    let stats = json(&cli(&schema, &["stats", "--fresh", "--json"]));
    assert_eq!(stats["total"], 14);
    let preview = json(&cli(
        &schema,
        &["dlq", "retry", "--type", "order.*", "--preview", "--json"],
    ));
    assert_eq!(preview["count"], 1);
    let retried = json(&cli(&schema, &["dlq", "retry", &id, "--json"]));
    assert_eq!(retried["dead_letter"]["status"], "retrying");
    let purged = json(&cli(
        &schema,
        &["events", "purge", "--older-than", "0", "--json"],
    ));
    assert_eq!(purged["purged"], 13);
    let pending = json(&cli(&schema, &["events", "list", "--json"]));
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["status"], "pending");
    // The retried event is still pending (no worker ran): purge it as a dead letter later.
    let none = json(&cli(
        &schema,
        &["dlq", "purge", "--older-than", "0", "--json"],
    ));
    assert_eq!(none["purged"], 0);
    let ops = json(&cli(&schema, &["operations", "list", "--json"]));
    assert!(ops.as_array().unwrap().is_empty());
    let jobs = json(&cli(&schema, &["jobs", "run", "cleanup-history", "--json"]));
    assert_eq!(jobs["status"], "ok");
    // Replay what is left (the retried order.paid, pending): preview, dry run, the replay.
    let select = ["replay", "start", "--all", "--type", "order.*"];
    fn with<'a>(select: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        select.iter().chain(extra).copied().collect()
    }
    let preview = json(&cli(&schema, &with(&select, &["--preview", "--json"])));
    assert_eq!(preview["count"], 1);
    let dry = json(&cli(&schema, &with(&select, &["--dry-run", "--json"])));
    assert_eq!(dry["by_type"]["order.paid"], 1);
    let replayed = json(&cli(&schema, &with(&select, &["--yes", "--json"])));
    assert_eq!(
        (replayed["status"].as_str(), replayed["processed"].as_u64()),
        (Some("completed"), Some(1))
    );
    let id = replayed["id"].as_str().unwrap();
    assert_eq!(
        json(&cli(&schema, &["replay", "status", id, "--json"]))["status"],
        "completed"
    );
    assert_eq!(
        json(&cli(&schema, &["replay", "list", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let pending = json(&cli(
        &schema,
        &["events", "list", "--type", "order.paid", "--json"],
    ));
    assert_eq!(
        pending.as_array().unwrap().len(),
        2,
        "the original and its replay"
    );
    drop_schema(&pool, &schema).await;
}

//! `durabus bench --db postgres://… --workers N`: publish figures from this process, and end to
//! end through N worker processes (`durabus bench-worker`) sharing one database, with a count
//! of double completions and lost events, and the publish-to-handler latency across processes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::sqlx::postgres::PgPool;
use durabus::sqlx::{self, AssertSqlSafe};
use durabus::{EventBus, NewEvent};
use serde::Serialize;

use super::harness::{batches, enqueue_concurrently, event, median, percentile};
use super::pg_workers::{
    EndToEnd, drop_schema, fresh, publisher_and_workers, tally, wait_completed,
};
use crate::cmd::Db;
use crate::cmd::bench_worker::now_us;

/// Every figure of the PostgreSQL run, as printed with `--json`.
#[derive(Debug, Default, Serialize)]
pub struct PgReport {
    pub durability: &'static str,
    pub workers: usize,
    pub events: u64,
    pub publish_seq_eps: f64,
    /// Raw one-row commits (plain `INSERT`s into a copy of the events table, one caller),
    /// interleaved with the one-caller publishes in chunks of 100: the limit of
    /// `publish_seq_eps` measured in the same seconds, so the disk's drift cannot come between.
    pub publish_seq_raw_eps: f64,
    pub publish_concurrent_eps: f64,
    pub publish_batch_eps: f64,
    /// The `unnest` + id table insert of the same rows (into copies of the events and id
    /// tables), interleaved with the library's batches ten at a time: the limit of
    /// `publish_batch_eps` measured in the same seconds.
    pub publish_batch_limit_eps: f64,
    /// The median over runs of each run's `publish_batch_eps` / `publish_batch_limit_eps`.
    pub publish_batch_ratio: f64,
    pub e2e_eps: f64,
    /// Handler calls beyond the first for one event, over every run (must be 0).
    pub double_completions: u64,
    /// Published events never handled (must be 0).
    pub lost_events: u64,
    /// Samples behind the two latency figures (publish in this process → handler start in a
    /// worker process; one event every 2 ms on a fresh schema).
    pub notify_latency_samples: u64,
    pub notify_latency_p50_us: f64,
    pub notify_latency_p99_us: f64,
    /// Events scheduled 50 ms ahead in this process, one every 5 ms: the handler's start in a
    /// worker process after the due time (ms).
    pub scheduled_late_samples: u64,
    pub scheduled_late_p50_ms: f64,
    pub scheduled_late_p99_ms: f64,
    /// Events scheduled for next month in the schema of the comparison below.
    pub scheduled_rows: u64,
    /// Batches of 1,000 published from this process with no worker, on an empty schema and on
    /// one holding the scheduled events (medians, runs interleaved).
    pub scheduled_empty_publish_eps: f64,
    pub scheduled_full_publish_eps: f64,
    /// A bus in this process draining what was published, on the same two schemas.
    pub scheduled_empty_drain_eps: f64,
    pub scheduled_full_drain_eps: f64,
    /// End to end through the workers without ordering keys and with 1,000 keys (medians).
    pub ordering_unkeyed_e2e_eps: f64,
    pub ordering_keyed_e2e_eps: f64,
    /// End to end on one bus with and without a concurrency limit (the `flow` group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<super::flow::Figures>,
    /// Dead-letter records loaded for the listing figures (1M; `--quick`: 10k).
    pub dlq_records: u64,
    /// First page of records filtered by type and status.
    pub dlq_records_page_ms: f64,
    /// The failure groups.
    pub dlq_groups_ms: f64,
    /// The admin API on that queue: this many HTTP clients listing dead letters at once
    /// (first page, filtered page, deep page), the per-request p50 and p99 (ms), requests/s.
    pub api_list_clients: usize,
    pub api_list_p50_ms: f64,
    pub api_list_p99_ms: f64,
    pub api_list_rps: f64,
    /// The statistics on that database: one refresh, and `GET /api/v2/stats` from the kept
    /// snapshot.
    pub stats: super::api::StatsRead,
    /// Dead letters in the bulk retry (20k; `--quick`: 2k), made through the library.
    pub bulk_records: u64,
    /// Dead letters retried per second by a bulk operation while the callers publish.
    pub bulk_retry_eps: f64,
    /// The publishers' p99 during the bulk run, and before it (ms).
    pub bulk_publish_p99_ms: f64,
    pub bulk_baseline_p99_ms: f64,
    /// The raw limits of the same run (`limits` group): each figure above is also a ratio to
    /// its limit.
    pub limits: Option<super::pg_limits::Limits>,
    pub runs: usize,
    pub seconds: f64,
}

/// What the PostgreSQL run needs from the command line.
pub struct Plan {
    pub workers: usize,
    pub events: u64,
    pub concurrency: usize,
    /// Rows per chunk of the bulk retry, fixed; `None`: adapting.
    pub bulk_chunk: Option<usize>,
    pub runs: usize,
    pub quick: bool,
    pub verbose: bool,
    /// Only these groups (limits, publish, e2e, latency, schedule, ordering, flow, dlq (with
    /// the admin API figure), bulk); all if empty.
    pub only: Vec<String>,
}

impl Plan {
    fn wants(&self, group: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|g| g == group)
    }
}

fn say(plan: &Plan, what: &str) {
    if plan.verbose {
        eprintln!("  measuring {what} …");
    }
}

pub async fn run(db: &Db, plan: Plan) -> anyhow::Result<PgReport> {
    anyhow::ensure!(plan.workers >= 1, "--workers must be at least 1");
    let started = Instant::now();
    let scale = |full: u64, quick: u64| if plan.quick { quick } else { full };
    let mut r = PgReport {
        durability: "postgres",
        workers: plan.workers,
        events: if plan.quick {
            plan.events.min(10_000)
        } else {
            plan.events
        },
        runs: plan.runs,
        ..PgReport::default()
    };
    if plan.wants("limits") {
        say(
            &plan,
            "the raw limits: one-row commits, unnest and COPY inserts, claim + complete",
        );
        let target = fresh(db);
        let limits = super::pg_limits::measure(&target, plan.quick).await;
        drop_schema(&target).await?;
        r.limits = Some(limits?);
    }
    if plan.wants("publish") {
        say(&plan, "publish, one caller awaiting each commit");
        (r.publish_seq_eps, r.publish_seq_raw_eps) =
            one_caller_beside_raw(db, &plan, scale(5_000, 500)).await?;
        say(&plan, "publish, concurrent callers");
        let callers = plan.concurrency;
        r.publish_concurrent_eps = publish_runs(db, &plan, async |bus| {
            Ok(enqueue_concurrently(&bus, scale(50_000, 5_000), callers)
                .await?
                .1)
        })
        .await?;
        say(
            &plan,
            "publish, batches of 1,000, interleaved with the unnest + id table limit",
        );
        (
            r.publish_batch_eps,
            r.publish_batch_limit_eps,
            r.publish_batch_ratio,
        ) = batches_beside_limit(db, &plan, scale(200_000, 20_000)).await?;
    }

    if plan.wants("e2e") {
        let mut eps = Vec::new();
        for run in 0..plan.runs {
            say(
                &plan,
                &format!(
                    "end to end with {} worker processes (run {})",
                    plan.workers,
                    run + 1
                ),
            );
            let target = fresh(db);
            let outcome = end_to_end(&target, &plan).await;
            let cleanup = drop_schema(&target).await;
            let e = outcome?;
            cleanup?;
            eps.push(e.eps);
            r.double_completions += e.doubles;
            r.lost_events += e.lost;
        }
        r.e2e_eps = median(eps);
    }

    if plan.wants("latency") {
        say(
            &plan,
            "publish → handler start in a worker process, on a fresh schema",
        );
        let target = fresh(db);
        let outcome = latency(&target, &plan).await;
        let cleanup = drop_schema(&target).await;
        let e = outcome?;
        cleanup?;
        r.double_completions += e.doubles;
        r.lost_events += e.lost;
        let mut latencies = e.latencies_us;
        latencies.sort_by(|a, b| a.total_cmp(b));
        r.notify_latency_samples = latencies.len() as u64;
        r.notify_latency_p50_us = percentile(&latencies, 0.50);
        r.notify_latency_p99_us = percentile(&latencies, 0.99);
    }

    if plan.wants("schedule") {
        let f = super::pg_schedule::run(db, plan.workers, plan.quick, plan.runs, |what| {
            say(&plan, what)
        })
        .await?;
        r.double_completions += f.doubles;
        r.lost_events += f.lost;
        r.scheduled_late_samples = f.late_samples;
        r.scheduled_late_p50_ms = f.late_p50_ms;
        r.scheduled_late_p99_ms = f.late_p99_ms;
        r.scheduled_rows = f.rows;
        r.scheduled_empty_publish_eps = f.empty.publish_eps;
        r.scheduled_full_publish_eps = f.full.publish_eps;
        r.scheduled_empty_drain_eps = f.empty.drain_eps;
        r.scheduled_full_drain_eps = f.full.drain_eps;
    }

    if plan.wants("ordering") {
        let n = if plan.quick { 5_000 } else { 50_000 };
        let (f, checks) = super::ordering::pg_run(db, plan.workers, n, 1000, plan.runs, |what| {
            say(&plan, what)
        })
        .await?;
        r.double_completions += checks.doubles;
        r.lost_events += checks.lost;
        r.ordering_unkeyed_e2e_eps = f.unkeyed_e2e_eps;
        r.ordering_keyed_e2e_eps = f.keyed_e2e_eps;
    }

    if plan.wants("flow") {
        let n = scale(50_000, 5_000);
        r.flow = Some(super::flow::pg_run(db, n, plan.runs, |what| say(&plan, what)).await?);
    }

    if plan.wants("dlq") {
        say(
            &plan,
            "dead-letter listings and groups, then the admin API listing them",
        );
        r.dlq_records = scale(1_000_000, 10_000);
        let target = fresh(db);
        let listed = listings(&target, r.dlq_records, plan.runs.max(5)).await;
        drop_schema(&target).await?;
        let api;
        (r.dlq_records_page_ms, r.dlq_groups_ms, api, r.stats) = listed?;
        r.api_list_clients = api.clients;
        r.api_list_p50_ms = api.p50_ms;
        r.api_list_p99_ms = api.p99_ms;
        r.api_list_rps = api.rps;
    }
    if plan.wants("bulk") {
        say(&plan, "bulk retry of dead letters while callers publish");
        r.bulk_records = scale(20_000, 2_000);
        let target = fresh(db);
        let bus = target.builder().build().await?;
        let bulk =
            super::dlq::bulk_retry(&bus, r.bulk_records, plan.concurrency, plan.bulk_chunk).await;
        bus.shutdown().await?;
        drop_schema(&target).await?;
        let bulk = bulk?;
        r.bulk_retry_eps = bulk.retry_eps;
        r.bulk_publish_p99_ms = bulk.publish_p99_ms;
        r.bulk_baseline_p99_ms = bulk.baseline_p99_ms;
    }
    r.seconds = started.elapsed().as_secs_f64();
    Ok(r)
}

/// Loads `n` dead letters (events, records and their 100 groups) with set-based SQL (the
/// library's write path would take minutes for a million), then times the first page of a
/// type-and-status listing and the groups through the library (ms, medians of `runs`).
async fn listings(
    db: &Db,
    n: u64,
    runs: usize,
) -> anyhow::Result<(f64, f64, super::api::ApiLoad, super::api::StatsRead)> {
    let bus = db.builder().build().await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.target)
        .await?;
    let s = format!("\"{}\"", db.schema);
    let now = durabus::Timestamp::now().as_millis();
    let fingerprints: Vec<String> = (0..100)
        .map(|k| durabus::dlq::fingerprint::fingerprint(&format!("sub-{k}"), "benchmark failure"))
        .collect();
    sqlx::query(AssertSqlSafe(format!(
        "WITH ev AS (
             INSERT INTO {s}.events (id, type, payload, status, retry_count, last_error, created_at,
                 updated_at, dlq_at, dlq_count)
             SELECT gen_random_uuid(), 'bench.t' || (i % 10), to_json(i), 'dlq', 4,
                 '[\"benchmark failure\"]', $1 + i, $1 + i, $1 + i, 1
             FROM generate_series(1, $2::bigint) AS i
             RETURNING id, type, payload, created_at),
         ids AS (INSERT INTO {s}.event_ids (id) SELECT id FROM ev)
         INSERT INTO {s}.dead_letters (event_id, event_type, payload, subscription, last_error,
             error_history, fingerprint, attempts, status, created_at, updated_at)
         SELECT id, type, payload, 'sub-' || ((payload::text)::bigint % 100), 'benchmark failure',
             '[]', ($3::text[])[((payload::text)::bigint % 100) + 1], 4, 'pending', created_at, created_at
         FROM ev ORDER BY created_at"
    )))
    .bind(now)
    .bind(i64::try_from(n).unwrap_or(i64::MAX))
    .bind(&fingerprints)
    .execute(&pool)
    .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO {s}.dead_letter_groups (fingerprint, subscription, signature, sample_error,
             count, open, first_seen, last_seen, event_types)
         SELECT fingerprint, min(subscription), 'benchmark failure', 'benchmark failure', count(*),
             count(*), min(created_at), max(created_at), '[]'
         FROM {s}.dead_letters GROUP BY fingerprint;
         ANALYZE {s}.dead_letters"
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    let records = bus.dead_letters();
    let filter = durabus::DeadLetterFilter {
        event_type: Some("bench.t3".into()),
        status: vec![durabus::DeadLetterStatus::Pending],
        ..durabus::DeadLetterFilter::default()
    };
    let mut page = Vec::new();
    let mut groups = Vec::new();
    for run in 0..=runs {
        let start = Instant::now();
        let got = records
            .list(filter.clone(), durabus::Keyset::default())
            .await?;
        let t1 = start.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(got.items.len() as u64 == (n / 10).min(50), "short page");
        let start = Instant::now();
        let g = records.groups(50).await?;
        let t2 = start.elapsed().as_secs_f64() * 1e3;
        anyhow::ensure!(g.len() == 50, "groups: {}", g.len());
        if run > 0 {
            page.push(t1);
            groups.push(t2);
        }
    }
    let api = super::api::load(
        &bus,
        API_CLIENTS,
        api_requests(n),
        "bench.t3",
        i64::try_from(n / 2).unwrap_or(i64::MAX),
    )
    .await;
    let stats = super::api::stats(&bus, 200).await;
    bus.shutdown().await?;
    Ok((median(page), median(groups), api?, stats?))
}

/// Concurrent clients of the admin API figure.
pub const API_CLIENTS: usize = 50;

/// Requests per client of the admin API figure: 200 with a million dead letters, 40 otherwise.
pub fn api_requests(dead_letters: u64) -> usize {
    if dead_letters >= 1_000_000 { 200 } else { 40 }
}

/// One caller publishing `n` events one at a time, in chunks of 100, each chunk followed by
/// 100 raw one-row commits into a copy of the events table (same columns and indexes) on a
/// connection of its own: the medians over `plan.runs` runs (after a warm-up) of (publishes/s,
/// raw commits/s), each from the time of its own chunks.
async fn one_caller_beside_raw(db: &Db, plan: &Plan, n: u64) -> anyhow::Result<(f64, f64)> {
    let pairs = in_turns(
        db,
        plan,
        (n, 100),
        &[("raw_events", "events")],
        async |bus: &EventBus, from: u64, to: u64| {
            for i in from..to {
                bus.enqueue_event(event(i)?).await?;
            }
            Ok(())
        },
        async |pool: &PgPool, schema: &str, from: u64, to: u64| {
            let insert = format!(
                "INSERT INTO \"{schema}\".raw_events ({}) VALUES ($1, $2, $3::json, 'pending', $4, $4, $4)",
                super::pg_limits::COLUMNS
            );
            for row in &super::pg_limits::rows(from, to)? {
                super::pg_limits::insert_one(pool, &insert, row).await?;
            }
            Ok(())
        },
    )
    .await?;
    Ok((
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
    ))
}

/// The library's batches of 1,000 and the `unnest` + id table limit's, ten batches of each in
/// turn on one fresh schema (the limit into copies of the events and id tables), `n` events
/// each: (library events/s, limit rows/s, the median of the runs' ratios), over `plan.runs`
/// runs after a warm-up.
async fn batches_beside_limit(db: &Db, plan: &Plan, n: u64) -> anyhow::Result<(f64, f64, f64)> {
    let pairs = in_turns(
        db,
        plan,
        (n, 10_000),
        &[("raw_events", "events"), ("raw_ids", "event_ids")],
        async |bus: &EventBus, from: u64, to: u64| {
            for events in batches(from, to) {
                bus.enqueue_batch(events?).await?;
            }
            Ok(())
        },
        async |pool: &PgPool, schema: &str, from: u64, to: u64| {
            let (table, ids) = (
                format!("\"{schema}\".raw_events"),
                format!("\"{schema}\".raw_ids"),
            );
            for start in (from..to).step_by(1000) {
                let rows = super::pg_limits::rows(start, (start + 1000).min(to))?;
                super::pg_limits::unnest_with_ids(pool, &table, &ids, &rows).await?;
            }
            Ok(())
        },
    )
    .await?;
    Ok((
        median(pairs.iter().map(|p| p.0).collect()),
        median(pairs.iter().map(|p| p.1).collect()),
        median(pairs.iter().map(|p| p.0 / p.1).collect()),
    ))
}

/// Events `0..n` through `library` and rows `n..2n` through `raw` (on a connection of its own,
/// into the `copies` made of the schema's tables: (copy, table)), `turn` at a time each in
/// turn, on a fresh schema per run: (library events/s, raw rows/s) of each of `plan.runs` runs
/// after a warm-up, each from the time of its own turns.
async fn in_turns(
    db: &Db,
    plan: &Plan,
    (n, turn): (u64, u64),
    copies: &[(&str, &str)],
    library: impl AsyncFn(&EventBus, u64, u64) -> anyhow::Result<()>,
    raw: impl AsyncFn(&PgPool, &str, u64, u64) -> anyhow::Result<()>,
) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut pairs = Vec::new();
    for run in 0..=plan.runs {
        let target = fresh(db);
        let bus = target.builder().build().await?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&target.target)
            .await?;
        let schema = target.schema.clone();
        let measured = async {
            for (copy, table) in copies {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "CREATE TABLE \"{schema}\".{copy} (LIKE \"{schema}\".{table} INCLUDING ALL)"
                )))
                .execute(&pool)
                .await?;
            }
            let (mut lib_time, mut raw_time) = (Duration::ZERO, Duration::ZERO);
            let mut from = 0;
            while from < n {
                let to = (from + turn).min(n);
                let started = Instant::now();
                library(&bus, from, to).await?;
                lib_time += started.elapsed();
                let started = Instant::now();
                raw(&pool, &schema, n + from, n + to).await?;
                raw_time += started.elapsed();
                from = to;
            }
            anyhow::Ok((
                n as f64 / lib_time.as_secs_f64(),
                n as f64 / raw_time.as_secs_f64(),
            ))
        }
        .await;
        pool.close().await;
        bus.shutdown().await?;
        drop_schema(&target).await?;
        if run > 0 {
            pairs.push(measured?);
        }
    }
    Ok(pairs)
}

/// Runs a publish measurement `runs` times (after a warm-up), each on a fresh schema.
async fn publish_runs<F>(db: &Db, plan: &Plan, f: F) -> anyhow::Result<f64>
where
    F: AsyncFn(Arc<EventBus>) -> anyhow::Result<f64>,
{
    let mut out = Vec::new();
    for run in 0..=plan.runs {
        let target = fresh(db);
        let bus = Arc::new(target.builder().build().await?);
        let measured = f(bus.clone()).await;
        bus.shutdown().await?;
        drop_schema(&target).await?;
        if run > 0 {
            out.push(measured?);
        }
    }
    Ok(median(out))
}

/// Samples taken by the latency run (the quick run takes fewer).
const LATENCY_SAMPLES: u64 = 2_000;

/// Publish → handler start across processes, measured the way the peers are: on a fresh schema
/// with the worker processes idle and waiting, one event every 2 ms (no wait for completion
/// between them), the handler recording when it starts. Warm-up events (without a send time)
/// go first and are not counted.
async fn latency(db: &Db, plan: &Plan) -> anyhow::Result<EndToEnd> {
    let (bus, pool, mut workers) = publisher_and_workers(db, plan.workers).await?;
    let warm = 100;
    for events in batches(0, warm) {
        bus.enqueue_batch(events?).await?;
    }
    wait_completed(&pool, db, i64::try_from(warm)?, Duration::from_secs(60)).await?;
    let samples = if plan.quick { 200 } else { LATENCY_SAMPLES };
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let e = NewEvent::new("bench.latency", &serde_json::json!({ "sent_us": now_us() }))?;
        bus.enqueue_event(e).await?;
    }
    let total = warm + samples;
    wait_completed(&pool, db, i64::try_from(total)?, Duration::from_secs(60)).await?;
    workers.stop()?;
    bus.shutdown().await?;
    pool.close().await;
    tally(&workers, total)
}

async fn end_to_end(db: &Db, plan: &Plan) -> anyhow::Result<EndToEnd> {
    let (bus, pool, mut workers) = publisher_and_workers(db, plan.workers).await?;
    let n = if plan.quick {
        plan.events.min(10_000)
    } else {
        plan.events
    };
    let start = Instant::now();
    for events in batches(0, n) {
        bus.enqueue_batch(events?).await?;
    }
    wait_completed(&pool, db, i64::try_from(n)?, Duration::from_secs(600)).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    workers.stop()?;
    bus.shutdown().await?;
    pool.close().await;
    Ok(EndToEnd {
        eps,
        ..tally(&workers, n)?
    })
}

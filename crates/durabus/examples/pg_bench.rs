//! The PostgreSQL figures as an application gets them: a benchmark that uses only the public
//! API of the library, in one process, to set beside `durabus bench --db postgres://…`.
//!
//! ```text
//! cargo run --release -p durabus --features postgres --example pg_bench -- [--quick] [--runs 3] [--json]
//! ```
//!
//! It connects to `DURABUS_TEST_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`)
//! and measures each figure on a schema of its own, dropped afterwards: one caller awaiting each
//! publish, 64 concurrent callers, batches of 1,000, draining a backlog, end to end while the
//! bus delivers, and publish → handler start in the same process (beside a raw one-row commit,
//! its limit, measured interleaved with it). Each figure is the median of
//! `--runs` runs after one warm-up run. Build it with `--release`: a debug build measures the
//! compiler's unoptimised JSON and protocol encoding, not the database.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use durabus::sqlx::{self, AssertSqlSafe};
use durabus::{Event, EventBus, NewEvent, PgOptions, SubscribeOptions};
use tokio::sync::{Mutex, Notify};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What the command line asked for.
struct Plan {
    url: String,
    runs: usize,
    quick: bool,
    json: bool,
    /// Only these figures (`seq`, `concurrent`, `batch`, `drain`, `e2e`, `latency`); all if
    /// empty.
    only: Vec<String>,
}

impl Plan {
    fn scale(&self, full: u64, quick: u64) -> u64 {
        if self.quick { quick } else { full }
    }

    fn wants(&self, figure: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|f| f == figure)
    }
}

#[tokio::main]
async fn main() -> Res<()> {
    let mut plan = Plan {
        url: std::env::var("DURABUS_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into()),
        runs: 3,
        quick: false,
        json: false,
        only: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => plan.quick = true,
            "--json" => plan.json = true,
            "--runs" => {
                plan.runs = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&n| n >= 1)
                    .ok_or("--runs needs a number ≥ 1")?;
            }
            "--only" => {
                let list = args.next().ok_or("--only needs a list")?;
                plan.only = list.split(',').map(str::to_owned).collect();
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let started = Instant::now();
    let mut figures: Vec<(&str, f64)> = Vec::new();
    let seq = plan.scale(5_000, 500);
    if plan.wants("seq") {
        let f = median_of(&plan, async |bus| one_caller(&bus, seq).await).await?;
        figures.push(("publish_seq_eps", f));
    }
    if plan.wants("concurrent") {
        let n = plan.scale(50_000, 5_000);
        let f = median_of(&plan, async |bus| concurrent(&bus, n, 64).await).await?;
        figures.push(("publish_concurrent_eps", f));
    }
    if plan.wants("batch") {
        let n = plan.scale(200_000, 20_000);
        let f = median_of(&plan, async |bus| batched(&bus, n).await).await?;
        figures.push(("publish_batch_eps", f));
    }
    let n = plan.scale(100_000, 10_000);
    if plan.wants("drain") {
        let f = median_of(&plan, async |bus| drain(&bus, n).await).await?;
        figures.push(("drain_eps", f));
    }
    if plan.wants("e2e") {
        let f = median_of(&plan, async |bus| end_to_end(&bus, n).await).await?;
        figures.push(("e2e_eps", f));
    }
    if plan.wants("latency") {
        let samples = plan.scale(2_000, 200) as usize;
        let [handler, publish, commit] = in_process_latency(&plan, samples).await?;
        figures.push(("latency_samples", samples as f64));
        figures.push(("latency_p50_us", handler.0));
        figures.push(("latency_p99_us", handler.1));
        // The publish call alone (its commit), within that latency.
        figures.push(("latency_publish_p50_us", publish.0));
        figures.push(("latency_publish_p99_us", publish.1));
        // The limit, interleaved with the samples: a raw one-row commit.
        figures.push(("latency_raw_commit_p50_us", commit.0));
        figures.push(("latency_raw_commit_p99_us", commit.1));
        figures.push((
            "latency_p99_to_raw_commit_p99",
            handler.1 / commit.1.max(1.0),
        ));
    }
    figures.push(("seconds", started.elapsed().as_secs_f64()));
    if plan.json {
        let map: serde_json::Map<String, serde_json::Value> = figures
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
            .collect();
        println!("{}", serde_json::Value::Object(map));
    } else {
        for (name, value) in figures {
            println!("{name:<24} {value:>12.0}");
        }
    }
    Ok(())
}

/// A bus on a new schema of its own.
async fn fresh_bus(url: &str) -> Res<(EventBus, String)> {
    let schema = format!("libbench_{}", durabus::EventId::new().0.simple());
    let options = PgOptions {
        schema: schema.clone(),
        ..PgOptions::default()
    };
    let bus = EventBus::builder()
        .postgres_with(url, options)
        .build()
        .await?;
    Ok((bus, schema))
}

async fn drop_schema(url: &str, schema: &str) -> Res<()> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await?;
    pool.close().await;
    Ok(())
}

/// Runs `f` on a fresh bus once to warm up and then `plan.runs` times: the median.
async fn median_of<F>(plan: &Plan, f: F) -> Res<f64>
where
    F: AsyncFn(Arc<EventBus>) -> Res<f64>,
{
    let mut out = Vec::new();
    for run in 0..=plan.runs {
        let (bus, schema) = fresh_bus(&plan.url).await?;
        let bus = Arc::new(bus);
        let measured = f(bus.clone()).await;
        bus.shutdown().await?;
        drop_schema(&plan.url, &schema).await?;
        if run > 0 {
            out.push(measured?);
        }
    }
    Ok(median(out))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// A payload of about 200 bytes of JSON, as the peers were measured with.
fn event(i: u64) -> Res<NewEvent> {
    Ok(NewEvent::new(
        "bench.order.created",
        &serde_json::json!({
            "order_id": i,
            "customer": "customer-0001-with-a-reasonably-long-identifier",
            "items": [{"sku": "SKU-12345", "qty": 2, "price_cents": 1999},
                      {"sku": "SKU-67890", "qty": 1, "price_cents": 4999}],
            "currency": "EUR",
            "note": "benchmark payload"
        }),
    )?)
}

async fn publish_batches(bus: &EventBus, n: u64) -> Res<()> {
    for start in (0..n).step_by(1000) {
        let batch = (start..(start + 1000).min(n))
            .map(event)
            .collect::<Res<Vec<_>>>()?;
        bus.enqueue_batch(batch).await?;
    }
    Ok(())
}

async fn one_caller(bus: &EventBus, n: u64) -> Res<f64> {
    let start = Instant::now();
    for i in 0..n {
        bus.enqueue_event(event(i)?).await?;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

async fn concurrent(bus: &Arc<EventBus>, n: u64, callers: u64) -> Res<f64> {
    let per = n / callers;
    let start = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let bus = bus.clone();
            tokio::spawn(async move {
                for i in 0..per {
                    bus.enqueue_event(event(c * per + i)?).await?;
                }
                Res::Ok(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok((per * callers) as f64 / start.elapsed().as_secs_f64())
}

async fn batched(bus: &EventBus, n: u64) -> Res<f64> {
    let start = Instant::now();
    publish_batches(bus, n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// Counts handler calls and wakes a waiter.
#[derive(Default)]
struct Counter {
    seen: AtomicU64,
    wake: Notify,
}

impl Counter {
    async fn subscribe(self: &Arc<Self>, bus: &EventBus) -> Res<()> {
        let c = self.clone();
        let handler = move |_e: Event| {
            c.seen.fetch_add(1, Ordering::Relaxed);
            c.wake.notify_one();
            async { Ok(()) }
        };
        bus.subscribe("bench.*", handler, SubscribeOptions::default())
            .await?;
        Ok(())
    }

    async fn wait_for(&self, n: u64) -> Res<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
        while self.seen.load(Ordering::Relaxed) < n {
            let notified = self.wake.notified();
            if self.seen.load(Ordering::Relaxed) >= n {
                break;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(
                    format!("only {} of {n} handled", self.seen.load(Ordering::Relaxed)).into(),
                );
            }
        }
        Ok(())
    }
}

/// A backlog of `n` events published first, then delivered by this process: events/s.
async fn drain(bus: &EventBus, n: u64) -> Res<f64> {
    let counter = Arc::new(Counter::default());
    counter.subscribe(bus).await?;
    publish_batches(bus, n).await?;
    let start = Instant::now();
    bus.start().await?;
    counter.wait_for(n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `n` events published in batches while this process delivers them: events/s from the first
/// publish to the last handler call.
async fn end_to_end(bus: &EventBus, n: u64) -> Res<f64> {
    let counter = Arc::new(Counter::default());
    counter.subscribe(bus).await?;
    bus.start().await?;
    let start = Instant::now();
    publish_batches(bus, n).await?;
    counter.wait_for(n).await?;
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Publish → handler start in this process, on a fresh schema after 100 warm-up events, the
/// handler recording when it starts: (p50, p99) in µs of publish → handler start, of the
/// publish call alone, and of its limit. Each sample is an event enqueued after a 2 ms pause,
/// then, after another, a raw one-row commit into a copy of the events table (same columns and
/// indexes, nobody claiming from it) on a connection of its own: the limit is measured
/// interleaved with the figure, so the disk's drift between runs cannot come between them.
async fn in_process_latency(plan: &Plan, samples: usize) -> Res<[(f64, f64); 3]> {
    let (bus, schema) = fresh_bus(&plan.url).await?;
    let raw = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&plan.url)
        .await?;
    let table = format!("\"{schema}\".raw_events");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {table} (LIKE \"{schema}\".events INCLUDING ALL)"
    )))
    .execute(&raw)
    .await?;
    let insert = format!(
        "INSERT INTO {table} (id, type, payload, status, created_at, updated_at, next_attempt_at) \
         VALUES ($1, $2, $3::json, 'pending', $4, $4, $4)"
    );
    let seen = Arc::new(Mutex::new(Vec::with_capacity(samples)));
    let counter = Arc::new(Counter::default());
    let (sink, count) = (seen.clone(), counter.clone());
    let handler = move |e: Event| {
        let sent = e.payload_value().get("sent_us").and_then(|v| v.as_u64());
        let latency = sent.map(|s| now_us().saturating_sub(s));
        let (sink, count) = (sink.clone(), count.clone());
        async move {
            if let Some(us) = latency {
                sink.lock().await.push(us as f64);
            }
            count.seen.fetch_add(1, Ordering::Relaxed);
            count.wake.notify_one();
            Ok(())
        }
    };
    bus.subscribe("bench.*", handler, SubscribeOptions::default())
        .await?;
    bus.start().await?;
    publish_batches(&bus, 100).await?;
    counter.wait_for(100).await?;
    let mut publish = Vec::with_capacity(samples);
    let mut commits = Vec::with_capacity(samples);
    for _ in 0..samples {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let e = NewEvent::new("bench.latency", &serde_json::json!({ "sent_us": now_us() }))?;
        let started = Instant::now();
        bus.enqueue_event(e).await?;
        publish.push(started.elapsed().as_micros() as f64);
        tokio::time::sleep(Duration::from_millis(2)).await;
        let row = NewEvent::new("bench.latency", &serde_json::json!({ "sent_us": now_us() }))?;
        let started = Instant::now();
        sqlx::query(AssertSqlSafe(insert.as_str()))
            .bind(row.id.0)
            .bind(&row.event_type)
            .bind(&row.payload)
            .bind(durabus::Timestamp::now().as_millis())
            .execute(&raw)
            .await?;
        commits.push(started.elapsed().as_micros() as f64);
    }
    counter.wait_for(100 + samples as u64).await?;
    bus.shutdown().await?;
    raw.close().await;
    drop_schema(&plan.url, &schema).await?;
    let handler = seen.lock().await.clone();
    Ok([p50_p99(handler), p50_p99(publish), p50_p99(commits)])
}

fn p50_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |p: f64| {
        v.get(((v.len().max(1) - 1) as f64 * p).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    (at(0.50), at(0.99))
}

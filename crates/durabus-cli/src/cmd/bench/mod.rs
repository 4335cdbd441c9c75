//! `durabus bench`: the performance figures of DESIGN §5, measured on fresh file databases in
//! WAL mode, each the median of several runs after a warm-up.

mod api;
mod dlq;
mod flow;
mod harness;
mod history;
mod metrics;
mod ordering;
mod otel;
mod pg_limits;
mod pg_schedule;
mod pg_table;
mod pg_workers;
mod pipeline;
mod postgres;
mod publish;
mod replay;
mod schedule;
mod sqlite_table;
mod verdict;

use std::time::Instant;

use durabus::Durability;
use serde::Serialize;

use self::harness::{Bench, median};
use crate::output;

/// Durability as a command-line value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    /// `synchronous=NORMAL`: survives a process crash.
    Normal,
    /// `synchronous=FULL`: an fsync per commit, survives power loss.
    Full,
}

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Small sizes, for a smoke run in seconds (skips the 1M-event figures).
    #[arg(long)]
    quick: bool,
    /// Commit durability to measure.
    #[arg(long, value_enum, default_value = "normal")]
    durability: DurabilityArg,
    /// Events pushed through the bus for the end-to-end figure.
    #[arg(long, default_value_t = 100_000)]
    events: u64,
    /// Concurrent publishers for the concurrent figure.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Runs per figure (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Rows per chunk of the bulk retry, fixed (by default the chunk size adapts to how long
    /// each chunk's write takes). For comparing the two.
    #[arg(long)]
    bulk_chunk: Option<usize>,
    /// Events pushed through the bus for the memory figure.
    #[arg(long, default_value_t = 1_000_000)]
    rss_events: u64,
    /// Worker processes for the end-to-end figure with --db postgres://….
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Completed events in the database of the large-history comparison.
    #[arg(long, default_value_t = 1_000_000)]
    history_events: u64,
    /// Measure only these figure groups (comma-separated: publish, e2e, latency, dlq, bulk,
    /// replay, metrics, api, recovery, rss, history, otel, schedule, ordering, flow; PostgreSQL:
    /// limits, publish, e2e, latency, schedule, ordering, flow, dlq (with the admin API
    /// figure), bulk); the others are reported as 0. For profiling one path at a time.
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Run only this variant of the `otel` group (to count one variant's instructions with
    /// callgrind); the others, and the ratios, are then reported as 0.
    #[arg(long, value_enum)]
    otel_variant: Option<otel::Tracing>,
}

/// Every figure, as printed with `--json`.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub durability: &'static str,
    pub publish_seq_eps: f64,
    /// Plain rusqlite, one row per commit, same disk and durability: the ceiling of
    /// `publish_seq_eps`, measured in the same run.
    pub raw_sqlite_commit_eps: f64,
    pub publish_concurrent_eps: f64,
    /// The same with automatic payload snapshots at `published`.
    pub publish_snapshot_eps: f64,
    /// The compressed size of each event's snapshot, read back (on SQLite a `published`
    /// snapshot shares the event's payload until the event's row goes; this is the row it gets
    /// then).
    pub snapshot_bytes_per_event: f64,
    pub publish_batch_eps: f64,
    pub e2e_eps: f64,
    /// Events delivered per writer transaction in the end-to-end run (inserts, claims and
    /// outcomes all count as transactions): group commit at work.
    pub e2e_events_per_commit: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    pub dlq_list_10k_ms: f64,
    pub dlq_list_1m_ms: Option<f64>,
    /// Dead-letter records in the big queue (1M; `--quick`: 10k).
    pub dlq_records: u64,
    /// First page of records filtered by type and status.
    pub dlq_records_page_ms: f64,
    /// The failure groups.
    pub dlq_groups_ms: f64,
    /// Dead letters in the bulk retry (100k; `--quick`: 10k).
    pub bulk_records: u64,
    /// Dead letters retried per second by a bulk operation while 64 callers publish.
    pub bulk_retry_eps: f64,
    /// Those publishers' p99 latency during the bulk run, and just before it (ms).
    pub bulk_publish_p99_ms: f64,
    pub bulk_baseline_p99_ms: f64,
    /// Events in the unthrottled replay (100k; `--quick`: 10k).
    pub replay_events: u64,
    /// Events re-published per second by that replay.
    pub replay_eps: f64,
    /// The rate limit of the throttled replay (events/s), and the rate measured over the 10 s
    /// after its first second (`--quick`: over what follows the first second of 3 s).
    pub replay_rate_limit: u32,
    pub replay_rate_measured_eps: f64,
    /// The 10 s window (after the first second) furthest from the limit.
    pub replay_rate_worst_window_eps: f64,
    /// One caller's publish p99 while the throttled replay ran, and just before it (ms).
    pub replay_live_p99_ms: f64,
    pub replay_baseline_p99_ms: f64,
    /// A `/metrics` scrape on a database with `metrics_history` completed events and
    /// `metrics_dead_letters` dead letters (1M and 100k; `--quick`: 50k and 10k): reading every
    /// store gauge, and served from the gauge cache (ms).
    pub metrics_history: u64,
    pub metrics_dead_letters: u64,
    pub metrics_scrape_ms: f64,
    pub metrics_scrape_cached_ms: f64,
    /// The admin API with `api_dead_letters` dead letters (1M; `--quick`: 10k): this many HTTP
    /// clients listing them at once over loopback TCP (first page, a type-and-status filtered
    /// page, a page deep in the queue), per-request p50 and p99 (ms), requests/s.
    pub api_dead_letters: u64,
    pub api_list_clients: usize,
    pub api_list_p50_ms: f64,
    pub api_list_p99_ms: f64,
    pub api_list_rps: f64,
    /// The statistics on that database: one refresh, and `GET /api/v2/stats` from the kept
    /// snapshot.
    pub stats: api::StatsRead,
    pub recovery_100_ms: f64,
    pub recovery_100k_ms: f64,
    pub rss_start_mb: f64,
    pub rss_end_mb: f64,
    /// Completed events in the database of the `history_*` figures.
    pub history_events: u64,
    /// 64 concurrent publishers, no worker running: empty database, then with the history.
    pub empty_publish_eps: f64,
    pub history_publish_eps: f64,
    /// The bus started on that backlog until all are handled (claims and completions).
    pub empty_drain_eps: f64,
    pub history_drain_eps: f64,
    /// End to end while the bus runs.
    pub empty_e2e_eps: f64,
    pub history_e2e_eps: f64,
    /// End to end with no tracing subscriber, and with the OpenTelemetry layer recording every
    /// span into an exporter that drops them, runs alternated in one measurement.
    pub otel_none_eps: f64,
    pub otel_layer_eps: f64,
    /// The same with the SDK's simple processor (no batch thread).
    pub otel_simple_eps: f64,
    /// The median of each back-to-back pair's ratio, layer / none: what is judged, since the
    /// machine's speed drifts between pairs more than within one.
    pub otel_layer_ratio: f64,
    /// The same for the simple processor.
    pub otel_simple_ratio: f64,
    /// Scheduled events and priorities (the `schedule` group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<schedule::Figures>,
    /// End to end with and without ordering keys (the `ordering` group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ordering: Option<ordering::Figures>,
    /// End to end with and without a concurrency limit (the `flow` group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flow: Option<flow::Figures>,
    pub events: u64,
    pub concurrency: usize,
    pub runs: usize,
    pub seconds: f64,
}

pub async fn run(db: &crate::cmd::Db, json: bool, args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(args.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(args.events >= 1, "--events must be at least 1");
    anyhow::ensure!(
        args.bulk_chunk != Some(0),
        "--bulk-chunk must be at least 1"
    );
    if db.is_postgres() {
        let plan = postgres::Plan {
            workers: args.workers,
            events: args.events,
            concurrency: args.concurrency,
            bulk_chunk: args.bulk_chunk,
            runs: args.runs,
            quick: args.quick,
            verbose: !json,
            only: args.only.clone(),
        };
        let report = postgres::run(db, plan).await?;
        if json {
            return output::json(&report);
        }
        pg_table::print_table(&report);
        return Ok(());
    }
    let started = Instant::now();
    let durability = match args.durability {
        DurabilityArg::Normal => Durability::Normal,
        DurabilityArg::Full => Durability::Full,
    };
    let b = Bench::new(durability, !json)?;
    let q = args.quick;
    let scale = |full: u64, quick: u64| if q { quick } else { full };
    let runs = args.runs;
    let want = |group: &str| args.only.is_empty() || args.only.iter().any(|g| g == group);
    let mut r = Report {
        durability: match durability {
            Durability::Normal => "normal",
            Durability::Full => "full",
        },
        events: if q {
            args.events.min(20_000)
        } else {
            args.events
        },
        concurrency: args.concurrency,
        runs,
        ..Report::default()
    };

    if want("publish") {
        b.say("raw SQLite commits (the disk's limit for one caller)");
        let n = scale(20_000, 2_000);
        r.raw_sqlite_commit_eps = median(
            b.repeat(runs, || async { publish::raw_commits(&b, n) })
                .await?,
        );
        b.say("publish, one caller awaiting each commit");
        r.publish_seq_eps = median(
            b.repeat(runs, || publish::sequential(&b, scale(20_000, 2_000)))
                .await?,
        );
        b.say("publish, concurrent callers");
        r.publish_concurrent_eps = median(
            b.repeat(runs, || {
                publish::concurrent(&b, scale(200_000, 20_000), args.concurrency)
            })
            .await?,
        );
        b.say("publish, concurrent callers, with payload snapshots");
        let with: Vec<(f64, f64)> = b
            .repeat(runs, || {
                publish::concurrent_with_snapshots(&b, scale(200_000, 20_000), args.concurrency)
            })
            .await?;
        r.publish_snapshot_eps = median(with.iter().map(|w| w.0).collect());
        r.snapshot_bytes_per_event = median(with.iter().map(|w| w.1).collect());
        b.say("publish, batches of 1,000");
        r.publish_batch_eps = median(
            b.repeat(runs, || publish::batch(&b, scale(500_000, 50_000)))
                .await?,
        );
    }
    if want("e2e") {
        b.say("end to end, no-op handler");
        let mut per_commit = Vec::new();
        let mut eps = Vec::new();
        for (e, p) in b
            .repeat(runs, || pipeline::end_to_end(&b, r.events))
            .await?
        {
            eps.push(e);
            per_commit.push(p);
        }
        r.e2e_eps = median(eps);
        r.e2e_events_per_commit = median(per_commit);
    }
    if want("otel") {
        b.say("end to end, no subscriber and the OpenTelemetry layer, alternated");
        let runs_of = b
            .repeat(runs, || async {
                let variant = |t: otel::Tracing| {
                    let b = &b;
                    async move {
                        if args.otel_variant.is_some_and(|only| only != t) {
                            return Ok(0.0);
                        }
                        let eps = otel::end_to_end(b, r.events, t).await?;
                        b.cleanup();
                        anyhow::Ok(eps)
                    }
                };
                let none = variant(otel::Tracing::None).await?;
                let batch = variant(otel::Tracing::Batch).await?;
                let simple = variant(otel::Tracing::Simple).await?;
                b.note(&format!(
                    "pair: none {none:.0}, layer {batch:.0} ({:.2}), simple {simple:.0} ({:.2})",
                    otel::ratio(batch, none),
                    otel::ratio(simple, none)
                ));
                Ok((none, batch, simple))
            })
            .await?;
        r.otel_none_eps = median(runs_of.iter().map(|p| p.0).collect());
        r.otel_layer_eps = median(runs_of.iter().map(|p| p.1).collect());
        r.otel_simple_eps = median(runs_of.iter().map(|p| p.2).collect());
        r.otel_layer_ratio = median(runs_of.iter().map(|p| otel::ratio(p.1, p.0)).collect());
        r.otel_simple_ratio = median(runs_of.iter().map(|p| otel::ratio(p.2, p.0)).collect());
    }
    if want("latency") {
        b.say("latency, publish to handler start");
        let (p50, p99) = pipeline::latency(&b, if q { 300 } else { 2_000 }).await?;
        r.latency_p50_us = p50;
        r.latency_p99_us = p99;
        b.cleanup();
    }
    if want("dlq") {
        b.say("dead-letter listings, 10k dead letters");
        r.dlq_list_10k_ms = dlq::listings(&b, 10_000, runs.max(5))
            .await?
            .events_first_page;
        b.cleanup();
        r.dlq_records = scale(1_000_000, 10_000);
        b.say("dead-letter listings and groups, many dead letters");
        let big = dlq::listings(&b, r.dlq_records, runs.max(5)).await?;
        if !q {
            r.dlq_list_1m_ms = Some(big.events_first_page);
        }
        r.dlq_records_page_ms = big.records_first_page;
        r.dlq_groups_ms = big.groups;
        b.cleanup();
    }
    if want("bulk") {
        r.bulk_records = scale(100_000, 10_000);
        b.say("bulk retry of dead letters while 64 callers publish");
        let bulk =
            dlq::bulk_retry_sqlite(&b, r.bulk_records, args.concurrency, args.bulk_chunk).await?;
        r.bulk_retry_eps = bulk.retry_eps;
        r.bulk_publish_p99_ms = bulk.publish_p99_ms;
        r.bulk_baseline_p99_ms = bulk.baseline_p99_ms;
        b.cleanup();
    }
    if want("replay") {
        r.replay_events = scale(100_000, 10_000);
        b.say("replay, unthrottled");
        r.replay_eps = median(
            b.repeat(runs, || replay::unthrottled(&b, r.replay_events))
                .await?,
        );
        b.cleanup();
        b.say("replay at 2,000 events/s while the bus delivers and one caller publishes");
        let limited = replay::limited(&b, 2_000, scale(12, 3)).await?;
        r.replay_rate_limit = limited.target;
        r.replay_rate_measured_eps = limited.measured_eps;
        r.replay_rate_worst_window_eps = limited.worst_window_eps;
        r.replay_live_p99_ms = limited.live_p99_ms;
        r.replay_baseline_p99_ms = limited.baseline_p99_ms;
        b.cleanup();
    }
    if want("metrics") {
        r.metrics_history = scale(1_000_000, 50_000);
        r.metrics_dead_letters = scale(100_000, 10_000);
        b.say("a /metrics scrape with a large history and many dead letters");
        let s =
            metrics::scrape(&b, r.metrics_history, r.metrics_dead_letters, runs.max(20)).await?;
        r.metrics_scrape_ms = s.refresh_ms;
        r.metrics_scrape_cached_ms = s.cached_ms;
        b.cleanup();
    }
    if want("api") {
        r.api_dead_letters = scale(1_000_000, 10_000);
        b.say("admin API: 50 HTTP clients listing dead letters");
        // Filled by one bus, checkpointed, then served as `durabus serve` serves a database
        // an application made: a bus that delivers nothing.
        let path = b.path();
        let filler = b.builder_at(&path).build().await?;
        dlq::fill(&filler, r.api_dead_letters).await?;
        filler.shutdown().await?;
        let wal = path.clone();
        tokio::task::spawn_blocking(move || {
            rusqlite::Connection::open(&wal)?.query_row(
                "PRAGMA wal_checkpoint(TRUNCATE)",
                [],
                |_| Ok(()),
            )
        })
        .await??;
        let bus = b.builder_at(&path).deliver(false).build().await?;
        bus.start().await?;
        let load = api::load(
            &bus,
            postgres::API_CLIENTS,
            postgres::api_requests(r.api_dead_letters),
            "bench.t3",
            i64::try_from(r.api_dead_letters / 2).unwrap_or(i64::MAX),
        )
        .await;
        let stats = match load {
            Ok(_) => api::stats(&bus, 200).await.map(Some),
            Err(_) => Ok(None),
        };
        bus.shutdown().await?;
        let load = load?;
        r.stats = stats?.unwrap_or_default();
        r.api_list_clients = load.clients;
        r.api_list_p50_ms = load.p50_ms;
        r.api_list_p99_ms = load.p99_ms;
        r.api_list_rps = load.rps;
        b.cleanup();
    }
    if want("recovery") {
        b.say("startup recovery, 100 stuck events");
        r.recovery_100_ms = median(b.repeat(runs, || pipeline::recovery(&b, 100)).await?);
        b.say("startup recovery, 100k stuck events");
        r.recovery_100k_ms = median(
            b.repeat(runs, || pipeline::recovery(&b, scale(100_000, 10_000)))
                .await?,
        );
    }
    if want("rss") {
        b.say("memory while events flow through the bus");
        let (start, end) = pipeline::rss(&b, if q { 50_000 } else { args.rss_events }).await?;
        r.rss_start_mb = start;
        r.rss_end_mb = end;
    }
    if want("schedule") {
        r.schedule = Some(
            schedule::run(
                &b,
                scale(1_000_000, 50_000),
                scale(100_000, 10_000),
                args.concurrency,
                runs,
                (if q { 100 } else { 500 }, scale(100_000, 20_000)),
            )
            .await?,
        );
    }
    if want("ordering") {
        r.ordering = Some(ordering::run(&b, scale(100_000, 10_000), 1000, runs).await?);
    }
    if want("flow") {
        r.flow = Some(flow::run(&b, scale(100_000, 10_000), runs).await?);
    }
    if want("history") {
        r.history_events = scale(args.history_events, 50_000);
        b.say("hot path with a large history of completed events");
        let (empty, full) = history::compare(
            &b,
            history::Fill::History,
            r.history_events,
            scale(100_000, 10_000),
            args.concurrency,
            runs,
        )
        .await?;
        r.empty_publish_eps = empty.publish_eps;
        r.history_publish_eps = full.publish_eps;
        r.empty_drain_eps = empty.drain_eps;
        r.history_drain_eps = full.drain_eps;
        r.empty_e2e_eps = empty.e2e_eps;
        r.history_e2e_eps = full.e2e_eps;
    }
    r.seconds = started.elapsed().as_secs_f64();

    if json {
        return output::json(&r);
    }
    sqlite_table::print(&r);
    Ok(())
}

//! Spans (the `spans` module: a producer span per publish, a consumer span per handler run)
//! and Prometheus metrics: counters and histograms kept as things happen, gauges read at scrape
//! time (store depths and ages from indexed queries, cached; this process's resources).
//!
//! Every name, type and label is listed in `docs/OPERATIONS.md` ("Metrics"). The families
//! exist with the `metrics` feature; without it [`Telemetry`] is kept but records nothing, so
//! the code that reports to it is the same either way.

mod config;
#[cfg(feature = "opentelemetry")]
pub(crate) mod context;
mod dead_letter_types;
mod gauges;
mod retry;
pub(crate) mod spans;
#[cfg(feature = "metrics")]
mod store_text;

#[cfg(feature = "metrics")]
mod families;
#[cfg(feature = "metrics")]
mod store_families;

pub use self::config::{MAX_LABELLED_GROUPS, MetricsConfig};
#[cfg(feature = "opentelemetry")]
pub use self::context::{TRACEPARENT, TRACESTATE};
pub use self::gauges::ProcessStats;
pub(crate) use self::retry::Pass;
pub use self::retry::{MetricsSnapshot, RetryMetrics, TypeMetrics};
pub use self::spans::TARGET as SPAN_TARGET;
#[cfg(feature = "metrics")]
pub use self::store_text::store_metrics_text;
pub use crate::store::{PoolGauges, StoreGauges};

/// `store`'s gauges at `now` with the failure groups `config` labels.
pub(crate) async fn read_gauges(
    store: &dyn crate::store::Store,
    config: &MetricsConfig,
    now: crate::clock::Timestamp,
) -> crate::error::Result<StoreGauges> {
    let mut gauges = store.gauges(now).await?;
    gauges.failure_groups = store
        .dlq_groups(config.failure_groups)
        .await?
        .into_iter()
        .map(|g| (g.fingerprint, g.count))
        .collect();
    gauges.dead_letter_types =
        dead_letter_types::by_type(&gauges.dead_letter_types, config.dead_letter_types);
    gauges.pauses = store
        .pause_list(None, 0)
        .await?
        .into_iter()
        .map(|p| {
            let (kind, target) = (p.scope.kind().to_owned(), p.scope.target().to_owned());
            (kind, target, p.paused_at, p.parked)
        })
        .collect();
    gauges.breakers = store
        .breaker_reports(now.minus(crate::breaker::report::REPORT_FRESH))
        .await?
        .into_iter()
        .map(|r| (r.subscription, r.process, r.state))
        .collect();
    gauges.concurrency = store
        .concurrency_list(now)
        .await?
        .into_iter()
        .map(|l| (l.subscription, l.max_in_flight, l.in_flight, l.waiting))
        .collect();
    Ok(gauges)
}

use std::time::Duration;

/// How a handler run ended, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunResult {
    /// It returned `Ok(())`.
    Ok,
    /// It returned an error.
    Error,
    /// It ran past its timeout.
    Timeout,
    /// It panicked.
    Panic,
    /// It snoozed (asked to be called again later).
    Snoozed,
}

impl RunResult {
    /// How a handler run that ended with `outcome` is labelled.
    pub(crate) fn of(outcome: &crate::handler::HandlerOutcome) -> RunResult {
        use crate::handler::HandlerOutcome;
        match outcome {
            HandlerOutcome::Ok => RunResult::Ok,
            HandlerOutcome::Error(..) | HandlerOutcome::Permanent(..) => RunResult::Error,
            HandlerOutcome::Timeout(_) => RunResult::Timeout,
            HandlerOutcome::Panic(_) => RunResult::Panic,
            HandlerOutcome::Snoozed(_) => RunResult::Snoozed,
        }
    }

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Ok => "ok",
            RunResult::Error => "error",
            RunResult::Timeout => "timeout",
            RunResult::Panic => "panic",
            RunResult::Snoozed => "snoozed",
        }
    }
}

/// Which store the metrics describe: its own gauges differ (the write-ahead log of SQLite;
/// the pool and the live workers of PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    /// An SQLite file.
    Sqlite,
    /// A PostgreSQL schema.
    Postgres,
}

impl StoreKind {
    /// Which store `backend` is, as the metrics describe it (its own gauges differ).
    pub fn of(backend: &crate::store::Backend<'_>) -> StoreKind {
        match backend {
            #[cfg(feature = "postgres")]
            crate::store::Backend::Postgres(_) => StoreKind::Postgres,
            #[allow(unreachable_patterns)]
            _ => StoreKind::Sqlite,
        }
    }
}

/// A timed store call (the `operation` label of `db_query_duration_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreCall {
    /// Storing published events.
    Insert,
    /// Claiming due events.
    Claim,
    /// Recording delivery outcomes.
    Record,
}

impl StoreCall {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreCall::Insert => "insert",
            StoreCall::Claim => "claim",
            StoreCall::Record => "record",
        }
    }
}

/// A circuit breaker's state as a gauge value: 0 closed, 1 half-open, 2 open.
pub fn breaker_state_value(state: crate::breaker::BreakerState) -> i64 {
    match state {
        crate::breaker::BreakerState::Closed => 0,
        crate::breaker::BreakerState::HalfOpen => 1,
        crate::breaker::BreakerState::Open => 2,
    }
}

/// What a scrape shows besides the counters: read just before encoding.
#[derive(Debug, Clone)]
pub struct ScrapeInput {
    /// The store's gauges (cached by the caller), and the time they are aged against.
    pub store: StoreGauges,
    /// Whether the last read of the store succeeded: `false` when the store could not be read,
    /// `store` holding the last values read (or zeros) and `now` the time they were read at,
    /// so their ages do not grow while nothing is known.
    pub store_up: bool,
    /// The time the store gauges' ages are counted to (the bus clock): the scrape's, or, when
    /// the store is down, the last successful read's.
    pub now: crate::clock::Timestamp,
    /// Each subscription's breaker state value (see [`breaker_state_value`]).
    pub breakers: Vec<(String, i64)>,
    /// This process.
    pub process: ProcessStats,
    /// Seconds since the metrics were created (the bus was built).
    pub uptime: Duration,
}

/// The outcome of the last refresh of the store gauges.
#[derive(Debug, Clone)]
struct Cached {
    /// When it was tried (bus clock).
    at: crate::clock::Timestamp,
    /// The gauges of the last successful read (zeros if none succeeded).
    gauges: StoreGauges,
    /// When they were read (bus clock).
    read_at: crate::clock::Timestamp,
    /// Whether this refresh read the store.
    up: bool,
}

impl Cached {
    /// What a scrape at `now` shows of it: a good reading aged to the scrape, a failed one to
    /// when its gauges were last read.
    fn reading(&self, now: crate::clock::Timestamp) -> StoreReading {
        StoreReading {
            gauges: self.gauges.clone(),
            as_of: if self.up {
                now.max(self.read_at)
            } else {
                self.read_at
            },
            up: self.up,
        }
    }
}

/// What a scrape shows of the store: its gauges, the time to age them against, and whether
/// the store could be read (see [`ScrapeInput::store_up`]).
#[derive(Debug, Clone)]
pub struct StoreReading {
    /// The gauges.
    pub gauges: StoreGauges,
    /// The time their ages are counted to: the scrape's for a successful read, the last
    /// successful read's when the store is down.
    pub as_of: crate::clock::Timestamp,
    /// Whether the store could be read.
    pub up: bool,
}

/// The metrics of one bus (or, for the CLI, of one database: gauges only).
pub struct Telemetry {
    config: MetricsConfig,
    #[cfg(feature = "metrics")]
    families: families::Families,
    created: std::time::Instant,
    /// The store gauges of the last refresh.
    cache: std::sync::Mutex<Option<Cached>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("prefix", &self.config.prefix)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Every family of a bus on a `kind` store, under `config`'s prefix.
    pub fn new(config: MetricsConfig, kind: StoreKind) -> Telemetry {
        #[cfg(not(feature = "metrics"))]
        let _ = kind;
        Telemetry {
            #[cfg(feature = "metrics")]
            families: families::Families::new(config.stem(), kind, true),
            config,
            created: std::time::Instant::now(),
            cache: std::sync::Mutex::new(None),
        }
    }

    /// Only what a database tells without a running bus (the store gauges): for a tool that
    /// inspects a database, where counters of its own process would mean nothing.
    pub fn gauges_only(config: MetricsConfig, kind: StoreKind) -> Telemetry {
        #[cfg(not(feature = "metrics"))]
        let _ = kind;
        Telemetry {
            #[cfg(feature = "metrics")]
            families: families::Families::new(config.stem(), kind, false),
            config,
            created: std::time::Instant::now(),
            cache: std::sync::Mutex::new(None),
        }
    }

    /// Reads `store`'s gauges at `now`, with the failure groups the metrics label (the
    /// configured number with the most open dead letters).
    pub async fn read_gauges(
        &self,
        store: &dyn crate::store::Store,
        now: crate::clock::Timestamp,
    ) -> crate::error::Result<StoreGauges> {
        read_gauges(store, &self.config, now).await
    }

    /// The cached store gauges, if refreshed less than `gauge_refresh` before `now`.
    pub fn cached_gauges(&self, now: crate::clock::Timestamp) -> Option<StoreReading> {
        let cache = crate::sync::lock(&self.cache);
        let c = cache.as_ref()?;
        let age = u64::try_from(now.as_millis() - c.at.as_millis()).ok()?;
        (u128::from(age) < self.config.gauge_refresh.as_millis()).then(|| c.reading(now))
    }

    /// Keeps `gauges`, read at `now`, for the next scrapes. Returns what to show.
    pub fn keep_gauges(&self, now: crate::clock::Timestamp, gauges: StoreGauges) -> StoreReading {
        let kept = Cached {
            at: now,
            gauges,
            read_at: now,
            up: true,
        };
        let reading = kept.reading(now);
        *crate::sync::lock(&self.cache) = Some(kept);
        reading
    }

    /// Records that the store could not be read by a refresh started at `now`: the next
    /// scrapes (until the next refresh is due) show the store down, with the last gauges read
    /// (zeros if none was), aged to when they were read. A refresh that another scrape made
    /// after `now` (while this one waited) is kept, not overwritten. Returns what to show.
    pub fn keep_failure(&self, now: crate::clock::Timestamp) -> StoreReading {
        let mut cache = crate::sync::lock(&self.cache);
        let kept = match cache.take() {
            Some(newer) if newer.at > now => newer,
            last => {
                let (gauges, read_at) = last
                    .map(|c| (c.gauges, c.read_at))
                    .unwrap_or((StoreGauges::default(), now));
                Cached {
                    at: now,
                    gauges,
                    read_at,
                    up: false,
                }
            }
        };
        let reading = kept.reading(now);
        *cache = Some(kept);
        reading
    }

    /// The settings.
    pub fn config(&self) -> &MetricsConfig {
        &self.config
    }

    /// How long since these metrics were created.
    pub fn uptime(&self) -> Duration {
        self.created.elapsed()
    }

    /// `n` events of `event_type` were stored by a publish.
    pub(crate) fn published(&self, event_type: &str, n: u64) {
        #[cfg(feature = "metrics")]
        self.families.published(event_type, n);
        #[cfg(not(feature = "metrics"))]
        let _ = (event_type, n);
    }

    /// A handler started `waited` after its event was published (its first attempt only).
    pub(crate) fn handler_started(&self, waited: Duration) {
        #[cfg(feature = "metrics")]
        self.families.delivery_latency.observe(waited.as_secs_f64());
        #[cfg(not(feature = "metrics"))]
        let _ = waited;
    }

    /// A handler of `subscription` ran for `took` and ended with `result`.
    pub(crate) fn handler_finished(&self, subscription: &str, result: RunResult, took: Duration) {
        #[cfg(feature = "metrics")]
        self.families.handler_finished(subscription, result, took);
        #[cfg(not(feature = "metrics"))]
        let _ = (subscription, result, took);
    }

    /// A delivery pass over an event of `event_type` ended (`took`: from publish, for an
    /// event that ended `done`).
    pub(crate) fn pass_finished(&self, event_type: &str, pass: Pass, since_publish: Duration) {
        #[cfg(feature = "metrics")]
        self.families.pass_finished(event_type, pass, since_publish);
        #[cfg(not(feature = "metrics"))]
        let _ = (event_type, pass, since_publish);
    }

    /// A store call took `took`.
    pub(crate) fn store_call(&self, call: StoreCall, took: Duration) {
        #[cfg(feature = "metrics")]
        self.families.store_call(call, took);
        #[cfg(not(feature = "metrics"))]
        let _ = (call, took);
    }

    /// `subscription`'s breaker changed to `to` (`closed`, `open`, `half_open`).
    pub(crate) fn breaker_transition(&self, subscription: &str, to: &str) {
        #[cfg(feature = "metrics")]
        self.families.breaker_transition(subscription, to);
        #[cfg(not(feature = "metrics"))]
        let _ = (subscription, to);
    }

    /// `n` dead letters got `action` (`retry`, `resolve`, `abandon`, `purge`) from an actor of
    /// `actor_kind`.
    pub(crate) fn dead_letter_action(&self, action: &str, actor_kind: &str, n: u64) {
        #[cfg(feature = "metrics")]
        self.families.dead_letter_action(action, actor_kind, n);
        #[cfg(not(feature = "metrics"))]
        let _ = (action, actor_kind, n);
    }

    /// A replay handled `n` events with `result` (`replayed`, `skipped`, `error`).
    pub(crate) fn replay_events(&self, result: &str, n: u64) {
        #[cfg(feature = "metrics")]
        self.families.replay_events(result, n);
        #[cfg(not(feature = "metrics"))]
        let _ = (result, n);
    }

    /// A replay ended with `status` (`completed`, `failed`, `cancelled`).
    pub(crate) fn replay_finished(&self, status: &str) {
        #[cfg(feature = "metrics")]
        self.families.replay_finished(status);
        #[cfg(not(feature = "metrics"))]
        let _ = status;
    }

    /// The Prometheus text of every family, gauges set from `input` (the OpenMetrics text
    /// format, which Prometheus reads; serve it as [`CONTENT_TYPE`]).
    #[cfg(feature = "metrics")]
    pub fn encode(&self, input: &ScrapeInput) -> crate::Result<String> {
        self.families.encode(input)
    }
}

/// How long a scrape waits for the store's gauges before it reports the store down
/// (`store_up 0`) with the last values read: less than Prometheus's default scrape timeout
/// (10 s), so a store that hangs does not take the counters down with it.
pub const GAUGE_READ_LIMIT: Duration = Duration::from_secs(5);

/// The content type of the text `Telemetry::encode` makes.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The buckets of the latency histograms (seconds): 0.5 ms to about 16 s, doubling.
pub const LATENCY_BUCKETS: [f64; 16] = [
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048,
    4.096, 8.192, 16.384,
];

/// The buckets of the store-call histogram (seconds): 50 µs to about 1.6 s, doubling.
pub const STORE_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512,
    0.1024, 0.2048, 0.4096, 0.8192, 1.6384,
];

/// The buckets of the time-to-done histogram (seconds): a delivery at once up to one that
/// took a day of retries.
pub const PROCESSING_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 21600.0,
    86400.0,
];

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    fn holding(pending: u64) -> StoreGauges {
        StoreGauges {
            pending,
            ..StoreGauges::default()
        }
    }

    #[test]
    fn a_failed_refresh_keeps_the_last_reading_and_its_time() {
        let t = Telemetry::gauges_only(MetricsConfig::default(), StoreKind::Sqlite);
        // No reading yet: zeros, aged to the failure itself.
        let r = t.keep_failure(Timestamp(1_000));
        assert!(!r.up);
        assert_eq!((r.gauges.pending, r.as_of), (0, Timestamp(1_000)));
        t.keep_gauges(Timestamp(2_000), holding(5));
        let r = t.keep_failure(Timestamp(30_000));
        assert!(!r.up);
        assert_eq!((r.gauges.pending, r.as_of), (5, Timestamp(2_000)));
        // Cached as a failure, still aged to the last good read.
        let c = t.cached_gauges(Timestamp(40_000)).unwrap();
        assert!(!c.up);
        assert_eq!((c.gauges.pending, c.as_of), (5, Timestamp(2_000)));
        // Past the refresh interval the cache is stale.
        assert!(t.cached_gauges(Timestamp(45_000)).is_none());
    }

    #[test]
    fn a_slow_failure_does_not_overwrite_a_newer_reading() {
        let t = Telemetry::gauges_only(MetricsConfig::default(), StoreKind::Sqlite);
        // A read started at 1 s timed out; meanwhile a scrape at 3 s read the store.
        t.keep_gauges(Timestamp(3_000), holding(7));
        let r = t.keep_failure(Timestamp(1_000));
        assert!(r.up, "the newer reading stands");
        assert_eq!((r.gauges.pending, r.as_of), (7, Timestamp(3_000)));
        let c = t.cached_gauges(Timestamp(4_000)).unwrap();
        assert!(c.up);
        assert_eq!((c.gauges.pending, c.as_of), (7, Timestamp(4_000)));
    }
}

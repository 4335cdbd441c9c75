//! Building an [`EventBus`].

#[cfg(feature = "sqlite")]
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::bus::EventBus;
use crate::clock::{Clock, SystemClock};
use crate::config::BusConfig;
use crate::error::{Error, Result};
use crate::retry::RetryPolicy;
use crate::store::Store;
#[cfg(feature = "postgres")]
use crate::store::postgres::{PgOptions, PgStore};
#[cfg(feature = "sqlite")]
use crate::store::sqlite::{Durability, SqliteOptions, SqliteStore};

enum Source {
    None,
    #[cfg(feature = "sqlite")]
    Sqlite(PathBuf, SqliteOptions),
    #[cfg(feature = "postgres")]
    Postgres(String, PgOptions),
    #[cfg(feature = "postgres")]
    PgPool(sqlx::PgPool, PgOptions),
    /// A target whose store this build cannot open.
    #[cfg_attr(all(feature = "sqlite", feature = "postgres"), allow(dead_code))]
    Unsupported(String),
    Store(Arc<dyn Store>),
}

/// Builds an [`EventBus`]: choose a store, then change any setting of [`BusConfig`].
#[must_use]
pub struct BusBuilder {
    source: Source,
    /// The clock asked for; `None`: the store's own, else the system clock.
    clock: Option<Arc<dyn Clock>>,
    config: BusConfig,
    #[cfg(feature = "sqlite")]
    durability: Option<Durability>,
}

impl Default for BusBuilder {
    fn default() -> Self {
        BusBuilder {
            source: Source::None,
            clock: None,
            config: BusConfig::default(),
            #[cfg(feature = "sqlite")]
            durability: None,
        }
    }
}

impl BusBuilder {
    /// Uses the SQLite file at `path`, created if missing.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(mut self, path: impl Into<PathBuf>) -> Self {
        self.source = Source::Sqlite(path.into(), SqliteOptions::default());
        self
    }

    /// Uses a private in-memory SQLite database (see
    /// [`SqliteStore::in_memory`](crate::SqliteStore::in_memory)); the same as
    /// `sqlite(":memory:")`.
    #[cfg(feature = "sqlite")]
    pub fn in_memory(self) -> Self {
        self.sqlite(":memory:")
    }

    /// Uses the SQLite file at `path` with these store options.
    #[cfg(feature = "sqlite")]
    pub fn sqlite_with(mut self, path: impl Into<PathBuf>, options: SqliteOptions) -> Self {
        self.source = Source::Sqlite(path.into(), options);
        self
    }

    /// Uses the PostgreSQL database at `url` (`postgres://user@host:port/db`), tables in the
    /// `durabus` schema.
    #[cfg(feature = "postgres")]
    pub fn postgres(self, url: impl Into<String>) -> Self {
        self.postgres_with(url, PgOptions::default())
    }

    /// Uses the PostgreSQL database at `url` with these store options (schema, pool size,
    /// lease).
    #[cfg(feature = "postgres")]
    pub fn postgres_with(mut self, url: impl Into<String>, options: PgOptions) -> Self {
        self.source = Source::Postgres(url.into(), options);
        self
    }

    /// Uses the application's own PostgreSQL pool (no second pool is opened; shutting the
    /// bus down leaves the pool open), tables in `options.schema` (see
    /// [`PgStore::from_pool`](crate::PgStore::from_pool)).
    #[cfg(feature = "postgres")]
    pub fn postgres_pool(mut self, pool: sqlx::PgPool, options: PgOptions) -> Self {
        self.source = Source::PgPool(pool, options);
        self
    }

    /// Uses `target`: a `postgres://` or `postgresql://` URL selects PostgreSQL, anything else
    /// is an SQLite file path. This is what the CLI's `--db` does.
    pub fn database(mut self, target: &str) -> Self {
        let is_pg = target.starts_with("postgres://") || target.starts_with("postgresql://");
        self.source = if is_pg {
            #[cfg(feature = "postgres")]
            {
                Source::Postgres(target.to_owned(), PgOptions::default())
            }
            #[cfg(not(feature = "postgres"))]
            {
                Source::Unsupported(
                    "a postgres:// URL needs durabus built with the `postgres` feature".into(),
                )
            }
        } else {
            #[cfg(feature = "sqlite")]
            {
                Source::Sqlite(PathBuf::from(target), SqliteOptions::default())
            }
            #[cfg(not(feature = "sqlite"))]
            {
                Source::Unsupported(
                    "an SQLite path needs durabus built with the `sqlite` feature".into(),
                )
            }
        };
        self
    }

    /// Sets the commit durability of the SQLite store the builder opens, whether set before or
    /// after [`sqlite`](Self::sqlite). Defaults to [`Durability::Normal`]. With
    /// [`store`](Self::store) it is an error: set it when opening that store.
    #[cfg(feature = "sqlite")]
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = Some(durability);
        self
    }

    /// Uses an already opened store.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.source = Source::Store(store);
        self
    }

    /// Uses this clock (a [`ManualClock`](crate::ManualClock) in tests), as it reads. Defaults
    /// to the store's: on PostgreSQL the database server's clock (the system clock corrected by
    /// its measured offset, see [`OffsetClock`](crate::OffsetClock)), on SQLite the system
    /// clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Replaces the whole configuration.
    pub fn config(mut self, config: BusConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the default retry policy.
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.config.retry = retry;
        self
    }

    /// Sets the default handler timeout (30 s unless set).
    pub fn handler_timeout(mut self, timeout: Duration) -> Self {
        self.config.handler_timeout = timeout;
        self
    }

    /// Sets how long shutdown waits for in-flight dispatches (30 s unless set).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// Sets the payload size limit in bytes (1 MiB unless set).
    pub fn max_payload_bytes(mut self, limit: usize) -> Self {
        self.config.max_payload_bytes = limit;
        self
    }

    /// Sets how many events the workers deliver at once (16 unless set).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Sets the most events one claim takes (256 unless set).
    pub fn claim_batch(mut self, n: usize) -> Self {
        self.config.claim_batch = n;
        self
    }

    /// Sets how many events a claim takes beyond the free delivery slots (16 unless set).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.config.prefetch = n;
        self
    }

    /// Sets the circuit breaker thresholds (see [`BreakerConfig`] for the defaults).
    pub fn breaker(mut self, breaker: BreakerConfig) -> Self {
        self.config.breaker = breaker;
        self
    }

    /// Sets when dead letters are retried automatically (1 h, 6 h, 24 h unless set; see
    /// [`DeadLetterPolicy`](crate::DeadLetterPolicy)).
    pub fn dead_letters(mut self, policy: crate::DeadLetterPolicy) -> Self {
        self.config.dead_letters = policy;
        self
    }

    /// Sets the maintenance jobs a started bus runs (see
    /// [`SchedulerConfig`](crate::SchedulerConfig)).
    pub fn scheduler(mut self, scheduler: crate::SchedulerConfig) -> Self {
        self.config.scheduler = scheduler;
        self
    }

    /// Turns automatic payload snapshots on or off (off unless set; see
    /// [`BusConfig::payload_snapshots`](crate::BusConfig::payload_snapshots)).
    pub fn payload_snapshots(mut self, on: bool) -> Self {
        self.config.payload_snapshots = on;
        self
    }

    /// Sets the Prometheus metrics' prefix and gauge cache (see
    /// [`MetricsConfig`](crate::MetricsConfig); `durabus_` and 15 s unless set).
    pub fn metrics(mut self, metrics: crate::MetricsConfig) -> Self {
        self.config.metrics = metrics;
        self
    }

    /// Makes the bus deliver events or not (it does unless set; see
    /// [`BusConfig::deliver`](crate::BusConfig::deliver)). `deliver(false)` gives an
    /// operations-only bus: jobs and operations run, no event is claimed.
    pub fn deliver(mut self, on: bool) -> Self {
        self.config.deliver = on;
        self
    }

    /// Calls `f` with every error the bus meets in the background: a store write that failed
    /// and will be retried, a recovery failure, a dropped listener connection, a job or an
    /// operation that failed (see [`ErrorHook`](crate::ErrorHook)). The place to hook alerting.
    pub fn on_error(self, f: impl Fn(&crate::BusError<'_>) + Send + Sync + 'static) -> Self {
        self.config.on_error.set(f);
        self
    }

    /// Also hands every handler failure to the [`on_error`](Self::on_error) hook (off by
    /// default): a failed attempt, with [`ErrorSource::Handler`](crate::ErrorSource::Handler)
    /// naming the event, type, subscription and attempt, an error of kind
    /// [`ErrorKind::Handler`](crate::ErrorKind::Handler), and `retrying` false when the event
    /// was dead-lettered. For sending the application's own failures to an error tracker.
    pub fn report_handler_failures(self, on: bool) -> Self {
        self.config.on_error.hear_handler_failures(on);
        self
    }

    /// Sets the worker loop's pause after a failed claim (see
    /// [`BusConfig::error_backoff`](crate::BusConfig::error_backoff): 20 ms doubling to 2.56 s
    /// unless set).
    pub fn error_backoff(mut self, backoff: crate::config::Backoff) -> Self {
        self.config.error_backoff = backoff;
        self
    }

    /// Sets the fallback poll interval (500 ms unless set).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// Sets how often a started bus reads the active pauses (500 ms unless set; see
    /// [`BusConfig::pause_refresh`](crate::BusConfig::pause_refresh)).
    pub fn pause_refresh(mut self, every: Duration) -> Self {
        self.config.pause_refresh = every;
        self
    }

    /// Validates the settings, opens the store and returns the bus (not yet started).
    pub async fn build(self) -> Result<EventBus> {
        self.config.validate()?;
        let store: Arc<dyn Store> = match self.source {
            Source::None => {
                return Err(Error::invalid(
                    "store",
                    "no store chosen",
                    "call .database(url_or_path), .sqlite(path), .postgres(url) or .store(store) on the builder",
                ));
            }
            #[cfg(feature = "sqlite")]
            Source::Sqlite(path, mut options) => {
                if let Some(d) = self.durability {
                    options.durability = d;
                }
                Arc::new(SqliteStore::open(path, options).await?)
            }
            #[cfg(feature = "postgres")]
            Source::Postgres(url, options) => {
                #[cfg(feature = "sqlite")]
                if self.durability.is_some() {
                    return Err(pg_durability());
                }
                Arc::new(PgStore::connect(&url, options).await?)
            }
            #[cfg(feature = "postgres")]
            Source::PgPool(pool, options) => {
                #[cfg(feature = "sqlite")]
                if self.durability.is_some() {
                    return Err(pg_durability());
                }
                Arc::new(PgStore::from_pool(pool, options).await?)
            }
            Source::Unsupported(why) => {
                return Err(Error::invalid(
                    "database",
                    why,
                    "a store this build has (features `sqlite`, `postgres`)",
                ));
            }
            Source::Store(store) => {
                #[cfg(feature = "sqlite")]
                if self.durability.is_some() {
                    return Err(Error::invalid(
                        "durability",
                        "set on the builder of a store passed to store()",
                        "durability on a store the builder opens; for a store passed in, its own options' durability",
                    ));
                }
                store
            }
        };
        store.set_error_hook(self.config.on_error.clone());
        // On PostgreSQL, the server's clock unless a clock was given.
        let clock = self
            .clock
            .or_else(|| store.clock())
            .unwrap_or_else(|| Arc::new(SystemClock));
        let bus = match EventBus::from_parts(store.clone(), clock, self.config) {
            Ok(bus) => bus,
            Err(e) => {
                let _ = store.close().await;
                return Err(e);
            }
        };
        if bus.config().payload_snapshots {
            // The publish path reads the configuration without waiting: load it now.
            bus.load_payload_configs().await?;
        }
        Ok(bus)
    }
}

/// Durability asked of a PostgreSQL store.
#[cfg(all(feature = "sqlite", feature = "postgres"))]
fn pg_durability() -> Error {
    Error::invalid(
        "durability",
        "set for PostgreSQL, whose commits follow its own synchronous_commit setting",
        "durability on an SQLite store only",
    )
}

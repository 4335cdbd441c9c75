//! Where a scenario's events live: a SQLite file or a PostgreSQL schema, and the bus a child or
//! the checker opens on it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use durabus::{BreakerConfig, BusBuilder, EventBus, PgOptions, RetryPolicy, SchedulerConfig};

/// A store the suite runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A schema of a PostgreSQL database.
    Postgres {
        /// Connection URL.
        url: String,
        /// Schema (created by the bus).
        schema: String,
    },
}

impl Target {
    /// `sqlite:<path>` or `pg:<schema>@<url>`.
    pub fn parse(s: &str) -> anyhow::Result<Target> {
        if let Some(path) = s.strip_prefix("sqlite:") {
            return Ok(Target::Sqlite(path.into()));
        }
        if let Some(rest) = s.strip_prefix("pg:") {
            let (schema, url) = rest.split_once('@').context("pg:<schema>@<url>")?;
            return Ok(Target::Postgres {
                url: url.to_owned(),
                schema: schema.to_owned(),
            });
        }
        bail!("unknown target {s:?}: sqlite:<path> or pg:<schema>@<url>")
    }

    /// The form [`parse`](Self::parse) reads.
    pub fn arg(&self) -> String {
        match self {
            Target::Sqlite(p) => format!("sqlite:{}", p.display()),
            Target::Postgres { url, schema } => format!("pg:{schema}@{url}"),
        }
    }

    /// A builder on this store with the suite's settings: retries in milliseconds (an event
    /// that always fails is dead-lettered after 3 attempts), no scheduled jobs, breakers that never open, 8 delivery
    /// slots, a 4-event prefetch, and on PostgreSQL leases of `lease`.
    pub fn builder(&self, lease: Duration) -> BusBuilder {
        self.builder_with(lease, None)
    }

    /// [`builder`](Self::builder), with SQLite's wait for the write lock set.
    pub fn builder_with(&self, lease: Duration, lock_timeout: Option<Duration>) -> BusBuilder {
        // Bulk operations start within 50 ms (the fail-point scenario submits them).
        let b = EventBus::builder().config(durabus::BusConfig {
            operations_poll: Duration::from_millis(50),
            ..durabus::BusConfig::default()
        });
        let b = match self {
            Target::Sqlite(path) => match lock_timeout {
                Some(lock_timeout) => b.sqlite_with(
                    path,
                    durabus::SqliteOptions {
                        lock_timeout,
                        ..durabus::SqliteOptions::default()
                    },
                ),
                None => b.sqlite(path),
            },
            Target::Postgres { url, schema } => b.postgres_with(
                url.clone(),
                PgOptions {
                    schema: schema.clone(),
                    lease,
                    max_connections: 6,
                    ..PgOptions::default()
                },
            ),
        };
        b.poll_interval(Duration::from_millis(20))
            .concurrency(SLOTS)
            .prefetch(PREFETCH)
            .retry_policy(RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(2),
                max_delay: Duration::from_millis(20),
                backoff_multiplier: 2.0,
            })
            // Breakers never open: a subscription whose every event fails would otherwise be
            // paused again and again, and the drain would take minutes. (Their deferrals are
            // tested by the contract suite.)
            .breaker(BreakerConfig {
                min_samples: 1_000_000,
                ..BreakerConfig::default()
            })
            .scheduler(SchedulerConfig {
                enabled: false,
                ..SchedulerConfig::default()
            })
    }

    /// Opens a bus that neither delivers nor runs jobs: for reading the store.
    pub async fn reader(&self) -> anyhow::Result<EventBus> {
        Ok(self
            .builder(Duration::from_secs(30))
            .deliver(false)
            .build()
            .await?)
    }
}

/// Delivery slots of a child's bus.
pub const SLOTS: usize = 8;
/// Events a child's bus claims beyond its free slots.
pub const PREFETCH: usize = 4;

/// A small pool on `url` for the suite's own reads. A URL of several servers
/// (`host1:port1,host2:port2`, as in the failover scenario) is read on the first that is not
/// a standby.
pub async fn pg_pool(url: &str) -> anyhow::Result<durabus::sqlx::PgPool> {
    let options = || durabus::sqlx::postgres::PgPoolOptions::new().max_connections(2);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(options().connect(url).await?);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (user, list) = match authority.rsplit_once('@') {
        Some((u, l)) => (format!("{u}@"), l),
        None => (String::new(), authority),
    };
    if !list.contains(',') {
        return Ok(options().connect(url).await?);
    }
    // The one parameter sqlx does not take.
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let query: Vec<&str> = query
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("target_session_attrs="))
        .collect();
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let mut why = Vec::new();
    for host in list.split(',') {
        let one = format!("{scheme}://{user}{host}{path}{query}");
        // A server that is down refuses at once; sqlx would try again for 30 s.
        let attempt = options().acquire_timeout(Duration::from_secs(2));
        match attempt.connect(&one).await {
            Ok(pool) => {
                let standby: bool = durabus::sqlx::query_scalar("SELECT pg_is_in_recovery()")
                    .fetch_one(&pool)
                    .await?;
                if !standby {
                    return Ok(pool);
                }
                pool.close().await;
                why.push(format!("{host}: a standby"));
            }
            Err(e) => why.push(format!("{host}: {e}")),
        }
    }
    bail!("no primary among {list}: {}", why.join("; "))
}

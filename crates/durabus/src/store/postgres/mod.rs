//! The PostgreSQL store: many worker processes on many hosts share one queue.
//!
//! Workers claim due events in batches with `FOR UPDATE SKIP LOCKED`, so no two take the same
//! row. A claim gives the worker a lease: its identity (`lease_owner`), a fresh `lease_token`
//! and an expiry, renewed by a heartbeat while its handlers run. When a worker dies, its lease
//! runs out and any other worker reclaims the events, counting the interrupted attempt. A
//! completion is written only by the holder of the current token (fencing): a worker that
//! stalled past its lease cannot overwrite the outcome of the worker that took over.
//! Publishing sends `NOTIFY`, so idle workers in other processes wake at once; if the listening
//! connection drops, workers poll until it is back.

mod breakers;
mod cancels;
mod dead_letter_act;
mod dead_letter_rows;
mod dead_letter_writes;
mod dead_letters;
mod dedup;
mod error;
mod events;
pub mod gauges;
mod heartbeat;
mod hosts;
mod insert;
mod jobs;
mod keys;
mod listen;
pub(crate) mod liveness;
mod operations;
mod options;
mod outbox;
mod pauses;
mod payloads;
mod periodic;
mod pool;
mod queries;
mod rates;
mod record;
mod rows;
mod schema;
mod slot_rows;
mod slots;
mod sql;
mod sql_ops;
mod statistics;
mod subscriptions;
mod tx;
mod walk;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{Postgres, Row};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use options::{DEFAULT_SCHEMA, PgOptions, validate_schema};

/// The claim statement on schema `s` (quoted, as the gauge statements take it), public for the
/// query-plan test. Its parameters: `$1` now (ms), `$2` the limit, `$3` the worker, `$4` the
/// lease token, `$5` the lease (ms), `$6` the tokens this process holds, `$7`–`$9` what an
/// interrupted attempt costs, `$10` the lease's start (ms).
pub fn claim_statement(s: &str) -> String {
    sql::PgSql::new(s).claim
}
pub use outbox::PgOutbox;
pub use schema::SCHEMA_VERSION;

use self::options::worker_identity;
use self::sql::PgSql;
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::{Backend, StoreLifecycle, sealed};
use crate::sync::lock;

/// A [`Store`](crate::Store) on a PostgreSQL database.
#[derive(Debug)]
pub struct PgStore {
    pool: pool::Pool,
    sql: Arc<PgSql>,
    schema: String,
    channel: String,
    worker: String,
    lease_ms: i64,
    lease: Duration,
    /// The lease token of each event this process holds: completions carry it (fencing).
    held: Arc<Mutex<HashMap<EventId, Uuid>>>,
    inserter: insert::Inserter,
    /// Requests for the group-commit task; taken on close.
    inserts: Mutex<Option<tokio::sync::mpsc::UnboundedSender<insert::Request>>>,
    wake: Arc<Notify>,
    closed: AtomicBool,
    listener: Mutex<Option<JoinHandle<()>>>,
    /// The lease heartbeat, started by [`StoreLifecycle::start_background`].
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// With a URL of several servers: keeps the pool on one that suits (see `hosts`).
    follower: Mutex<Option<JoinHandle<()>>>,
    /// Where the listener's and the heartbeat's errors go besides `tracing`.
    hook: crate::hook::ErrorHook,
    /// Whether the pool is the store's own (closed with it) or the application's.
    owns_pool: bool,
    /// The server's clock as this process reads it (measured at connect and each heartbeat).
    clock: crate::clock::OffsetClock,
    /// Keeps the events table's planner statistics fresh while a backlog builds.
    analyser: statistics::Analyser,
}

/// A query on SQL built at run time (statements with the schema name filled in).
pub(super) fn q(sql: &str) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(sql))
}

pub(super) fn json_list(items: &[String]) -> Result<Option<String>> {
    if items.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(items)
        .map(Some)
        .map_err(|e| Error::unserialisable("a list of strings", &e))
}

/// The server-side limits on the store's own connections, for a client that vanishes (a
/// network partition, a frozen host): a transaction left idle, or data the client stops
/// acknowledging, ends the session after this long, so its row locks do not keep other
/// workers from taking over its events once their leases run out (they skip locked rows).
/// The lease, within 2 s (no live transaction of the store's idles that long) and 60 s.
pub(super) fn vanished_client_limit(lease: Duration) -> Duration {
    lease.clamp(Duration::from_secs(2), Duration::from_secs(60))
}

/// The startup options that set [`vanished_client_limit`] for a session.
fn session_timeouts(lease: Duration) -> [(&'static str, String); 2] {
    let ms = vanished_client_limit(lease).as_millis().to_string();
    [
        ("idle_in_transaction_session_timeout", ms.clone()),
        ("tcp_user_timeout", ms),
    ]
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`), creating the schema
    /// and migrating it (safe when many workers start at once). Fails with
    /// [`Error::Unavailable`] when PostgreSQL cannot be reached within
    /// [`PgOptions::acquire_timeout`].
    ///
    /// For a primary with standbys, `url` may list several servers, as libpq takes them:
    /// `postgres://user@db1:5432,db2:5432/app?target_session_attrs=read-write` (or `primary`,
    /// or `any`, the default). The store uses the first server of the list that suits, and
    /// while it is open checks every 250 ms that the server still does: when it died or became
    /// a standby, the store moves its connections to the first server that suits then (a
    /// promoted standby). Statements in flight at the moment of a failover fail (nothing they
    /// wrote is acknowledged); the next ones go to the new primary. See the operations guide
    /// for what a failover keeps and loses.
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore> {
        validate_schema(&options.schema)?;
        if options.lease < Duration::from_millis(30) {
            return Err(Error::invalid(
                "lease",
                format!("{:?}", options.lease),
                "at least 30 ms (heartbeats renew it every third of it)",
            ));
        }
        if options.max_connections < 2 {
            return Err(Error::invalid(
                "max_connections",
                format!("{}", options.max_connections),
                "at least 2",
            ));
        }
        let bad_url = |c| {
            Error::invalid(
                "database",
                format!("not a PostgreSQL URL: {c}"),
                "postgres://user@host:port/database",
            )
        };
        let worker = worker_identity();
        let schema = options.schema.clone();
        // Operators (and tests) find a worker's connections by name in pg_stat_activity.
        let name: String = format!("durabus {schema} {worker}")
            .chars()
            .take(63)
            .collect();
        let ours = |c: PgConnectOptions| {
            c.application_name(&name)
                .options(session_timeouts(options.lease))
        };
        // A list of servers: the first that suits, followed while the store is open.
        let hosts = hosts::parse(url).map_err(bad_url)?.map(|mut h| {
            h.candidates = h.candidates.into_iter().map(ours).collect();
            h
        });
        let (connect, found) = match &hosts {
            Some(h) => {
                let (i, probe) = h
                    .find()
                    .await
                    .map_err(|why| Error::Unavailable { source: why.into() })?;
                (h.candidates[i].clone(), Some((i, probe)))
            }
            None => {
                let c: PgConnectOptions = url
                    .parse()
                    .map_err(|e: sqlx::Error| bad_url(e.to_string()))?;
                (ours(c), None)
            }
        };
        let need = hosts.as_ref().map_or(hosts::Need::Any, |h| h.need);
        let moved = Arc::new(hosts::Moved::default());
        let stale = moved.clone();
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            // Not a ping before every statement: only where a connection may have broken
            // while idle (see `liveness`).
            .test_before_acquire(false)
            .before_acquire(move |conn, meta| {
                // Opened to the server the pool used before it moved (see `hosts`).
                let predates = stale.predates(meta.age);
                Box::pin(async move {
                    if predates {
                        return Ok(false);
                    }
                    if liveness::must_ping(meta.idle_for)
                        && let Err(e) = sqlx::Connection::ping(conn).await
                    {
                        // The others idle beside it may be dead too.
                        liveness::note(&e);
                        return Err(e);
                    }
                    Ok(true)
                })
            })
            // With `target_session_attrs`, a server that became a standby is refused.
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if hosts::suits(conn, need).await? {
                        Ok(())
                    } else {
                        Err(sqlx::Error::Protocol(
                            "the server is read-only (a standby?) and the URL's target_session_attrs asks for one that is not".into(),
                        ))
                    }
                })
            })
            .connect_with(connect)
            .await
            .map_err(|e| match e {
                sqlx::Error::Configuration(c) => bad_url(c.to_string()),
                other => Error::from(other),
            })?;
        let follower = match (hosts, found) {
            (Some(hosts), Some((current, probe))) => {
                Some(hosts::follow(pool.clone(), hosts, current, probe, moved))
            }
            _ => None,
        };
        let store = PgStore::with_pool(pool, options, worker, true).await?;
        *lock(&store.follower) = follower.map(tokio::spawn);
        Ok(store)
    }

    /// A store on the application's own pool (no second pool is opened): durabus's statements
    /// share its connections, and [`close`](StoreLifecycle::close) leaves the pool open. The
    /// `LISTEN` connection is opened with the pool's connect options. `options.max_connections`
    /// and `acquire_timeout` do not apply (the pool has its own). Creates and migrates the
    /// schema like [`connect`](Self::connect).
    pub async fn from_pool(pool: PgPool, options: PgOptions) -> Result<PgStore> {
        validate_schema(&options.schema)?;
        if options.lease < Duration::from_millis(30) {
            return Err(Error::invalid(
                "lease",
                format!("{:?}", options.lease),
                "at least 30 ms (heartbeats renew it every third of it)",
            ));
        }
        PgStore::with_pool(pool, options, worker_identity(), false).await
    }

    async fn with_pool(
        pool: PgPool,
        options: PgOptions,
        worker: String,
        owns_pool: bool,
    ) -> Result<PgStore> {
        let pool = pool::Pool::new(pool);
        let schema = options.schema.clone();
        let quoted = format!("\"{schema}\"");
        if options.create {
            schema::migrate(&pool, &schema, &quoted).await?;
        } else {
            let ours: bool = sqlx::query("SELECT to_regclass($1) IS NOT NULL")
                .bind(format!("{quoted}.meta"))
                .fetch_one(pool.inner())
                .await?
                .try_get(0)?;
            if !ours {
                if owns_pool {
                    pool.close().await;
                }
                return Err(Error::NotADatabase {
                    path: format!("schema {schema}"),
                    reason: "it holds no durabus tables (is the schema right? see --schema)".into(),
                });
            }
            // An inspection tool on an older schema brings it up to date, as on SQLite (it
            // never creates a schema that holds no durabus tables).
            schema::migrate(&pool, &schema, &quoted).await?;
        }
        let clock = crate::clock::OffsetClock::default();
        if let Err(e) = heartbeat::measure_clock(pool.inner(), &clock).await {
            if owns_pool {
                pool.close().await;
            }
            return Err(e);
        }
        let wake = Arc::new(Notify::new());
        let channel = format!("durabus_{schema}");
        let hook = crate::hook::ErrorHook::default();
        let listener = options.listen.then(|| {
            tokio::spawn(listen::run(
                pool.inner().clone(),
                channel.clone(),
                worker.clone(),
                wake.clone(),
                hook.clone(),
            ))
        });
        let lease_ms = i64::try_from(options.lease.as_millis()).unwrap_or(i64::MAX);
        let sql = Arc::new(PgSql::new(&quoted));
        let held = Arc::new(Mutex::new(HashMap::new()));
        let inserter = insert::Inserter {
            pool: pool.clone(),
            sql: sql.clone(),
            channel: channel.clone(),
            worker: worker.clone(),
            lease_ms,
            held: held.clone(),
            wake: wake.clone(),
            slots: Arc::new(tokio::sync::Semaphore::new(insert::IN_FLIGHT)),
            queued: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        };
        let (inserts, requests) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(insert::run(inserter.clone(), requests));
        Ok(PgStore {
            sql,
            pool,
            inserter,
            inserts: Mutex::new(Some(inserts)),
            schema,
            channel,
            worker,
            lease_ms,
            lease: options.lease,
            held,
            wake,
            closed: AtomicBool::new(false),
            listener: Mutex::new(listener),
            heartbeat: Mutex::new(None),
            follower: Mutex::new(None),
            hook,
            owns_pool,
            clock,
            analyser: statistics::Analyser::default(),
        })
    }

    /// The database server's clock as this process reads it: the system clock plus the offset
    /// measured when the store connected and at every lease heartbeat. A bus on this store
    /// reads it unless given a clock; an application writing through the
    /// [`outbox`](Self::outbox) can pass its `now()` too.
    pub fn server_clock(&self) -> crate::clock::OffsetClock {
        self.clock.clone()
    }

    /// This process's identity, recorded as `lease_owner` on the events it holds.
    pub fn worker_id(&self) -> &str {
        &self.worker
    }

    /// The schema holding the bus's tables.
    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// The connection pool, for applications that share it.
    pub fn pool(&self) -> &PgPool {
        self.pool.inner()
    }

    /// A [`PgOutbox`] writing into this store's tables inside the application's own `sqlx`
    /// transactions.
    pub fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.sql.clone(), self.channel.clone())
    }

    /// Runs a store call; if it failed because a connection broke, every connection idle since
    /// is pinged before its next use (see `liveness`).
    async fn noted<T>(&self, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        let result = call.await;
        if let Err(e) = &result {
            liveness::note_error(e);
        }
        result
    }

    fn check(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::StoreClosed)
        } else {
            Ok(())
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<EventId, Uuid>> {
        lock(&self.held)
    }

    /// The distinct lease tokens of the events this process holds.
    fn held_tokens(&self) -> Vec<Uuid> {
        let mut tokens: Vec<Uuid> = self.held().values().copied().collect();
        tokens.sort_unstable();
        tokens.dedup();
        tokens
    }

    /// Tells other processes' workers that events became due. Best effort: the write it
    /// follows has committed, and workers poll anyway.
    async fn notify_others(&self) {
        // Sent as this store: its own dispatcher was woken already.
        let sent = match self.pool.acquire().await {
            Ok(mut conn) => sqlx::query("SELECT pg_notify($1, $2)")
                .bind(&self.channel)
                .bind(&self.worker)
                .execute(&mut *conn)
                .await
                .map(drop),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            liveness::note(&e);
            tracing::debug!(error = %e, "NOTIFY failed; other workers find the events by polling");
        }
    }
}

impl sealed::Sealed for PgStore {}

#[async_trait]
impl StoreLifecycle for PgStore {
    fn backend(&self) -> Backend<'_> {
        Backend::Postgres(self)
    }

    fn wakeups(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    fn start_background(&self, clock: Arc<dyn Clock>) {
        let mut beat = lock(&self.heartbeat);
        if beat.is_none() && !self.closed.load(Ordering::Acquire) {
            *beat = Some(tokio::spawn(heartbeat::run(
                self.beat(),
                clock,
                self.hook.clone(),
            )));
        }
    }

    fn clock(&self) -> Option<Arc<dyn Clock>> {
        Some(Arc::new(self.clock.clone()))
    }

    fn set_error_hook(&self, hook: crate::hook::ErrorHook) {
        self.hook
            .set(move |e| hook.report(e.source.clone(), e.error, e.retrying));
    }

    async fn close(&self) -> Result<()> {
        self.noted(async {
            if self.closed.swap(true, Ordering::AcqRel) {
                return Ok(());
            }
            drop(lock(&self.inserts).take());
            for task in [
                lock(&self.listener).take(),
                lock(&self.heartbeat).take(),
                lock(&self.follower).take(),
            ]
            .into_iter()
            .flatten()
            {
                task.abort();
            }
            // Anything still held belongs to handlers abandoned at a drain timeout: they may still
            // be running, so their leases are left to run out (no heartbeat renews them now) and
            // other workers take them over then.
            self.held().clear();
            if self.owns_pool {
                self.pool.close().await;
            }
            Ok(())
        })
        .await
    }
}

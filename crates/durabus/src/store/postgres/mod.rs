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

mod insert;
mod listen;
mod options;
mod outbox;
mod record;
mod rows;
mod schema;
mod sql;

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
pub use outbox::PgOutbox;
pub use schema::SCHEMA_VERSION;

use self::options::worker_identity;
use self::sql::PgSql;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, NewEvent};
use crate::store::{
    EventQuery, InsertMode, Outcome, RetryCount, StatusCount, Store, SubscriptionRow,
};

/// A [`Store`] on a PostgreSQL database.
#[derive(Debug)]
pub struct PgStore {
    pool: PgPool,
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
}

/// A query on SQL built at run time (statements with the schema name filled in).
pub(super) fn q(sql: &str) -> sqlx::query::Query<'static, Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sqlx::AssertSqlSafe(sql))
}

pub(super) fn json_list(items: &[String]) -> Option<String> {
    if items.is_empty() {
        None
    } else {
        serde_json::to_string(items).ok()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://user@host:port/db`), creating the schema
    /// and migrating it (safe when many workers start at once). Fails with
    /// [`Error::Unavailable`] when PostgreSQL cannot be reached within
    /// [`PgOptions::acquire_timeout`].
    pub async fn connect(url: &str, options: PgOptions) -> Result<PgStore> {
        validate_schema(&options.schema)?;
        if options.lease < Duration::from_millis(30) {
            return Err(Error::InvalidConfig(
                "lease must be at least 30 ms (heartbeats renew it every third of it)".into(),
            ));
        }
        if options.max_connections < 2 {
            return Err(Error::InvalidConfig(
                "max_connections must be at least 2".into(),
            ));
        }
        let bad_url = |c| {
            Error::InvalidConfig(format!(
                "bad PostgreSQL URL: {c}; expected postgres://user@host:port/database"
            ))
        };
        let worker = worker_identity();
        let schema = options.schema.clone();
        let connect: PgConnectOptions = url
            .parse()
            .map_err(|e: sqlx::Error| bad_url(e.to_string()))?;
        // Operators (and tests) find a worker's connections by name in pg_stat_activity.
        let name: String = format!("durabus {schema} {worker}")
            .chars()
            .take(63)
            .collect();
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect.application_name(&name))
            .await
            .map_err(|e| match e {
                sqlx::Error::Configuration(c) => bad_url(c.to_string()),
                other => Error::from(other),
            })?;
        let quoted = format!("\"{schema}\"");
        if options.create {
            schema::migrate(&pool, &schema, &quoted).await?;
        } else {
            let ours: bool = sqlx::query("SELECT to_regclass($1) IS NOT NULL")
                .bind(format!("{quoted}.meta"))
                .fetch_one(&pool)
                .await?
                .try_get(0)?;
            if !ours {
                pool.close().await;
                return Err(Error::NotADatabase {
                    path: format!("schema {schema}"),
                    reason: "it holds no durabus tables (is the schema right? see --schema)".into(),
                });
            }
            schema::check_version(&pool, &quoted).await?;
        }
        let wake = Arc::new(Notify::new());
        let channel = format!("durabus_{schema}");
        let listener = options
            .listen
            .then(|| tokio::spawn(listen::run(pool.clone(), channel.clone(), wake.clone())));
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
        })
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
        &self.pool
    }

    /// A [`PgOutbox`] writing into this store's tables inside the application's own `sqlx`
    /// transactions.
    pub fn outbox(&self) -> PgOutbox {
        PgOutbox::new(self.sql.clone(), self.channel.clone())
    }

    fn check(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::StoreClosed)
        } else {
            Ok(())
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<EventId, Uuid>> {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        let sent = sqlx::query("SELECT pg_notify($1, '')")
            .bind(&self.channel)
            .execute(&self.pool)
            .await;
        if let Err(e) = sent {
            tracing::debug!(error = %e, "NOTIFY failed; other workers find the events by polling");
        }
    }
}

#[async_trait]
impl Store for PgStore {
    async fn insert(
        &self,
        events: Vec<NewEvent>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<bool>> {
        self.check()?;
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = insert::Request {
            events,
            now: now.as_millis(),
            claimed: mode == InsertMode::Claimed,
            reply,
        };
        if request.events.len() > insert::GROUP_MAX_EVENTS {
            self.inserter.write(vec![request]).await;
        } else {
            let sender = self
                .inserts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
                .ok_or(Error::StoreClosed)?;
            sender.send(request).map_err(|_| Error::StoreClosed)?;
        }
        answer.await.map_err(|_| Error::StoreClosed)?
    }

    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>> {
        self.check()?;
        let token = Uuid::now_v7();
        let holding = self.held_tokens();
        let rows = q(&self.sql.claim)
            .bind(now.as_millis())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .bind(&self.worker)
            .bind(token)
            .bind(self.lease_ms)
            .bind(&holding)
            .fetch_all(&self.pool)
            .await?;
        {
            // Held from here on, even if a row fails to decode below: its lease is renewed and
            // it can be released, instead of waiting out the lease.
            let mut held = self.held();
            for row in &rows {
                if let Ok(id) = row.try_get::<Uuid, _>("id") {
                    held.insert(EventId(id), token);
                }
            }
        }
        let mut events = Vec::with_capacity(rows.len());
        let mut reclaimed = 0usize;
        for row in &rows {
            if row.try_get::<bool, _>("reclaimed")? {
                reclaimed += 1;
            }
            events.push(rows::event(row)?);
        }
        if reclaimed > 0 {
            tracing::warn!(
                events = reclaimed,
                worker = %self.worker,
                "reclaimed events whose worker stopped renewing its lease"
            );
        }
        events.sort_by_key(|e| (e.next_attempt_at, e.id));
        Ok(events)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        self.check()?;
        let row = q(&self.sql.next_due).fetch_one(&self.pool).await?;
        Ok(row.try_get::<Option<i64>, _>(0)?.map(Timestamp))
    }

    async fn record(&self, outcome: Outcome, now: Timestamp) -> Result<bool> {
        let flags = self.record_many(vec![outcome], now).await?;
        Ok(flags.first().copied().unwrap_or(false))
    }

    async fn record_many(&self, outcomes: Vec<Outcome>, now: Timestamp) -> Result<Vec<bool>> {
        self.check()?;
        let tokens: Vec<Option<Uuid>> = {
            let held = self.held();
            outcomes
                .iter()
                .map(|o| held.get(&o.id()).copied())
                .collect()
        };
        let mut tx = self.pool.begin().await?;
        let flags = self
            .record_in(&mut tx, &outcomes, &tokens, now.as_millis())
            .await?;
        tx.commit().await?;
        {
            let mut held = self.held();
            for (o, t) in outcomes.iter().zip(&tokens) {
                // Forget the token only if no newer claim replaced it meanwhile.
                if held.get(&o.id()) == t.as_ref() {
                    held.remove(&o.id());
                }
            }
        }
        for (o, ok) in outcomes.iter().zip(&flags) {
            if !ok {
                tracing::warn!(event_id = %o.id(), worker = %self.worker,
                    "outcome not recorded: this worker no longer holds the event's lease");
            }
        }
        if outcomes.iter().any(|o| matches!(o, Outcome::Retry { .. })) {
            self.wake.notify_one();
        }
        Ok(flags)
    }

    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        self.check()?;
        if ids.is_empty() {
            return Ok(0);
        }
        let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
        let n = q(&self.sql.release)
            .bind(&raw)
            .bind(&self.worker)
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?
            .rows_affected();
        {
            let mut held = self.held();
            for id in &ids {
                held.remove(id);
            }
        }
        if n > 0 {
            self.notify_others().await;
            self.wake.notify_one();
        }
        Ok(n)
    }

    async fn recover_processing(&self, now: Timestamp) -> Result<u64> {
        self.check()?;
        let n = q(&self.sql.recover)
            .bind(now.as_millis())
            .bind(self.held_tokens())
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n > 0 {
            self.notify_others().await;
            self.wake.notify_one();
        }
        Ok(n)
    }

    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()> {
        self.check()?;
        let mut tx = self.pool.begin().await?;
        if let Some(name) = &row.name {
            // Processes starting together with one subscription name: one at a time.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(format!("durabus:{}:subscription:{name}", self.schema))
                .execute(&mut *tx)
                .await?;
            q(&self.sql.subscription_free_name)
                .bind(name)
                .bind(&row.id)
                .execute(&mut *tx)
                .await?;
        }
        q(&self.sql.subscription_save)
            .bind(&row.id)
            .bind(&row.name)
            .bind(&row.event_type)
            .bind(row.created_at.as_millis())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.check()?;
        Ok(q(&self.sql.subscription_delete)
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected()
            == 1)
    }

    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>> {
        self.check()?;
        q(&self.sql.subscriptions)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(SubscriptionRow {
                    id: r.try_get(0)?,
                    name: r.try_get(1)?,
                    event_type: r.try_get(2)?,
                    created_at: Timestamp(r.try_get(3)?),
                })
            })
            .collect()
    }

    async fn get_event(&self, id: EventId) -> Result<Option<Event>> {
        self.check()?;
        q(&self.sql.get_event)
            .bind(id.0)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(rows::event)
            .transpose()
    }

    async fn list_events(&self, query: EventQuery) -> Result<Vec<Event>> {
        self.check()?;
        let text = self.sql.list(&query);
        let mut stmt = q(&text);
        if let Some(t) = query.event_type {
            stmt = stmt.bind(t);
        }
        for bound in [query.created_from, query.created_before]
            .into_iter()
            .flatten()
        {
            stmt = stmt.bind(bound.as_millis());
        }
        stmt.bind(i64::try_from(query.limit).unwrap_or(i64::MAX))
            .bind(i64::try_from(query.offset).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(rows::event)
            .collect()
    }

    async fn counts(&self) -> Result<Vec<StatusCount>> {
        self.check()?;
        q(&self.sql.counts)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(StatusCount {
                    event_type: r.try_get(0)?,
                    status: r.try_get::<String, _>(1)?.parse()?,
                    count: u64::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn retry_counts(&self) -> Result<Vec<RetryCount>> {
        self.check()?;
        q(&self.sql.retry_counts)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|r| {
                Ok(RetryCount {
                    status: r.try_get::<String, _>(0)?.parse()?,
                    retry_count: u32::try_from(r.try_get::<i32, _>(1)?).unwrap_or(0),
                    count: u64::try_from(r.try_get::<i64, _>(2)?).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn dlq_retry(&self, id: EventId, now: Timestamp) -> Result<bool> {
        self.check()?;
        let n = q(&self.sql.dlq_retry)
            .bind(id.0)
            .bind(now.as_millis())
            .execute(&self.pool)
            .await?
            .rows_affected();
        if n == 1 {
            self.notify_others().await;
            self.wake.notify_one();
        }
        Ok(n == 1)
    }

    async fn dlq_purge(&self, cutoff: Timestamp) -> Result<u64> {
        self.check()?;
        Ok(q(&self.sql.dlq_purge)
            .bind(cutoff.as_millis())
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn purge_history(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.check()?;
        Ok(q(&self.sql.history_purge)
            .bind(cutoff.as_millis())
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    fn heartbeat_interval(&self) -> Option<Duration> {
        Some(self.lease / 3)
    }

    async fn heartbeat(&self, now: Timestamp) -> Result<()> {
        self.check()?;
        let tokens = self.held_tokens();
        if tokens.is_empty() {
            return Ok(());
        }
        q(&self.sql.renew)
            .bind(&self.worker)
            .bind(now.as_millis().saturating_add(self.lease_ms))
            .bind(&tokens)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn wakeups(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    async fn close(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        drop(
            self.inserts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
        if let Some(task) = self
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            task.abort();
        }
        // Anything still held belongs to handlers abandoned at a drain timeout: they may still
        // be running, so their leases are left to run out (no heartbeat renews them now) and
        // other workers take them over then.
        self.held().clear();
        self.pool.close().await;
        Ok(())
    }
}

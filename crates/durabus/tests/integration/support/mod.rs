//! Test support: backends the contract suite runs against, a harness with a manual clock, and
//! helpers to wait for a condition without sleeping through back-off.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
pub use durabus::Clock;
use durabus::{
    BusBuilder, Event, EventBus, EventId, EventStatus, ManualClock, RetryPolicy, SqliteOptions,
    SqliteStore, Store,
};

/// A database the suite can open, close and open again (to test restarts).
#[async_trait]
pub trait Backend: Send + Sync {
    async fn open(&self) -> Arc<dyn Store>;
    fn name(&self) -> &'static str;
    /// Removes what the test left behind.
    async fn cleanup(&self) {}
    /// What is wrong with the store's own structures at the end of a test (each a sentence;
    /// empty when all holds or the backend has nothing to check).
    async fn broken(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Longer than any store's lease (PostgreSQL's default is 5 minutes): a crashed worker's
/// events are recovered once its lease has run out (SQLite recovers them at once).
pub const PAST_ANY_LEASE: Duration = Duration::from_secs(6 * 60);

/// The PostgreSQL the tests use: `DURABUS_TEST_PG_URL`, by default the local server.
pub fn pg_url() -> String {
    std::env::var("DURABUS_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Whether PostgreSQL is reachable. Unreachable is a failure with `CI=true` and a skip
/// (said on stderr) otherwise.
pub async fn pg_available() -> bool {
    // Asked once per test binary: an unreachable server costs a connect timeout.
    static REACHABLE: tokio::sync::OnceCell<bool> = tokio::sync::OnceCell::const_new();
    *REACHABLE.get_or_init(check_pg).await
}

async fn check_pg() -> bool {
    let reachable = tokio::time::timeout(
        Duration::from_secs(5),
        durabus::sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&pg_url()),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    if !reachable {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "PostgreSQL at {} is unreachable and CI=true requires it",
            pg_url()
        );
        eprintln!("skipped: PostgreSQL at {} is unreachable", pg_url());
    }
    reachable
}

/// A fresh schema name for one test.
pub fn unique_schema() -> String {
    format!("t_{}", durabus::EventId::new().0.simple())
}

/// PostgreSQL, each test in its own schema (dropped at the end) so tests run in parallel.
pub struct PgBackend {
    pub schema: String,
}

#[async_trait]
impl Backend for PgBackend {
    async fn open(&self) -> Arc<dyn Store> {
        let options = durabus::PgOptions {
            schema: self.schema.clone(),
            max_connections: 4,
            ..durabus::PgOptions::default()
        };
        Arc::new(
            durabus::PgStore::connect(&pg_url(), options)
                .await
                .expect("open postgres store"),
        )
    }
    fn name(&self) -> &'static str {
        "postgres"
    }
    async fn cleanup(&self) {
        drop_schema(&self.schema).await;
    }
    async fn broken(&self) -> Vec<String> {
        pg_key_queues_broken(&self.schema).await
    }
}

/// The ordering keys' queues of the PostgreSQL schema `schema`, checked: every unfinished keyed
/// event has its place in `keyed` and every place an unfinished event of that key; behind a
/// key's first place every event waits (pending or scheduled without a due time: never two of
/// a key in flight), and the first is not left waiting for a wake-up that will not come; a held
/// key's first event is dead.
pub async fn pg_key_queues_broken(schema: &str) -> Vec<String> {
    let Ok(pool) = durabus::sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg_url())
        .await
    else {
        return Vec::new();
    };
    let s = format!("\"{schema}\"");
    let exists: bool = durabus::sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM information_schema.tables
                        WHERE table_schema = $1 AND table_name = 'keyed')",
    )
    .bind(schema)
    .fetch_one(&pool)
    .await
    .unwrap_or(false);
    if !exists {
        pool.close().await;
        return Vec::new();
    }
    let checks = [
        (
            "an unfinished keyed event has no place in its key's queue",
            format!(
                "SELECT e.id::text FROM {s}.events AS e
                 WHERE e.ordering_key IS NOT NULL
                     AND e.status IN ('pending', 'scheduled', 'processing')
                     AND NOT EXISTS (SELECT 1 FROM {s}.keyed AS k
                                     WHERE k.event_id = e.id AND k.key = e.ordering_key)"
            ),
        ),
        (
            "a place in a key's queue names no unfinished event of that key",
            format!(
                "SELECT k.event_id::text FROM {s}.keyed AS k
                 LEFT JOIN {s}.events AS e ON e.id = k.event_id
                 WHERE e.id IS NULL OR e.ordering_key IS DISTINCT FROM k.key
                     OR e.status NOT IN ('pending', 'scheduled', 'processing', 'dlq')"
            ),
        ),
        (
            "an event behind its key's first does not wait (two of a key could run)",
            format!(
                "SELECT k.event_id::text FROM {s}.keyed AS k
                 JOIN {s}.events AS e ON e.id = k.event_id
                 WHERE k.seq > (SELECT min(f.seq) FROM {s}.keyed AS f WHERE f.key = k.key)
                     AND NOT (e.status IN ('pending', 'scheduled') AND e.next_attempt_at IS NULL)"
            ),
        ),
        (
            "a key's first event waits for a wake-up (pending or scheduled without a due time)",
            format!(
                "SELECT k.event_id::text FROM {s}.keyed AS k
                 JOIN {s}.events AS e ON e.id = k.event_id
                 WHERE k.seq = (SELECT min(f.seq) FROM {s}.keyed AS f WHERE f.key = k.key)
                     AND e.status IN ('pending', 'scheduled') AND e.next_attempt_at IS NULL"
            ),
        ),
        (
            "a key is held by an event that is not its first, or not dead",
            format!(
                "SELECT k.event_id::text FROM {s}.keyed AS k
                 JOIN {s}.events AS e ON e.id = k.event_id
                 WHERE k.held_since IS NOT NULL
                     AND (e.status <> 'dlq'
                          OR k.seq > (SELECT min(f.seq) FROM {s}.keyed AS f WHERE f.key = k.key))"
            ),
        ),
    ];
    let mut broken = Vec::new();
    for (what, sql) in checks {
        let found: Vec<String> =
            match durabus::sqlx::query_scalar(durabus::sqlx::AssertSqlSafe(sql))
                .fetch_all(&pool)
                .await
            {
                Ok(rows) => rows,
                Err(e) => vec![format!("(the check failed: {e})")],
            };
        if !found.is_empty() {
            broken.push(format!("{what}: {found:?}"));
        }
    }
    pool.close().await;
    broken
}

/// Drops a test's schema.
pub async fn drop_schema(schema: &str) {
    if let Ok(pool) = durabus::sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg_url())
        .await
    {
        let _ = durabus::sqlx::raw_sql(durabus::sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
        )))
        .execute(&pool)
        .await;
        pool.close().await;
    }
}

pub struct SqliteBackend {
    _dir: tempfile::TempDir,
    pub path: PathBuf,
    /// Whether the store looks for commits on the file (its default); off, only its own
    /// writes wake its worker.
    watch: bool,
}

impl SqliteBackend {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("bus.db");
        SqliteBackend {
            _dir: dir,
            path,
            watch: true,
        }
    }
}

#[async_trait]
impl Backend for SqliteBackend {
    async fn open(&self) -> Arc<dyn Store> {
        let mut options = SqliteOptions::default();
        if !self.watch {
            options.watch_interval = None;
        }
        Arc::new(
            SqliteStore::open(&self.path, options)
                .await
                .expect("open sqlite store"),
        )
    }
    fn name(&self) -> &'static str {
        "sqlite"
    }
    async fn broken(&self) -> Vec<String> {
        sqlite_key_lists_broken(&self.path)
    }
}

/// The ordering keys' queues of the SQLite file at `path`, checked: each key's queued events
/// form one list (one head, each other event behind a queued event of its key, no event with
/// two behind it), `key_tails` names each busy key's last event and no other, an event out of
/// its queue points at nothing, and a head is not left waiting for a wake-up that will not
/// come (pending or scheduled without a due time).
pub fn sqlite_key_lists_broken(path: &std::path::Path) -> Vec<String> {
    use rusqlite::{Connection, OpenFlags};
    if !path.exists() {
        return Vec::new();
    }
    let conn = match Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY) {
        Ok(conn) => conn,
        Err(e) => return vec![format!("(the file could not be opened to check it: {e})")],
    };
    let has_events: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE name = 'durabus_events'",
            [],
            |r| r.get(0),
        )
        .unwrap_or(false);
    if !has_events {
        return Vec::new();
    }
    let checks = [
        (
            "a queued event points at an event that is not queued in its key",
            "SELECT e.id FROM durabus_events AS e
             LEFT JOIN durabus_events AS p ON p.id = e.key_prev
             WHERE e.key_queued IS NOT NULL AND e.key_prev IS NOT NULL
                 AND (p.id IS NULL OR p.key_queued IS NULL OR p.ordering_key IS NOT e.ordering_key)",
        ),
        (
            "an event out of its key's queue still points at one",
            "SELECT id FROM durabus_events WHERE key_queued IS NULL AND key_prev IS NOT NULL",
        ),
        (
            "two queued events stand behind the same event",
            "SELECT key_prev FROM durabus_events WHERE key_queued IS NOT NULL
                 AND key_prev IS NOT NULL GROUP BY key_prev HAVING count(*) > 1",
        ),
        (
            "a key has more than one head",
            "SELECT ordering_key FROM durabus_events
             WHERE key_queued IS NOT NULL AND key_prev IS NULL
             GROUP BY ordering_key HAVING count(*) > 1",
        ),
        (
            "a busy key has no last event, or one that is not its queued event with none behind it",
            "SELECT DISTINCT e.ordering_key FROM durabus_events AS e
             LEFT JOIN durabus_key_tails AS t ON t.ordering_key = e.ordering_key
             LEFT JOIN durabus_events AS l ON l.id = t.tail
             WHERE e.key_queued IS NOT NULL
                 AND (t.tail IS NULL OR l.key_queued IS NULL
                      OR l.ordering_key IS NOT e.ordering_key
                      OR EXISTS (SELECT 1 FROM durabus_events AS b
                                 WHERE b.key_prev = t.tail AND b.key_queued IS NOT NULL))",
        ),
        (
            "a key with nothing queued keeps a last event",
            "SELECT t.ordering_key FROM durabus_key_tails AS t
             WHERE NOT EXISTS (SELECT 1 FROM durabus_events AS e
                               WHERE e.ordering_key = t.ordering_key AND e.key_queued IS NOT NULL)",
        ),
        (
            "a key's head waits for a wake-up (pending or scheduled without a due time)",
            "SELECT id FROM durabus_events
             WHERE key_queued IS NOT NULL AND key_prev IS NULL
                 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL",
        ),
    ];
    let mut broken = Vec::new();
    for (what, sql) in checks {
        let found: Vec<String> = match conn.prepare(sql) {
            Ok(mut stmt) => stmt
                .query_map([], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect())
                .unwrap_or_else(|e| vec![format!("(the check failed: {e})")]),
            Err(e) => vec![format!("(the check failed: {e})")],
        };
        if !found.is_empty() {
            broken.push(format!("{what}: {found:?}"));
        }
    }
    broken
}

/// An in-memory SQLite database shared by name: an anchor store keeps it alive between the
/// stores a test opens and closes, so restarts keep the data as a file would.
pub struct MemoryBackend {
    name: String,
    anchor: Mutex<Option<SqliteStore>>,
}

impl MemoryBackend {
    pub async fn new() -> Self {
        let name = EventId::new().0.simple().to_string();
        let anchor = SqliteStore::shared_memory(&name, SqliteOptions::default())
            .await
            .expect("open the in-memory database");
        MemoryBackend {
            name,
            anchor: Mutex::new(Some(anchor)),
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn open(&self) -> Arc<dyn Store> {
        Arc::new(
            SqliteStore::shared_memory(&self.name, SqliteOptions::default())
                .await
                .expect("open the in-memory store"),
        )
    }
    fn name(&self) -> &'static str {
        "memory"
    }
    async fn cleanup(&self) {
        let anchor = self.anchor.lock().unwrap().take();
        if let Some(anchor) = anchor {
            use durabus::store::StoreLifecycle;
            anchor.close().await.unwrap();
        }
    }
}

pub struct Harness {
    pub backend: Box<dyn Backend>,
    pub clock: ManualClock,
}

pub const MS: Duration = Duration::from_millis(1);

/// A breaker that never trips, for tests about retries and dead letters in which one handler
/// fails many times a minute (the breaker has its own tests in `suite/breaker.rs`).
pub fn breaker_never_trips() -> durabus::BreakerConfig {
    durabus::BreakerConfig {
        min_samples: u32::MAX,
        ..durabus::BreakerConfig::default()
    }
}

impl Harness {
    /// A harness on PostgreSQL, or `None` (skipped) when it is unreachable outside CI.
    pub async fn postgres() -> Option<Self> {
        if !pg_available().await {
            return None;
        }
        Some(Harness {
            backend: Box::new(PgBackend {
                schema: unique_schema(),
            }),
            clock: ManualClock::default(),
        })
    }

    /// Checks the store's own structures, then cleans up after a passing test.
    pub async fn finish(&self) {
        let broken = self.backend.broken().await;
        assert!(
            broken.is_empty(),
            "{} left its structures broken: {broken:#?}",
            self.backend.name()
        );
        self.backend.cleanup().await;
    }

    pub fn sqlite() -> Self {
        Harness {
            backend: Box::new(SqliteBackend::new()),
            clock: ManualClock::default(),
        }
    }

    /// A harness on a SQLite file whose store does not look for commits on the file: only
    /// its own writes wake its worker.
    pub fn sqlite_unwatched() -> Self {
        Harness {
            backend: Box::new(SqliteBackend {
                watch: false,
                ..SqliteBackend::new()
            }),
            clock: ManualClock::default(),
        }
    }

    /// A harness on an in-memory SQLite database.
    pub async fn memory() -> Self {
        Harness {
            backend: Box::new(MemoryBackend::new().await),
            clock: ManualClock::default(),
        }
    }

    pub async fn builder(&self) -> BusBuilder {
        EventBus::builder()
            .store(self.backend.open().await)
            .clock(Arc::new(self.clock.clone()))
            .retry_policy(RetryPolicy::default())
            .poll_interval(Duration::from_millis(20))
    }

    pub async fn bus(&self) -> EventBus {
        self.builder().await.build().await.expect("build bus")
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }
}

/// Subscribes a handler to `pattern` that counts its calls and succeeds; returns the count.
pub async fn count_calls(bus: &EventBus, pattern: &str) -> Arc<std::sync::atomic::AtomicUsize> {
    subscribe_counting(bus, pattern, false).await
}

/// Subscribes a handler to `pattern` that counts its calls and never returns, holding its
/// delivery slot; returns the count.
pub async fn count_calls_and_hang(
    bus: &EventBus,
    pattern: &str,
) -> Arc<std::sync::atomic::AtomicUsize> {
    subscribe_counting(bus, pattern, true).await
}

async fn subscribe_counting(
    bus: &EventBus,
    pattern: &str,
    hang: bool,
) -> Arc<std::sync::atomic::AtomicUsize> {
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = count.clone();
    bus.subscribe(
        pattern,
        move |_e: Event| {
            c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok(())
            }
        },
        durabus::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    count
}

/// Installs `subscriber` for this thread (tests run in parallel, each with its own), then has
/// every callsite asked again whether anyone listens. `tracing` caches that answer per callsite
/// for the whole process, and a callsite first reached by another test's thread, while it
/// registered alongside this subscriber, could keep "no one" and drop this test's spans.
pub fn listen<S>(subscriber: S) -> tracing::subscriber::DefaultGuard
where
    S: tracing::Subscriber + Send + Sync + 'static,
{
    let guard = tracing::subscriber::set_default(subscriber);
    tracing::callsite::rebuild_interest_cache();
    guard
}

/// Polls `check` every 2 ms until it returns `Some`, for at most 10 s of real time.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

pub async fn get(bus: &EventBus, id: EventId) -> Event {
    bus.store()
        .get_event(id)
        .await
        .unwrap()
        .expect("event exists")
}

/// Waits until the event has `status`.
pub async fn wait_status(bus: &EventBus, id: EventId, status: EventStatus) -> Event {
    let store = bus.store();
    eventually(&format!("event {id} to be {status}"), || {
        let store = store.clone();
        async move {
            store
                .get_event(id)
                .await
                .ok()
                .flatten()
                .filter(|e| e.status == status)
        }
    })
    .await
}

/// Records what handlers saw.
#[derive(Clone, Default)]
pub struct Seen(pub Arc<Mutex<Vec<String>>>);

impl Seen {
    pub fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub fn count(&self, s: &str) -> usize {
        self.0.lock().unwrap().iter().filter(|x| *x == s).count()
    }
    pub fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Fields of a `tracing` span or event as text, for tests that capture them.
pub type Fields = std::collections::BTreeMap<String, String>;

/// Records every field it is shown into a [`Fields`] (debug values as `{:?}`).
pub struct FieldVisitor<'a>(pub &'a mut Fields);

impl tracing::field::Visit for FieldVisitor<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &tracing::field::Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
}

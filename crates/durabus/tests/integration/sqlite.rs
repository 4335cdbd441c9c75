//! Behaviour specific to the SQLite store: WAL, files that are not databases, schema versions,
//! and locks held by other processes.

use std::time::{Duration, Instant};

use durabus::store::sqlite::{ListFilter, Sql};
use durabus::{
    Error, EventBus, EventQuery, EventStatus, EventStore, InsertMode, NewEvent, QueryStore,
    SqliteOptions, SqliteStore, Store, StoreLifecycle, Timestamp,
};
use rusqlite::Connection;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    (dir, path)
}

#[tokio::test]
async fn the_database_is_a_file_in_wal_mode_with_the_schema() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap();
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: String = conn
        .query_row(
            "SELECT value FROM durabus_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, durabus::store::sqlite::SCHEMA_VERSION.to_string());
    for col in [
        "next_attempt_at",
        "dlq_at",
        "retry_count",
        "last_error",
        "metadata",
    ] {
        let n: i64 = conn
            .query_row(
                "SELECT count(*) FROM pragma_table_info('durabus_events') WHERE name = ?1",
                [col],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 1, "column {col}");
    }
    // The claim is served by the partial index on due events.
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", Sql::default_tables().due))
        .unwrap()
        .query_map([5, 10], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(plan.iter().any(|p| p.contains("events_due")), "{plan:?}");
    assert!(
        !plan.iter().any(|p| p.contains("TEMP B-TREE")),
        "the claim must not sort: {plan:?}"
    );
    // Even after ANALYZE on a table full of pending rows.
    drop(conn);
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap();
    let batch: Vec<_> = (0..2000)
        .map(|i| NewEvent::new("p.x", &i).unwrap())
        .collect();
    store
        .insert(batch, InsertMode::Pending, Timestamp(1))
        .await
        .unwrap();
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    conn.execute_batch("ANALYZE").unwrap();
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", Sql::default_tables().due))
        .unwrap()
        .query_map([5, 10], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(plan.iter().any(|p| p.contains("events_due")), "{plan:?}");
}

#[tokio::test]
async fn missing_files_are_refused_clearly() {
    let (_dir, path) = temp();
    let opts = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    assert!(matches!(
        SqliteStore::open(&path, opts).await,
        Err(Error::DatabaseMissing(_))
    ));
    assert!(
        !path.exists(),
        "opening without create must not create the file"
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused() {
    let (dir, path) = temp();
    std::fs::write(
        &path,
        b"this is a text file, not a database, and it is long enough to matter",
    )
    .unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"this is a text file, not a database, and it is long enough to matter",
        "the file must be left alone"
    );
    let err = SqliteStore::open(dir.path(), SqliteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    let err = SqliteStore::open(
        dir.path().join("no/such/dir/x.db"),
        SqliteOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("cannot open"), "{err}");
}

#[tokio::test]
async fn a_database_from_a_newer_version_is_refused() {
    let (_dir, path) = temp();
    SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE durabus_meta SET value = '999' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    assert!(matches!(
        SqliteStore::open(&path, SqliteOptions::default()).await,
        Err(Error::SchemaTooNew { found: 999, .. })
    ));
}

#[tokio::test]
async fn the_bus_opens_beside_an_applications_own_tables() {
    let (_dir, path) = temp();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER); INSERT INTO orders VALUES (1, 99);")
            .unwrap();
    }
    let bus = EventBus::open(&path).await.unwrap();
    let id = bus.publish("order.paid", &1).await.unwrap();
    assert_eq!(
        bus.store().get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    bus.shutdown().await.unwrap();
    let total: i64 = Connection::open(&path)
        .unwrap()
        .query_row("SELECT total FROM orders WHERE id = 1", [], |r| r.get(0))
        .unwrap();
    assert_eq!(total, 99);
}

/// Holds the write lock from another connection (another process, as far as SQLite can tell).
fn hold_write_lock(path: &std::path::Path, hold: Duration) -> std::thread::JoinHandle<()> {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT").unwrap();
    })
}

/// Takes the write lock of the database at `path` on another connection and holds it until
/// the returned sender is used (or dropped).
fn hold_write_lock_until_told(
    path: &std::path::Path,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _ = rx.recv();
        conn.execute_batch("COMMIT").unwrap();
    });
    (tx, holder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_by_another_process_is_waited_out_not_surfaced() {
    let (_dir, path) = temp();
    let opts = SqliteOptions {
        busy_timeout: Duration::from_millis(10),
        ..SqliteOptions::default()
    };
    let bus = EventBus::builder()
        .sqlite_with(&path, opts)
        .build()
        .await
        .unwrap();
    let holder = hold_write_lock(&path, Duration::from_millis(300));
    let started = Instant::now();
    let id = bus
        .publish("l.x", &1)
        .await
        .expect("a publish must outlast another connection's write lock");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "the lock was not actually held"
    );
    holder.join().unwrap();
    assert_eq!(
        bus.store().get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_past_the_lock_timeout_fails_with_locked_and_stores_nothing() {
    let (_dir, path) = temp();
    let opts = SqliteOptions {
        busy_timeout: Duration::from_millis(5),
        lock_timeout: Duration::from_millis(60),
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open(&path, opts).await.unwrap();
    let (release, holder) = hold_write_lock_until_told(&path);
    let err = store
        .insert(
            vec![NewEvent::new("l.x", &1).unwrap()],
            InsertMode::Pending,
            Timestamp(1),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Locked(_)), "{err:?}");
    release.send(()).unwrap();
    holder.join().unwrap();
    assert!(
        store
            .list_events(EventQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    // Once the lock is gone the store works again.
    store
        .insert(
            vec![NewEvent::new("l.x", &1).unwrap()],
            InsertMode::Pending,
            Timestamp(1),
        )
        .await
        .unwrap();
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_are_group_committed_and_all_acknowledged() {
    let (_dir, path) = temp();
    let sqlite = std::sync::Arc::new(
        SqliteStore::open(&path, SqliteOptions::default())
            .await
            .unwrap(),
    );
    let store: std::sync::Arc<dyn Store> = sqlite.clone();
    let (tx0, rq0) = sqlite.write_stats();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..20 {
                s.insert(
                    vec![NewEvent::new("g.x", &(i * 100 + j)).unwrap()],
                    InsertMode::Pending,
                    Timestamp(1),
                )
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let all = store
        .list_events(EventQuery {
            limit: 10_000,
            ..EventQuery::default()
        })
        .await
        .unwrap();
    assert_eq!(all.len(), 64 * 20);
    let (tx, rq) = sqlite.write_stats();
    assert_eq!(rq - rq0, 64 * 20, "every request counted");
    assert!(
        (tx - tx0) * 2 < rq - rq0,
        "64 concurrent writers should share commits: {} transactions for {} requests",
        tx - tx0,
        rq - rq0
    );
    store.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durability_sets_the_writers_synchronous_mode() {
    let (_dir, path) = temp();
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap();
    assert_eq!(store.synchronous(), 1, "NORMAL by default");
    store.close().await.unwrap();
    let full = SqliteOptions {
        durability: durabus::Durability::Full,
        ..SqliteOptions::default()
    };
    let store = SqliteStore::open(&path, full).await.unwrap();
    assert_eq!(store.synchronous(), 2, "FULL");
    store.close().await.unwrap();
    // Through the builder, in either order.
    for before in [true, false] {
        let b = EventBus::builder();
        let b = if before {
            b.durability(durabus::Durability::Full).sqlite(&path)
        } else {
            b.sqlite(&path).durability(durabus::Durability::Full)
        };
        let bus = b.build().await.unwrap();
        let id = bus.enqueue("f.x", &1).await.unwrap();
        assert!(bus.store().get_event(id).await.unwrap().is_some());
        bus.shutdown().await.unwrap();
    }
    // With a store opened elsewhere, durability() cannot apply: an error, not silence.
    let store = std::sync::Arc::new(
        SqliteStore::open(&path, SqliteOptions::default())
            .await
            .unwrap(),
    );
    let err = EventBus::builder()
        .store(store.clone())
        .durability(durabus::Durability::Full)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    store.close().await.unwrap();
}

#[tokio::test]
async fn opening_without_create_leaves_foreign_databases_alone() {
    let (_dir, path) = temp();
    {
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT)")
            .unwrap();
    }
    let opts = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    let err = SqliteStore::open(&path, opts.clone()).await.unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    let conn = Connection::open(&path).unwrap();
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "no durabus tables were added");
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete", "the journal mode was not changed");
    drop(conn);
    // A durabus database opens fine without create.
    SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    SqliteStore::open(&path, opts)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
}

#[test]
fn listings_are_served_without_sorting() {
    let (_dir, path) = temp();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        SqliteStore::open(&path, SqliteOptions::default())
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
    });
    let conn = Connection::open(&path).unwrap();
    for (status, by_type, index, params) in [
        (Some(EventStatus::Dlq), false, "events_dlq", vec![]),
        // Other listings walk the table backwards in insertion order: no index, no sort.
        (None, true, "SCAN durabus_events", vec!["a.b"]),
        (
            Some(EventStatus::Done),
            false,
            "SCAN durabus_events",
            vec![],
        ),
    ] {
        let sql = Sql::default_tables().list(ListFilter {
            status,
            by_type,
            ..ListFilter::default()
        });
        let mut all: Vec<rusqlite::types::Value> = params
            .into_iter()
            .map(|p| rusqlite::types::Value::Text(p.into()))
            .collect();
        all.push(rusqlite::types::Value::Integer(100));
        all.push(rusqlite::types::Value::Integer(0));
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(rusqlite::params_from_iter(all), |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains(index)), "{plan:?}");
        assert!(
            !plan.iter().any(|p| p.contains("TEMP B-TREE")),
            "sorts: {plan:?}"
        );
    }
}

#[test]
fn hot_statements_are_not_recompiled_on_every_run() {
    let (_dir, path) = temp();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        SqliteStore::open(&path, SqliteOptions::default())
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
    });
    let conn = Connection::open(&path).unwrap();
    let sql = Sql::default_tables();
    let dlq = sql.list(ListFilter {
        status: Some(EventStatus::Dlq),
        ..ListFilter::default()
    });
    let by_type = sql.list(ListFilter {
        status: Some(EventStatus::Done),
        by_type: true,
        ..ListFilter::default()
    });
    let mut a = conn.prepare(&sql.due).unwrap();
    let mut b = conn.prepare(&dlq).unwrap();
    let mut c = conn.prepare(&by_type).unwrap();
    for i in 0..5i64 {
        let _ = a
            .query_map(rusqlite::params![i, i + 1], |_r| Ok(()))
            .unwrap()
            .count();
        let _ = b
            .query_map(rusqlite::params![i + 1, i], |_r| Ok(()))
            .unwrap()
            .count();
        let _ = c
            .query_map(rusqlite::params!["a.b", i + 1, i], |_r| Ok(()))
            .unwrap()
            .count();
    }
    for (name, st) in [("claim", &a), ("dlq listing", &b), ("listing by type", &c)] {
        assert_eq!(
            st.get_status(rusqlite::StatementStatus::RePrepare),
            0,
            "{name} is recompiled"
        );
    }
}

#[tokio::test]
async fn a_database_from_before_table_prefixes_is_renamed_and_keeps_its_events() {
    let (_dir, path) = temp();
    let id = durabus::EventId::new();
    {
        // The layout of schema version 1 before table prefixes existed.
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode = WAL;
             CREATE TABLE durabus_meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
             INSERT INTO durabus_meta VALUES ('schema_version', '1');
             CREATE TABLE events (id TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL,
                 payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending',
                 retry_count INTEGER NOT NULL DEFAULT 0, last_error TEXT, metadata TEXT,
                 delivered TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
                 next_attempt_at INTEGER, dlq_at INTEGER);
             CREATE INDEX events_due ON events(next_attempt_at) WHERE status = 'pending';
             CREATE INDEX events_dlq ON events(created_at, id) WHERE status = 'dlq';
             CREATE INDEX events_processing ON events(id) WHERE status = 'processing';
             CREATE TABLE subscriptions (id TEXT PRIMARY KEY NOT NULL, name TEXT UNIQUE,
                 event_type TEXT NOT NULL, created_at INTEGER NOT NULL);",
        )
        .unwrap();
        conn.execute(
            "INSERT INTO events (id, type, payload, created_at, updated_at, next_attempt_at)
             VALUES (?1, 'old.event', '{\"n\":1}', 5, 5, 5)",
            [id.to_string()],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap();
    let old = store
        .get_event(id)
        .await
        .unwrap()
        .expect("the old event is kept");
    assert_eq!(old.event_type, "old.event");
    let claimed = store.claim_due(Timestamp(10), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    store.close().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    let names: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE name LIKE '%events%' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        names,
        vec![
            "durabus_events",
            "durabus_events_dlq",
            "durabus_events_due",
            "durabus_events_processing"
        ]
    );
}

/// A database file written by the first release's schema (committed as a fixture: 7 completed
/// events and a dead letter from `durabus demo`) opens with this build, is migrated to the
/// current schema version, and keeps every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_from_the_first_schema_is_upgraded_with_its_events() {
    let (_dir, path) = temp();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sqlite-v1.db"),
        &path,
    )
    .unwrap();
    let before: i64 = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM durabus_meta WHERE key = 'schema_version'",
            [],
            |r| r.get::<_, String>(0),
        )
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(before, 1);
    let bus = EventBus::open(&path).await.unwrap();
    let version: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM durabus_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(version, durabus::store::sqlite::SCHEMA_VERSION.to_string());
    let all = bus.history().list(EventQuery::default()).await.unwrap();
    assert_eq!(all.len(), 8);
    assert_eq!(
        all.iter().filter(|e| e.status == EventStatus::Done).count(),
        7
    );
    let dead = bus.dlq().list(durabus::Page::default()).await.unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].event_type, "order.paid");
    assert_eq!(dead[0].retry_count, 3);
    assert_eq!(dead[0].errors.len(), 3);
    assert!(dead[0].errors[0].contains("card for order #99 refused"));
    assert!(dead[0].payload_value().is_object());
    // Migration 2 gave the dead event a record: its round, its group, manual retries only.
    let record = bus.dead_letters().get(dead[0].id).await.unwrap();
    assert_eq!(record.status, durabus::DeadLetterStatus::Pending);
    assert_eq!(record.subscription.as_deref(), Some("demo-payments"));
    assert_eq!(
        record.last_error,
        "card for order #99 refused by the issuer"
    );
    assert_eq!(record.error_history.len(), 1);
    assert_eq!(record.error_history[0].errors, dead[0].errors);
    assert_eq!(record.created_at, dead[0].dlq_at.unwrap());
    assert_eq!(
        record.next_auto_retry_at, None,
        "an upgrade sends nothing back by itself"
    );
    assert_eq!(record.payload, dead[0].payload);
    let groups = bus.dead_letters().groups(10).await.unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].count, groups[0].open), (1, 1));
    assert_eq!(get_dlq_count(&path, dead[0].id), 1);
    // No announcement for an old dead letter.
    assert!(
        bus.history()
            .list(EventQuery {
                event_type: Some("system.dead_letter".into()),
                ..EventQuery::default()
            })
            .await
            .unwrap()
            .is_empty()
    );
    // And it works as a bus: a new event is stored and delivered.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let s = seen.clone();
    bus.subscribe(
        "order.*",
        move |_e: durabus::Event| {
            s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok(()) }
        },
        durabus::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    bus.publish("order.paid", &serde_json::json!({"order": 100}))
        .await
        .unwrap();
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

/// A schema version that is not a number is refused (never read as 0, which would run every
/// migration again over the existing tables), and the file is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_schema_version_is_refused_and_the_file_left_alone() {
    let (_dir, path) = temp();
    SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE durabus_meta SET value = 'one' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    let err = SqliteStore::open(&path, SqliteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), durabus::ErrorKind::Corrupt, "{err}");
    let value: String = Connection::open(&path)
        .unwrap()
        .query_row(
            "SELECT value FROM durabus_meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(value, "one");
}

fn get_dlq_count(path: &std::path::Path, id: durabus::EventId) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT dlq_count FROM durabus_events WHERE id = ?1",
            [id.to_string()],
            |r| r.get(0),
        )
        .unwrap()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn file_holds(path: &std::path::Path, needle: &[u8]) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    [path.to_path_buf(), std::path::PathBuf::from(wal)]
        .iter()
        .any(|p| std::fs::read(p).is_ok_and(|bytes| contains(&bytes, needle)))
}

/// A soft-deleted snapshot's compressed bytes are overwritten in the file, not only hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_deleted_snapshot_is_gone_from_the_file() {
    let (_dir, path) = temp();
    // Random text: gzip keeps it mostly as literals, so the stored blob is distinctive.
    let text: String = (0..8192)
        .map(|_| char::from(b'a' + fastrand_byte() % 26))
        .collect();
    let id = durabus::EventId::new();
    let bus = EventBus::open(&path).await.unwrap();
    bus.payloads()
        .store_snapshot(id, "secret.x", "webhook_raw", &text)
        .await
        .unwrap();
    let blob = bus.store().payload_list(id).await.unwrap()[0]
        .blob
        .clone()
        .unwrap();
    let needle = &blob[blob.len() / 2..blob.len() / 2 + 64];
    bus.shutdown().await.unwrap();
    assert!(
        file_holds(&path, needle),
        "the test must see the bytes first"
    );
    let bus = EventBus::open(&path).await.unwrap();
    let actor = durabus::Actor::new("ann", durabus::ActorKind::Library);
    bus.payloads()
        .delete(id, "right to be forgotten", &actor)
        .await
        .unwrap();
    bus.shutdown().await.unwrap();
    assert!(!file_holds(&path, needle), "the bytes are overwritten");
}

fn fastrand_byte() -> u8 {
    use std::cell::Cell;
    thread_local!(static S: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) });
    S.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 24) as u8
    })
}

/// The metrics' gauge queries are index lookups, never a scan of the event table or the dead
/// letters (only the failure groups, one row per group, may be read whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_queries_use_indexes() {
    let (_dir, path) = temp();
    let bus = EventBus::open(&path).await.unwrap();
    for i in 0..20u64 {
        bus.enqueue("plan.item", &i).await.unwrap();
    }
    bus.shutdown().await.unwrap();
    let conn = Connection::open(&path).unwrap();
    for sql in durabus::store::sqlite::gauges::statements("durabus_") {
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let plan: Vec<String> = stmt
            .query_map([], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!plan.is_empty(), "{sql}");
        for line in &plan {
            let indexed = line.contains("USING INDEX") || line.contains("USING COVERING INDEX");
            let groups = line == "SCAN durabus_dead_letter_groups";
            assert!(indexed || groups, "{sql}: {line}");
        }
    }
}

async fn insert_one(store: &SqliteStore, event_type: &str) -> durabus::EventId {
    let event = NewEvent::new(event_type, &serde_json::json!({"n": 1})).unwrap();
    let id = event.id;
    store
        .insert(vec![event], InsertMode::Pending, Timestamp::now())
        .await
        .unwrap();
    id
}

async fn count(store: &SqliteStore) -> u64 {
    store.counts().await.unwrap().iter().map(|c| c.count).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_databases_are_private_to_their_store_and_leave_no_file() {
    let cwd_before: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let a = SqliteStore::open(":memory:", SqliteOptions::default())
        .await
        .unwrap();
    let b = SqliteStore::in_memory(SqliteOptions::default())
        .await
        .unwrap();
    assert!(a.is_memory() && b.is_memory());
    assert_eq!(a.path(), std::path::Path::new(":memory:"));
    let id = insert_one(&a, "m.one").await;
    assert_eq!(count(&a).await, 1);
    assert!(
        a.get_event(id).await.unwrap().is_some(),
        "read back on a reader connection"
    );
    assert_eq!(
        count(&b).await,
        0,
        "another in-memory store sees nothing of the first"
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    let cwd_after: Vec<_> = std::fs::read_dir(".")
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(cwd_before, cwd_after, "an in-memory store wrote a file");
    // A private database is always new.
    let opts = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    assert!(matches!(
        SqliteStore::in_memory(opts).await,
        Err(Error::InvalidConfig(_))
    ));
    // The bus opens on it by path or by name, and works end to end.
    let bus = EventBus::open(":memory:").await.unwrap();
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let s = seen.clone();
    bus.subscribe(
        "m.*",
        move |_e: durabus::Event| {
            let s = s.clone();
            async move {
                s.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            }
        },
        durabus::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus.publish("m.two", &1).await.unwrap();
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 1);
    let event = bus.store().get_event(id).await.unwrap().unwrap();
    assert_eq!(event.status, EventStatus::Done);
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_memory_database_lives_while_a_store_has_it_open() {
    let name = durabus::EventId::new().0.simple().to_string();
    let first = SqliteStore::shared_memory(&name, SqliteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        first.path().to_str(),
        Some(format!("memory:{name}").as_str())
    );
    insert_one(&first, "s.one").await;
    // A second store on the name sees the data, and its writes are seen by the first.
    let existing = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    let second = SqliteStore::shared_memory(&name, existing.clone())
        .await
        .unwrap();
    assert_eq!(count(&second).await, 1);
    insert_one(&second, "s.two").await;
    assert_eq!(count(&first).await, 2);
    // Closing one keeps the database for the other (a restart in a test).
    first.close().await.unwrap();
    let third = SqliteStore::shared_memory(&name, SqliteOptions::default())
        .await
        .unwrap();
    assert_eq!(count(&third).await, 2);
    second.close().await.unwrap();
    third.close().await.unwrap();
    // Once no store has it open it is gone: opening it as existing finds no durabus tables.
    match SqliteStore::shared_memory(&name, existing).await {
        Err(Error::NotADatabase { reason, .. }) => {
            assert!(reason.contains("without durabus tables"), "{reason}")
        }
        other => panic!("expected NotADatabase, got {other:?}"),
    }
    let fresh = SqliteStore::shared_memory(&name, SqliteOptions::default())
        .await
        .unwrap();
    assert_eq!(count(&fresh).await, 0);
    fresh.close().await.unwrap();
    // Names are checked.
    for bad in ["", "a/b", "x?vfs=unix", &"n".repeat(101)] {
        assert!(
            matches!(
                SqliteStore::shared_memory(bad, SqliteOptions::default()).await,
                Err(Error::InvalidConfig(_))
            ),
            "{bad:?} was accepted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_a_memory_database_wait_out_the_writer() {
    // Without WAL a reader cannot read beside a write transaction: reads and writes running
    // at once all finish, none fails with a busy error.
    let store = std::sync::Arc::new(
        SqliteStore::in_memory(SqliteOptions::default())
            .await
            .unwrap(),
    );
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                let events: Vec<_> = (0..50)
                    .map(|j| NewEvent::new("r.w", &serde_json::json!({"i": i, "j": j})).unwrap())
                    .collect();
                store
                    .insert(events, InsertMode::Pending, Timestamp::now())
                    .await
                    .unwrap();
            }
        })
    };
    let mut last = 0;
    while !writer.is_finished() {
        let now = count(&store).await;
        assert!(now >= last, "a reader saw fewer events than before");
        last = now;
    }
    writer.await.unwrap();
    assert_eq!(count(&store).await, 10_000);
    store.close().await.unwrap();
}

/// A `published` snapshot of a payload as published is a mark on the event's row, not a
/// second copy of the payload: no snapshot row is written with the publish; one is written,
/// compressed, when the event's row is purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_snapshot_shares_the_events_payload_until_the_row_goes() {
    let (_dir, path) = temp();
    let bus = EventBus::builder()
        .database(path.to_str().unwrap())
        .payload_snapshots(true)
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "ship.*",
        |_e: durabus::Event| async { Ok(()) },
        durabus::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus
        .publish("ship.created", &serde_json::json!({"order": 7}))
        .await
        .unwrap();
    let rows = |path: &std::path::Path| -> (i64, i64) {
        let conn = Connection::open(path).unwrap();
        let snapshots: i64 = conn
            .query_row("SELECT count(*) FROM durabus_event_payloads", [], |r| {
                r.get(0)
            })
            .unwrap();
        let marked: i64 = conn
            .query_row(
                "SELECT count(*) FROM durabus_events WHERE published_snapshot IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (snapshots, marked)
    };
    for _ in 0..500 {
        if bus.store().get_event(id).await.unwrap().unwrap().status == durabus::EventStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rows(&path), (0, 1), "a mark, no copy");
    let seen = bus.payloads().get(id, "published").await.unwrap();
    assert_eq!(seen.payload.as_deref(), Some(r#"{"order":7}"#));
    assert_eq!(bus.history().purge(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(rows(&path), (1, 0), "a compressed row of its own");
    assert_eq!(bus.payloads().get(id, "published").await.unwrap(), seen);
    bus.shutdown().await.unwrap();
}

/// A shared snapshot is a mark on its event's row: on its own (without its event) the store
/// refuses it rather than storing an empty snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_snapshot_is_refused_without_its_event() {
    let (_dir, path) = temp();
    let bus = EventBus::open(&path).await.unwrap();
    let shared = durabus::payload::NewSnapshot {
        event_id: durabus::EventId::new(),
        event_type: "ship.created".into(),
        stage: "published".into(),
        blob: Vec::new(),
        size_original: 2,
        flags: durabus::payload::detect::ContentFlags::default(),
        created_at: Timestamp(1),
        shared: true,
    };
    let err = bus
        .store()
        .payload_put(vec![shared.clone()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), durabus::ErrorKind::Internal, "{err}");
    assert!(
        bus.payloads()
            .list(shared.event_id)
            .await
            .unwrap()
            .is_empty()
    );
    bus.shutdown().await.unwrap();
}

//! Statements and schema versions: plans without sorts, no recompiles, upgrades of earlier databases, garbled versions, the gauges' indexes.

use super::*;

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
            "durabus_events_key_next",
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

/// The metrics' gauge queries are index lookups, never a scan of the event table or the dead
/// letters (only the failure groups, one row per group, and the dead-letter counts by type,
/// one row per type and status, may be read whole).
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
        let params = vec![0i64; stmt.parameter_count()];
        let plan: Vec<String> = stmt
            .query_map(rusqlite::params_from_iter(params), |r| {
                r.get::<_, String>(3)
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert!(!plan.is_empty(), "{sql}");
        for line in &plan {
            let indexed = line.contains("USING INDEX") || line.contains("USING COVERING INDEX");
            let groups = line == "SCAN durabus_dead_letter_groups"
                || line == "SCAN durabus_dead_letter_types";
            assert!(indexed || groups, "{sql}: {line}");
        }
    }
}

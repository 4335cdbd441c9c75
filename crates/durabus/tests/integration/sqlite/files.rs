//! The database file: WAL mode and schema, files that are not databases or are too new, tables beside an application's own, opening without create.

use super::*;

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

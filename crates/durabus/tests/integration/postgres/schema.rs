//! Migrations, schema versions, URLs, the application's pool, subscriptions and jobs across processes, the gauges' indexes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_starts_migrate_the_schema_once() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let o = options(&schema);
            tokio::spawn(async move { PgStore::connect(&pg_url(), o).await })
        })
        .collect();
    let mut stores = Vec::new();
    for t in tasks {
        stores.push(t.await.unwrap().expect("every concurrent start succeeds"));
    }
    let pool = admin().await;
    let rows = sqlx::query(AssertSqlSafe(format!(
        "SELECT key, value FROM \"{schema}\".meta"
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].try_get::<String, _>(1).unwrap(),
        durabus::store::postgres::SCHEMA_VERSION.to_string()
    );
    // Workers have distinct identities.
    let mut ids: Vec<&str> = stores.iter().map(|s| s.worker_id()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 8);
    for s in &stores {
        s.close().await.unwrap();
    }
    // Inspection never creates: a missing schema is refused.
    let err = PgStore::connect(
        &pg_url(),
        PgOptions {
            create: false,
            ..options(&unique_schema())
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::NotADatabase { .. }), "{err}");
    for bad in ["", "1abc", "a-b", "x\"; DROP SCHEMA public; --"] {
        let err = PgStore::connect(&pg_url(), options(bad)).await.unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{bad}: {err}");
    }
    let err = PgStore::connect("postgres://[::1", options(&schema))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_subscribing_with_one_name_at_once_both_succeed() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let a = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    let b = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    for round in 0..10 {
        let row = |id: &str| durabus::SubscriptionRow {
            id: format!("{id}-{round}"),
            name: Some("mailer".into()),
            event_type: "x.*".into(),
            created_at: durabus::Timestamp(round),
        };
        let (ra, rb) = tokio::join!(a.save_subscription(row("a")), b.save_subscription(row("b")));
        ra.unwrap();
        rb.unwrap();
        let rows = a.subscriptions().await.unwrap();
        assert_eq!(rows.len(), 1, "one row per name: {rows:?}");
    }
    a.close().await.unwrap();
    b.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_url_selects_postgres_and_anything_else_sqlite() {
    if !pg_available().await {
        return;
    }
    // `database()` / `connect()`: the URL picks PostgreSQL (default schema `durabus`).
    let bus = EventBus::connect(&pg_url()).await.unwrap();
    assert!(bus.pg_outbox().is_ok());
    assert!(matches!(bus.outbox(), Err(Error::Invalid(_))));
    bus.shutdown().await.unwrap();
    // A path picks SQLite.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bus.db");
    let bus = EventBus::connect(path.to_str().unwrap()).await.unwrap();
    assert!(bus.outbox().is_ok());
    assert!(matches!(bus.pg_outbox(), Err(Error::Invalid(_))));
    bus.shutdown().await.unwrap();
    // SQLite's durability does not apply to PostgreSQL.
    let err = EventBus::builder()
        .postgres(pg_url())
        .durability(durabus::Durability::Full)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_opened_for_inspection_upgrades_an_older_schema() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let quoted = format!("\"{schema}\"");
    let pool = admin().await;
    // A schema as the first version left it, with one dead event.
    let v1 = include_str!("../../../migrations/postgres/0001_events.sql").replace("{s}", &quoted);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE SCHEMA {quoted};
         CREATE TABLE {quoted}.meta (key text PRIMARY KEY, value text NOT NULL);
         INSERT INTO {quoted}.meta (key, value) VALUES ('schema_version', '1');
         {v1}
         INSERT INTO {quoted}.events (id, type, payload, status, retry_count, last_error,
             created_at, updated_at, dlq_at)
         VALUES ('0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70', 'order.paid', '{{}}', 'dlq', 3,
             '[\"attempt 3 [pay]: refused\"]', 1000, 2000, 2000);"
    )))
    .execute(&pool)
    .await
    .unwrap();
    // What `durabus dlq groups` opens: no schema created, but this one brought up to date.
    let store = PgStore::connect(
        &pg_url(),
        PgOptions {
            create: false,
            listen: false,
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let groups = durabus::DeadLetterStore::dlq_groups(&store, 10)
        .await
        .unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].count, 1);
    store.close().await.unwrap();
    let version: String = sqlx::query(AssertSqlSafe(format!(
        "SELECT value FROM {quoted}.meta WHERE key = 'schema_version'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(
        version,
        durabus::store::postgres::SCHEMA_VERSION.to_string()
    );
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_schema_version_is_refused_not_read_as_zero() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    PgStore::connect(&pg_url(), options(&schema))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    let pool = admin().await;
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{schema}\".meta SET value = 'v1' WHERE key = 'schema_version'"
    )))
    .execute(&pool)
    .await
    .unwrap();
    for create in [true, false] {
        let err = PgStore::connect(
            &pg_url(),
            PgOptions {
                create,
                ..options(&schema)
            },
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "{err}");
    }
    let value: String = sqlx::query(AssertSqlSafe(format!(
        "SELECT value FROM \"{schema}\".meta WHERE key = 'schema_version'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap()
    .get(0);
    assert_eq!(value, "v1");
    drop_schema(&schema).await;
}

/// Several processes on one schema run each tick of a job once: here three buses with their
/// schedulers, on one manual clock, cross one tick together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_of_a_job_runs_once_across_processes() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::new(durabus::Timestamp(1_767_225_600_000 + 60_000));
    let mut buses = Vec::new();
    for _ in 0..3 {
        let bus = EventBus::builder()
            .postgres_with(pg_url(), options(&schema))
            .clock(Arc::new(clock.clone()))
            .build()
            .await
            .unwrap();
        bus.start().await.unwrap();
        buses.push(bus);
    }
    // 00:01 → 00:16: one tick of the auto-retry job (*/15) for all three.
    clock.advance(Duration::from_secs(15 * 60));
    let store = buses[0].store();
    eventually("the tick to run", async || {
        store
            .job_list()
            .await
            .unwrap()
            .iter()
            .any(|r| r.name == "dead-letter-auto-retry" && r.last_finished_at.is_some())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rows = store.job_list().await.unwrap();
    let row = rows
        .iter()
        .find(|r| r.name == "dead-letter-auto-retry")
        .unwrap();
    assert_eq!(row.runs, 1, "{row:?}");
    assert_eq!(
        row.last_tick,
        Some(durabus::Timestamp(1_767_225_600_000 + 15 * 60_000))
    );
    for bus in buses {
        bus.shutdown().await.unwrap();
    }
    drop_schema(&schema).await;
}

/// The metrics' gauge queries are index lookups, never a scan of the event tables or the
/// dead letters: with sequential scans priced out, PostgreSQL's plan for each still uses an
/// index (only the failure groups, one row per group, may be read whole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_queries_use_indexes() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let bus = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    for i in 0..20u64 {
        bus.enqueue("plan.item", &i).await.unwrap();
    }
    bus.shutdown().await.unwrap();
    let pool = admin().await;
    let mut conn = pool.acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    for sql in durabus::store::postgres::gauges::statements(&format!("\"{schema}\"")) {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "EXPLAIN {}",
            sql.replace("$1", "0").replace("$2", "0")
        )))
        .fetch_all(&mut *conn)
        .await
        .unwrap();
        let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
        let text = plan.join("\n");
        for line in plan.iter().filter(|l| l.contains("Seq Scan")) {
            assert!(
                line.contains("Seq Scan on dead_letter_groups"),
                "{sql}\n{text}"
            );
        }
        assert!(
            text.contains("Index") || text.contains("dead_letter_groups"),
            "{sql}\n{text}"
        );
    }
    drop(conn);
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bus_on_the_applications_pool_opens_no_pool_of_its_own_and_leaves_it_open() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let name = format!("app {schema}");
    let connect: sqlx::postgres::PgConnectOptions = pg_url().parse().unwrap();
    let app = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect_with(connect.application_name(&name))
        .await
        .unwrap();
    let seen = Seen::default();
    let bus = EventBus::builder()
        .postgres_pool(app.clone(), options(&schema))
        .poll_interval(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let s = seen.clone();
    bus.subscribe(
        "x.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.push(e.id.to_string());
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let id = bus
        .publish("x.paid", &serde_json::json!({"n": 1}))
        .await
        .unwrap();
    eventually("delivery on the shared pool", async || {
        seen.count(&id.to_string()) == 1
    })
    .await;

    // Every connection the bus used is the application's: none carries durabus's own name.
    let watcher = admin().await;
    let ours = store_connections(&watcher, &schema).await;
    assert_eq!(ours, 0, "the bus opened connections of its own");
    let shared: i64 =
        sqlx::query("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
            .bind(&name)
            .fetch_one(&watcher)
            .await
            .unwrap()
            .get(0);
    assert!(shared >= 1, "the bus did not use the application's pool");

    bus.shutdown().await.unwrap();
    assert!(
        !app.is_closed(),
        "shutting the bus down closed the application's pool"
    );
    let done: i64 = sqlx::query(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}\".event_log"
    )))
    .fetch_one(&app)
    .await
    .unwrap()
    .get(0);
    assert_eq!(
        done, 1,
        "the application's pool still works and sees the handled event"
    );
    app.close().await;
    watcher.close().await;
    drop_schema(&schema).await;
}

/// The check of the keys' queues that every PostgreSQL contract test ends with finds nothing
/// on a sound schema and names what a broken one breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_queue_check_catches_broken_queues() {
    if !pg_available().await {
        return;
    }
    use crate::support::pg_key_queues_broken as broken;
    let schema = unique_schema();
    let store = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    let events: Vec<NewEvent> = (0..3i64)
        .map(|n| NewEvent::new("o.step", &n).unwrap().ordering_key("k"))
        .collect();
    store
        .insert(events, InsertMode::Pending, durabus::Timestamp(1))
        .await
        .unwrap();
    assert_eq!(broken(&schema).await, Vec::<String>::new());
    // The head loses its place: it has none, and the next is first but still waits.
    let pool = admin().await;
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM \"{schema}\".keyed WHERE seq = (SELECT min(seq) FROM \"{schema}\".keyed)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let found = broken(&schema).await.join("\n");
    for what in ["has no place", "first event waits for a wake-up"] {
        assert!(found.contains(what), "{what} not in {found}");
    }
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

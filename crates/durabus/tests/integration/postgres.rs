//! What only the PostgreSQL store does: leases and fencing, heartbeats, wake-ups across
//! processes, migrations racing, transactional publish in a `sqlx` transaction, and faults
//! (connections killed, the database unreachable). The shared behaviour is in the contract
//! suite. Each test has its own schema. Unreachable PostgreSQL: skipped, or failed with CI=true.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::{Seen, drop_schema, pg_available, pg_url, unique_schema};
use durabus::sqlx::{self, AssertSqlSafe, Row};
use durabus::{
    Clock, Error, ErrorKind, Event, EventBus, EventStatus, EventStore, InsertMode, ManualClock,
    NewEvent, Outcome, PgOptions, PgStore, QueryStore, StoreLifecycle, SubscribeOptions,
    SubscriptionStore,
};

fn options(schema: &str) -> PgOptions {
    PgOptions {
        schema: schema.to_owned(),
        max_connections: 3,
        ..PgOptions::default()
    }
}

async fn admin() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&pg_url())
        .await
        .unwrap()
}

/// A started bus that only learns of other processes' publishes through LISTEN/NOTIFY: its
/// fallback poll is an hour.
async fn listening_bus(schema: &str, seen: &Seen) -> EventBus {
    let bus = EventBus::builder()
        .postgres_with(pg_url(), options(schema))
        .poll_interval(Duration::from_secs(3600))
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
    bus
}

/// Connections the stores on `schema` opened under their own name (`durabus <schema> <worker>`).
async fn store_connections(admin: &sqlx::PgPool, schema: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1")
        .bind(format!("durabus {schema} %"))
        .fetch_one(admin)
        .await
        .unwrap()
}

/// Terminates every connection the stores on `schema` opened; returns how many.
async fn kill_store_connections(admin: &sqlx::PgPool, schema: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE $1",
    )
    .bind(format!("durabus {schema} %"))
    .fetch_one(admin)
    .await
    .unwrap()
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

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
        assert!(matches!(err, Error::InvalidConfig(_)), "{bad}: {err}");
    }
    let err = PgStore::connect("postgres://[::1", options(&schema))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_elsewhere_wakes_an_idle_worker_through_notify() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let worker = listening_bus(&schema, &seen).await;
    // Another "process": its own store, pool and listener.
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    for i in 0..20 {
        let id = publisher.enqueue("x.ping", &i).await.unwrap();
        eventually("the idle worker to get the event", async || {
            seen.all().contains(&id.to_string())
        })
        .await;
    }
    assert_eq!(seen.len(), 20);
    publisher.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_in_the_same_process_wakes_its_own_idle_worker() {
    if !pg_available().await {
        return;
    }
    // The listener ignores the NOTIFY echo of its own store's inserts: the insert itself must
    // wake the dispatcher (its fallback poll is an hour), for lone publishes written on the
    // caller's task, for publishes gathered by the group-commit task and for large batches.
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = Arc::new(listening_bus(&schema, &seen).await);
    for i in 0..20 {
        let id = bus.enqueue("x.lone", &i).await.unwrap();
        eventually("the event published in this process", async || {
            seen.all().contains(&id.to_string())
        })
        .await;
    }
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let bus = bus.clone();
            tokio::spawn(async move { bus.enqueue("x.together", &i).await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    eventually("the concurrent publishes", async || seen.len() == 52).await;
    let batch: Vec<NewEvent> = (0..150)
        .map(|i| NewEvent::new("x.batch", &i).unwrap())
        .collect();
    bus.enqueue_batch(batch).await.unwrap();
    eventually("the batch", async || seen.len() == 202).await;
    bus.shutdown().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_and_a_renewal_skip_their_flush_without_changing_the_sessions_setting() {
    if !pg_available().await {
        return;
    }
    // The application's pool, one connection: the claim runs on the very connection that is
    // asked afterwards.
    let schema = unique_schema();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg_url())
        .await
        .unwrap();
    let no_listener = PgOptions {
        listen: false,
        ..options(&schema)
    };
    let store = PgStore::from_pool(pool.clone(), no_listener).await.unwrap();
    let clock = ManualClock::new(durabus::Timestamp(1_000_000));
    let e = NewEvent::new("x.claimed", &1).unwrap();
    store
        .insert(vec![e.clone()], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    let claimed = store.claim_due(clock.now(), 10).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].id, e.id);
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(setting, "on", "the claim's setting leaked into the session");
    // The claim committed: another connection sees the event held.
    let status: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT status FROM \"{schema}\".events WHERE id = $1"
    )))
    .bind(e.id.0)
    .fetch_one(&admin().await)
    .await
    .unwrap();
    assert_eq!(status, "processing");
    // A renewal skips its flush the same way: the lease moves, visibly to other connections,
    // and the session keeps its setting.
    let expiry = async || -> i64 {
        sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT lease_expires_at FROM \"{schema}\".events WHERE id = $1"
        )))
        .bind(e.id.0)
        .fetch_one(&admin().await)
        .await
        .unwrap()
    };
    let before = expiry().await;
    clock.advance(std::time::Duration::from_secs(5));
    store.heartbeat(clock.now()).await.unwrap();
    assert_eq!(
        expiry().await,
        before + 5_000,
        "the renewal moved the lease"
    );
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        setting, "on",
        "the renewal's setting leaked into the session"
    );
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pg_outbox_publish_commits_or_rolls_back_with_the_callers_transaction() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let bus = listening_bus(&schema, &seen).await;
    let outbox = bus.pg_outbox().unwrap();
    let pool = admin().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE \"{schema}\".orders (id int PRIMARY KEY)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let insert_order = format!("INSERT INTO \"{schema}\".orders (id) VALUES ($1)");

    let mut tx = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert_order.clone()))
        .bind(1)
        .execute(&mut *tx)
        .await
        .unwrap();
    let lost = outbox
        .publish(&mut tx, "x.order", &1, durabus::Timestamp::now())
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(insert_order))
        .bind(2)
        .execute(&mut *tx)
        .await
        .unwrap();
    let event = NewEvent::new("x.order", &2).unwrap();
    let kept = event.id;
    let ids = outbox
        .publish_batch(&mut tx, vec![event.clone()], durabus::Timestamp::now())
        .await
        .unwrap();
    assert_eq!(ids, vec![kept]);
    assert!(
        bus.store().get_event(kept).await.unwrap().is_none(),
        "not before commit"
    );
    tx.commit().await.unwrap();
    eventually("the committed event", async || {
        seen.all().contains(&kept.to_string())
    })
    .await;
    // The same id again, in a later transaction: stored and delivered once.
    let mut tx = pool.begin().await.unwrap();
    outbox
        .publish_batch(&mut tx, vec![event], durabus::Timestamp::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // Bad input is refused before anything is written.
    let mut tx = pool.begin().await.unwrap();
    assert!(matches!(
        outbox
            .publish(&mut tx, "bad type!", &1, durabus::Timestamp::now())
            .await,
        Err(Error::InvalidEventType(..))
    ));
    tx.rollback().await.unwrap();
    bus.shutdown().await.unwrap();
    assert_eq!(seen.all(), vec![kept.to_string()]);
    let store = PgStore::connect(&pg_url(), options(&schema)).await.unwrap();
    assert!(store.get_event(lost).await.unwrap().is_none());
    assert_eq!(
        store.get_event(kept).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    store.close().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

/// A store on `schema` whose leases last 1 s.
async fn short_lease(schema: &str) -> PgStore {
    leasing(schema, Duration::from_secs(1)).await
}

/// A store on `schema` whose leases last `lease`.
async fn leasing(schema: &str, lease: Duration) -> PgStore {
    let o = PgOptions {
        lease,
        ..options(schema)
    };
    PgStore::connect(&pg_url(), o).await.unwrap()
}

/// An event stored on `store` and claimed by it at the clock's time.
async fn claimed(store: &PgStore, clock: &ManualClock, event_type: &str) -> durabus::EventId {
    let e = NewEvent::new(event_type, &1).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    assert_eq!(store.claim_due(clock.now(), 10).await.unwrap().len(), 1);
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_reclaimed_and_the_stale_holder_is_fenced_off() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    // A lease of 20 s: a claim that waits a quarter of its lease for a connection counts the
    // lease from when it got one, and 5 s of waiting is beyond any loaded test machine.
    let a = leasing(&schema, Duration::from_secs(20)).await;
    let b = leasing(&schema, Duration::from_secs(20)).await;
    let id = claimed(&a, &clock, "x.slow").await;
    // Within the lease nobody else gets it.
    clock.advance(Duration::from_millis(19_900));
    assert!(b.claim_due(clock.now(), 10).await.unwrap().is_empty());
    // A stops renewing (stalled or dead): after the lease, B takes it over, the interrupted
    // attempt counted.
    clock.advance(Duration::from_millis(200));
    assert_eq!(
        b.next_due().await.unwrap(),
        Some(clock.now().minus(Duration::from_millis(100)))
    );
    let taken = b.claim_due(clock.now(), 10).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].id, id);
    assert_eq!(taken[0].retry_count, 1);
    assert!(
        taken[0].errors[0].contains("interrupted"),
        "{:?}",
        taken[0].errors
    );
    assert!(
        taken[0].errors[0].contains(a.worker_id()),
        "{:?}",
        taken[0].errors
    );
    // A wakes up and reports success: refused, the row is B's.
    let done = |id| Outcome::Done {
        id,
        delivered: vec![],
    };
    assert!(!a.record(done(id), clock.now()).await.unwrap());
    assert_eq!(
        a.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Processing
    );
    assert!(b.record(done(id), clock.now()).await.unwrap());
    let stored = a.get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.status, EventStatus::Done);
    assert_eq!(stored.retry_count, 1);
    // In the event log, it is history like any completed event.
    let history = durabus::History::new(Arc::new(b));
    let listed = history
        .list(durabus::EventQuery {
            status: Some(EventStatus::Done),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    a.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_running_event_with_its_worker() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    let a = short_lease(&schema).await;
    let b = short_lease(&schema).await;
    assert_eq!(a.heartbeat_interval(), Duration::from_secs(1) / 3);
    let id = claimed(&a, &clock, "x.long").await;
    for _ in 0..5 {
        clock.advance(Duration::from_millis(800));
        a.heartbeat(clock.now()).await.unwrap();
        assert!(
            b.claim_due(clock.now(), 10).await.unwrap().is_empty(),
            "a renewed lease is not taken over"
        );
    }
    assert!(
        a.record(
            Outcome::Done {
                id,
                delivered: vec![]
            },
            clock.now()
        )
        .await
        .unwrap()
    );
    a.close().await.unwrap();
    b.close().await.unwrap();
    drop_schema(&schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_are_replaced_and_the_listener_comes_back() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let seen = Seen::default();
    let worker = listening_bus(&schema, &seen).await;
    // The worker's error hook hears the lost LISTEN connection.
    let heard = Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = heard.clone();
    worker.config().on_error.set(move |e| {
        h.lock()
            .unwrap()
            .push((e.source.clone(), e.kind(), e.retrying))
    });
    let publisher = EventBus::builder()
        .postgres_with(pg_url(), options(&schema))
        .build()
        .await
        .unwrap();
    let first = publisher.enqueue("x.a", &1).await.unwrap();
    eventually("delivery", async || seen.all().contains(&first.to_string())).await;
    // Kill every connection of both buses, the worker's LISTEN connection included.
    let pool = admin().await;
    let killed = kill_store_connections(&pool, &schema).await;
    assert!(killed >= 2, "killed {killed}");
    // Publishing carries on (a dead pooled connection is replaced), and the worker, idle
    // with an hour-long poll, still hears about it: its listener reconnected.
    let mut second = None;
    for _ in 0..50 {
        match publisher.enqueue("x.b", &2).await {
            Ok(id) => {
                second = Some(id);
                break;
            }
            Err(e) => {
                eprintln!("publish right after the kill: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    let second = second.expect("publishing recovers");
    eventually("delivery after the kill", async || {
        seen.all().contains(&second.to_string())
    })
    .await;
    assert!(
        heard
            .lock()
            .unwrap()
            .iter()
            .any(|(source, _, retrying)| *source == durabus::ErrorSource::Listener && *retrying),
        "the hook heard {:?}",
        heard.lock().unwrap()
    );
    publisher.shutdown().await.unwrap();
    worker.shutdown().await.unwrap();
    pool.close().await;
    drop_schema(&schema).await;
}

/// A TCP proxy in front of PostgreSQL that can be cut, to make the database unreachable for
/// one store without stopping the server the other tests use.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (u, c) = (up.clone(), conns.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !u.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                c.lock().unwrap().push(task);
            }
        });
        Proxy { port, up, conns }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for t in self.conns.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_outage_publish_fails_fast_and_afterwards_nothing_acknowledged_is_missing() {
    if !pg_available().await {
        return;
    }
    let url = pg_url();
    let Some(rest) = url.strip_prefix("postgres://") else {
        return;
    };
    let (creds, tail) = rest.split_once('@').unwrap_or(("", rest));
    let (host_port, db) = tail.split_once('/').unwrap_or((tail, "test"));
    let proxy = Proxy::start(host_port.to_owned()).await;
    let via_proxy = format!("postgres://{creds}@127.0.0.1:{}/{db}", proxy.port);
    let schema = unique_schema();
    let store = PgStore::connect(
        &via_proxy,
        PgOptions {
            acquire_timeout: Duration::from_millis(500),
            listen: false,
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let clock = ManualClock::default();
    let mut acknowledged = Vec::new();
    for i in 0..5 {
        let e = NewEvent::new("x.keep", &i).unwrap();
        acknowledged.push(e.id);
        store
            .insert(vec![e], InsertMode::Pending, clock.now())
            .await
            .unwrap();
    }
    proxy.cut();
    let started = Instant::now();
    let err = store
        .insert(
            vec![NewEvent::new("x.lost", &0).unwrap()],
            InsertMode::Pending,
            clock.now(),
        )
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains("check that it is running"),
        "{err}"
    );
    proxy.restore();
    let mut after = None;
    for _ in 0..100 {
        let e = NewEvent::new("x.keep", &99).unwrap();
        let id = e.id;
        if store
            .insert(vec![e], InsertMode::Pending, clock.now())
            .await
            .is_ok()
        {
            after = Some(id);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    acknowledged.push(after.expect("the store works again once the database is back"));
    for id in acknowledged {
        assert!(store.get_event(id).await.unwrap().is_some(), "{id} lost");
    }
    store.close().await.unwrap();
    drop_schema(&schema).await;
}

/// Pooled connections used a moment ago are handed out without sqlx's ping; when the server
/// kills them all, at most the first statement fails, and every idle connection is checked
/// and replaced before its next use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_server_kills_the_pools_connections_only_the_first_statement_fails() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let store = PgStore::connect(
        &pg_url(),
        PgOptions {
            listen: false,
            ..options(&schema)
        },
    )
    .await
    .unwrap();
    let clock = ManualClock::default();
    let e = NewEvent::new("x.keep", &0).unwrap();
    let id = e.id;
    store
        .insert(vec![e], InsertMode::Pending, clock.now())
        .await
        .unwrap();
    // Every connection of the pool open and idle, each used a moment ago.
    let held: Vec<_> = open_connections(store.pool(), 3).await;
    drop(held);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let pool = admin().await;
    let killed = kill_store_connections(&pool, &schema).await;
    assert_eq!(killed, 3, "the pool's connections");
    // pg_terminate_backend only signals: wait until the backends have exited, so the first
    // statement meets a dead connection (not one still finishing).
    eventually("the killed backends to exit", async || {
        store_connections(&pool, &schema).await == 0
    })
    .await;
    let mut failures = Vec::new();
    for i in 0..20 {
        match store.get_event(id).await {
            Ok(found) => assert!(found.is_some()),
            Err(err) => {
                assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
                failures.push(i);
            }
        }
    }
    assert!(
        failures.is_empty() || failures == [0],
        "statements that failed: {failures:?}"
    );
    store.close().await.unwrap();
    drop_schema(&schema).await;
}

/// Holds `n` connections of `pool` at once, so the pool has opened that many.
async fn open_connections(
    pool: &sqlx::PgPool,
    n: usize,
) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut held = Vec::new();
    for _ in 0..n {
        held.push(pool.acquire().await.unwrap());
    }
    held
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
async fn a_worker_never_takes_back_an_event_it_is_still_delivering() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let clock = ManualClock::default();
    let a = short_lease(&schema).await;
    let id = claimed(&a, &clock, "x.slow").await;
    // Its heartbeats failed and the lease ran out, but the delivery is still running here:
    // this process neither claims it again nor resets it at a start-up recovery...
    clock.advance(Duration::from_secs(5));
    assert!(a.claim_due(clock.now(), 10).await.unwrap().is_empty());
    assert_eq!(a.recover_processing(clock.now()).await.unwrap(), 0);
    // ...and its outcome counts, since nobody else took the event over.
    assert!(
        a.record(
            Outcome::Done {
                id,
                delivered: vec![]
            },
            clock.now()
        )
        .await
        .unwrap()
    );
    assert_eq!(
        a.get_event(id).await.unwrap().unwrap().status,
        EventStatus::Done
    );
    a.close().await.unwrap();
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
    assert!(matches!(bus.outbox(), Err(Error::InvalidConfig(_))));
    bus.shutdown().await.unwrap();
    // A path picks SQLite.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bus.db");
    let bus = EventBus::connect(path.to_str().unwrap()).await.unwrap();
    assert!(bus.outbox().is_ok());
    assert!(matches!(bus.pg_outbox(), Err(Error::InvalidConfig(_))));
    bus.shutdown().await.unwrap();
    // SQLite's durability does not apply to PostgreSQL.
    let err = EventBus::builder()
        .postgres(pg_url())
        .durability(durabus::Durability::Full)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err}");
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
        let rows = sqlx::query(AssertSqlSafe(format!("EXPLAIN {}", sql.replace("$1", "0"))))
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

//! What only the PostgreSQL store does: leases and fencing, heartbeats, wake-ups across
//! processes, migrations racing, transactional publish in a `sqlx` transaction, and faults
//! (connections killed, the database unreachable). The shared behaviour is in the contract
//! suite. Each test has its own schema. Unreachable PostgreSQL: skipped, or failed with CI=true.

mod clock;
mod failover;
mod faults;
mod leases;
mod pool;
mod schema;
mod statistics;
mod wakeups;

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

/// A TCP proxy in front of PostgreSQL that can be cut, to make the database unreachable for
/// one store without stopping the server the other tests use.
struct Proxy {
    port: u16,
    up: Arc<AtomicBool>,
    conns: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    /// Connections passed through so far.
    opened: Arc<std::sync::atomic::AtomicUsize>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let conns = Arc::new(std::sync::Mutex::new(Vec::new()));
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (u, c, o) = (up.clone(), conns.clone(), opened.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !u.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                o.fetch_add(1, Ordering::SeqCst);
                let target = target.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                c.lock().unwrap().push(task);
            }
        });
        Proxy {
            port,
            up,
            conns,
            opened,
        }
    }

    fn opened(&self) -> usize {
        self.opened.load(Ordering::SeqCst)
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

//! The transactional outbox on SQLite: events written in the application's own transaction,
//! through its own connection, are delivered only if that transaction commits.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durabus::rusqlite::{Connection, TransactionBehavior};
use durabus::{
    Error, ErrorKind, Event, EventBus, EventId, EventStatus, NewEvent, Outbox, SqliteOptions,
    SubscribeOptions,
};

fn temp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    (dir, path)
}

/// A bus that only learns of other connections' commits from its watcher: the fallback poll
/// is an hour, so a delivery within the test's deadline proves the watcher woke it.
async fn bus(path: &Path, prefix: &str) -> (EventBus, Arc<Mutex<Vec<String>>>) {
    let options = SqliteOptions {
        table_prefix: prefix.to_owned(),
        watch_interval: Some(Duration::from_millis(5)),
        ..SqliteOptions::default()
    };
    let bus = EventBus::builder()
        .sqlite_with(path, options)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    bus.subscribe(
        "order.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(e.payload);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    (bus, seen)
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn status(bus: &EventBus, id: EventId) -> Option<EventStatus> {
    bus.store().get_event(id).await.unwrap().map(|e| e.status)
}

fn app_connection(path: &Path) -> Connection {
    let conn = Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(5)).unwrap();
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)",
    )
    .unwrap();
    conn
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_event_is_delivered_and_a_rolled_back_one_never_exists() {
    let (_dir, path) = temp();
    let (bus, seen) = bus(&path, durabus::store::sqlite::DEFAULT_PREFIX).await;
    let outbox = bus.outbox().unwrap();
    let mut conn = app_connection(&path);

    // Rolled back: neither the order nor the event exists.
    let tx = conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id, item) VALUES (1, 'lost')", [])
        .unwrap();
    let lost = outbox
        .publish(&tx, "order.placed", &serde_json::json!({"order": 1}))
        .unwrap();
    tx.rollback().unwrap();

    // Committed: both exist, and the event is delivered.
    let tx = conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id, item) VALUES (2, 'kept')", [])
        .unwrap();
    let kept = outbox
        .publish(&tx, "order.placed", &serde_json::json!({"order": 2}))
        .unwrap();
    // Not visible to the bus before the commit.
    assert_eq!(status(&bus, kept).await, None);
    tx.commit().unwrap();

    eventually("the committed event is delivered", || async {
        status(&bus, kept).await == Some(EventStatus::Done)
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), vec![r#"{"order":2}"#.to_owned()]);
    assert_eq!(status(&bus, lost).await, None);
    let orders: i64 = conn
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(orders, 1);
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_another_connection_wake_an_idle_bus_without_polling() {
    let (_dir, path) = temp();
    let (bus, seen) = bus(&path, durabus::store::sqlite::DEFAULT_PREFIX).await;
    let outbox = bus.outbox().unwrap();
    let conn = app_connection(&path);
    // Outside any transaction: the insert commits on its own.
    for i in 0..3 {
        let id = outbox.publish(&conn, "order.placed", &i).unwrap();
        eventually("delivery", || async {
            status(&bus, id).await == Some(EventStatus::Done)
        })
        .await;
    }
    assert_eq!(seen.lock().unwrap().len(), 3);
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_batch_is_all_or_nothing_and_the_callers_transaction_survives() {
    let (_dir, path) = temp();
    let (bus, seen) = bus(&path, durabus::store::sqlite::DEFAULT_PREFIX).await;
    let outbox = bus.outbox().unwrap().max_payload_bytes(64);
    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    tx.execute("INSERT INTO orders (id, item) VALUES (1, 'a')", [])
        .unwrap();
    // Checked before anything is written: a bad type or an oversized payload in the middle.
    let good = |i: i32| NewEvent::new("order.placed", &i).unwrap();
    let oversized = NewEvent::new("order.placed", &"x".repeat(100)).unwrap();
    let err = outbox
        .publish_batch(&tx, vec![good(1), oversized, good(2)])
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { .. }), "{err}");
    let bad_type = NewEvent {
        event_type: "bad type!".into(),
        ..good(3)
    };
    assert!(matches!(
        outbox.publish_batch(&tx, vec![good(4), bad_type]),
        Err(Error::InvalidEventType(..))
    ));
    // Refused by the database half way (a payload that is not JSON): the savepoint undoes the
    // first event; the caller's own row is still there and its transaction commits.
    let first = good(5);
    let first_id = first.id;
    let not_json = NewEvent {
        payload: "{oops".into(),
        ..good(6)
    };
    let refused = outbox
        .publish_batch(&tx, vec![first, not_json, good(7)])
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidInput, "{refused}");
    let batch = vec![good(8), good(9)];
    let ids = outbox.publish_batch(&tx, batch).unwrap();
    tx.commit().unwrap();
    for id in &ids {
        eventually("batch delivery", || async {
            status(&bus, *id).await == Some(EventStatus::Done)
        })
        .await;
    }
    assert_eq!(status(&bus, first_id).await, None);
    // Delivered concurrently: in either order.
    let mut got = seen.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, vec!["8".to_owned(), "9".to_owned()]);
    let orders: i64 = conn
        .query_row("SELECT count(*) FROM orders", [], |r| r.get(0))
        .unwrap();
    assert_eq!(orders, 1);
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_publish_of_a_stored_id_is_skipped() {
    let (_dir, path) = temp();
    let (bus, seen) = bus(&path, durabus::store::sqlite::DEFAULT_PREFIX).await;
    let outbox = bus.outbox().unwrap();
    let conn = app_connection(&path);
    let event = NewEvent::new("order.placed", &1).unwrap();
    let id = outbox.publish_event(&conn, event.clone()).unwrap();
    eventually("delivery", || async {
        status(&bus, id).await == Some(EventStatus::Done)
    })
    .await;
    // The application retries its transaction with the same event id: stored once.
    assert_eq!(outbox.publish_event(&conn, event.clone()).unwrap(), id);
    assert_eq!(bus.publish_event(event).await.unwrap(), id);
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(status(&bus, id).await, Some(EventStatus::Done));
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bus_sits_beside_application_tables_under_its_own_prefix() {
    let (_dir, path) = temp();
    // The application's database exists first, with its own tables (one named `events`).
    {
        let conn = app_connection(&path);
        conn.execute_batch("CREATE TABLE events (what TEXT); INSERT INTO events VALUES ('mine');")
            .unwrap();
    }
    let (bus, seen) = bus(&path, "app_bus_").await;
    let conn = app_connection(&path);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    // Every table of the bus carries its prefix; the application's two are untouched
    // (`sqlite_sequence` is SQLite's own, kept for the AUTOINCREMENT ids of dead letters, pauses and slot waiters).
    assert_eq!(
        tables,
        vec![
            "app_bus_breaker_reports",
            "app_bus_cancellations",
            "app_bus_concurrency_limits",
            "app_bus_dead_letter_groups",
            "app_bus_dead_letter_types",
            "app_bus_dead_letters",
            "app_bus_dedup",
            "app_bus_event_payloads",
            "app_bus_events",
            "app_bus_jobs",
            "app_bus_key_holds",
            "app_bus_key_tails",
            "app_bus_meta",
            "app_bus_operations",
            "app_bus_pauses",
            "app_bus_payload_config",
            "app_bus_periodic",
            "app_bus_rate_limits",
            "app_bus_rate_reservations",
            "app_bus_shared_breakers",
            "app_bus_slot_waiters",
            "app_bus_slots",
            "app_bus_snoozes",
            "app_bus_subscriptions",
            "app_bus_waiting",
            "events",
            "orders",
            "sqlite_sequence"
        ]
    );
    // So do its triggers (they keep the dead-letter counts by type).
    let triggers: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(triggers.len(), 3, "{triggers:?}");
    assert!(
        triggers.iter().all(|t| t.starts_with("app_bus_")),
        "{triggers:?}"
    );
    let mine: String = conn
        .query_row("SELECT what FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mine, "mine");
    let id = bus
        .outbox()
        .unwrap()
        .publish(&conn, "order.placed", &1)
        .unwrap();
    eventually("delivery", || async {
        status(&bus, id).await == Some(EventStatus::Done)
    })
    .await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    // An outbox with the wrong prefix says what is missing.
    let err = Outbox::new()
        .publish(&conn, "order.placed", &2)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("durabus_events") && text.contains("prefix"),
        "{text}"
    );
    assert!(matches!(
        Outbox::with_prefix("bad-prefix"),
        Err(Error::Invalid(_))
    ));
    bus.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_store_options_are_refused() {
    let (_dir, path) = temp();
    for options in [
        SqliteOptions {
            table_prefix: "x; DROP TABLE orders".into(),
            ..SqliteOptions::default()
        },
        SqliteOptions {
            watch_interval: Some(Duration::ZERO),
            ..SqliteOptions::default()
        },
    ] {
        let err = durabus::SqliteStore::open(&path, options)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbox_publishes_are_counted_and_snapshotted_like_every_other_publish() {
    let (_dir, path) = temp();
    let bus = EventBus::builder()
        .sqlite(&path)
        .payload_snapshots(true)
        .build()
        .await
        .unwrap();
    let outbox = bus.outbox().unwrap();
    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    let id = outbox
        .publish(&tx, "order.placed", &serde_json::json!({"order": 7}))
        .unwrap();
    let batch = outbox
        .publish_batch(
            &tx,
            vec![
                NewEvent::new("order.placed", &8).unwrap(),
                NewEvent::new("order.paid", &9).unwrap(),
            ],
        )
        .unwrap();
    tx.commit().unwrap();
    let s = crate::suite::telemetry::scrape(&bus).await;
    let published =
        |t| crate::suite::telemetry::num(&s, "durabus_events_published_total", &[("type", t)]);
    assert_eq!(
        (published("order.placed"), published("order.paid")),
        (2.0, 1.0)
    );
    for id in [id, batch[1]] {
        let snap = bus.payloads().get(id, "published").await.unwrap();
        assert!(snap.payload.is_some(), "{snap:?}");
    }
    // An id already stored is neither stored nor counted again.
    let again = NewEvent::new("order.paid", &9).unwrap().with_id(batch[1]);
    outbox.publish_event(&conn, again).unwrap();
    let s = crate::suite::telemetry::scrape(&bus).await;
    assert_eq!(
        crate::suite::telemetry::num(
            &s,
            "durabus_events_published_total",
            &[("type", "order.paid")]
        ),
        1.0
    );
    bus.shutdown().await.unwrap();
}

/// Publish options travel through the outbox: a delayed, prioritised event written in the
/// application's transaction is stored as scheduled, delivered once its time comes (on the
/// injected clock), and a bad option fails the call with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_event_can_be_delayed_and_prioritised() {
    let (_dir, path) = temp();
    let clock = durabus::ManualClock::default();
    let bus = EventBus::builder()
        .sqlite_with(
            &path,
            SqliteOptions {
                watch_interval: Some(Duration::from_millis(5)),
                ..SqliteOptions::default()
            },
        )
        .clock(Arc::new(clock.clone()))
        .poll_interval(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    let calls = Arc::new(Mutex::new(0usize));
    let c = calls.clone();
    bus.subscribe(
        "order.*",
        move |_e: Event| {
            *c.lock().unwrap() += 1;
            async { Ok(()) }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    let outbox = bus.outbox().unwrap().with_clock(Arc::new(clock.clone()));
    let mut conn = app_connection(&path);
    let tx = conn.transaction().unwrap();
    let event = NewEvent::new("order.remind", &1)
        .unwrap()
        .delay(Duration::from_secs(600))
        .priority(3);
    let id = outbox.publish_event(&tx, event).unwrap();
    let bad = NewEvent::new("order.remind", &2).unwrap().priority(500);
    let err = outbox.publish_event(&tx, bad).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    tx.commit().unwrap();
    let stored = bus.store().get_event(id).await.unwrap().unwrap();
    assert_eq!(stored.status, EventStatus::Scheduled);
    assert_eq!(stored.priority, 3);
    let due = stored.deliver_at.unwrap();
    assert_eq!(
        bus.store().counts().await.unwrap().len(),
        1,
        "only the good event"
    );
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(*calls.lock().unwrap(), 0);
    clock.set(due);
    eventually("the delayed outbox event", || async {
        status(&bus, id).await == Some(EventStatus::Done)
    })
    .await;
    assert_eq!(*calls.lock().unwrap(), 1);
    bus.shutdown().await.unwrap();
}

/// A dedup key travels through the outbox: taken in the application's transaction, given back
/// when it rolls back, and a second publish of the key in its window answers the first id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_dedup_key_is_taken_in_the_callers_transaction() {
    let (_dir, path) = temp();
    let (bus, _) = bus(&path, "app_bus_").await;
    let outbox = bus.outbox().unwrap();
    let keyed = |n: i32| {
        NewEvent::new("order.placed", &n)
            .unwrap()
            .dedup("order-1", Duration::from_secs(60))
    };
    let mut conn = app_connection(&path);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let dropped = outbox.publish_event(&tx, keyed(1)).unwrap();
    tx.rollback().unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let first = outbox.publish_event(&tx, keyed(2)).unwrap();
    assert_ne!(first, dropped, "a rolled-back publish holds no key");
    assert_eq!(outbox.publish_event(&tx, keyed(3)).unwrap(), first);
    tx.commit().unwrap();
    let ids = outbox.publish_batch(&conn, vec![keyed(4)]).unwrap();
    assert_eq!(ids, vec![first]);
    let stored = bus
        .history()
        .list(durabus::EventQuery::default())
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, "2");
    // Ordering keys too: the second event of a key waits behind the first. Read on a bus that
    // delivers nothing: a running one would handle the head (no handler listens to its type)
    // and move the key on before the rows are read.
    bus.shutdown().await.unwrap();
    let bus = EventBus::builder()
        .sqlite_with(
            &path,
            SqliteOptions {
                table_prefix: "app_bus_".to_owned(),
                ..SqliteOptions::default()
            },
        )
        .build()
        .await
        .unwrap();
    let outbox = bus.outbox().unwrap();
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .unwrap();
    let steps: Vec<_> = (0..2)
        .map(|n| {
            let e = NewEvent::new("parcel.step", &n)
                .unwrap()
                .ordering_key("p-1");
            outbox.publish_event(&tx, e).unwrap()
        })
        .collect();
    tx.commit().unwrap();
    let first = bus.store().get_event(steps[0]).await.unwrap().unwrap();
    let second = bus.store().get_event(steps[1]).await.unwrap().unwrap();
    assert!(first.next_attempt_at.is_some(), "the head is due");
    assert_eq!(second.next_attempt_at, None, "the second waits for its key");
    assert_eq!(second.ordering_key.as_deref(), Some("p-1"));
    bus.shutdown().await.unwrap();
}

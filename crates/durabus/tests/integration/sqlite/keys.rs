//! Ordering keys' queues on SQLite: a database of schema 16, whose queues were rows of a table
//! of their own (`keyed`), keeps each key's order and its held dead letters when it is
//! upgraded to queues kept on the events' rows.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use durabus::{Event, SubscribeOptions};

use super::*;
use crate::support::eventually;

/// Takes a database written by this build back to schema 16: the queues and the held keys
/// move into the table of then (in each key's order), the column, index and table of schema 17
/// go.
fn back_to_schema_16(path: &std::path::Path) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE durabus_keyed (
             seq INTEGER PRIMARY KEY,
             key TEXT NOT NULL,
             event_id TEXT NOT NULL UNIQUE,
             held_since INTEGER
         );
         CREATE INDEX durabus_keyed_key ON durabus_keyed(key, seq);
         CREATE INDEX durabus_keyed_held ON durabus_keyed(held_since)
             WHERE held_since IS NOT NULL;
         INSERT INTO durabus_keyed (key, event_id, held_since)
             SELECT e.ordering_key, e.id, h.held_since
             FROM durabus_events AS e LEFT JOIN durabus_key_holds AS h ON h.event_id = e.id
             WHERE e.key_seq IS NOT NULL ORDER BY e.ordering_key, e.key_seq;
         DROP INDEX durabus_events_key;
         DROP TABLE durabus_key_holds;
         ALTER TABLE durabus_events DROP COLUMN key_seq;
         UPDATE durabus_meta SET value = '16' WHERE key = 'schema_version';",
    )
    .unwrap();
}

fn count(path: &std::path::Path, sql: &str) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_of_schema_16_keep_their_order_through_the_upgrade() {
    let (_dir, path) = temp();
    // Two keys, five events each, interleaved in one batch and not delivered: each key has a
    // head and four events waiting behind it.
    let bus = EventBus::open(&path).await.unwrap();
    let mut batch = Vec::new();
    for n in 0..5i64 {
        for key in ["a", "b"] {
            batch.push(NewEvent::new("o.step", &n).unwrap().ordering_key(key));
        }
    }
    bus.enqueue_batch(batch).await.unwrap();
    bus.shutdown().await.unwrap();
    back_to_schema_16(&path);
    assert_eq!(count(&path, "SELECT count(*) FROM durabus_keyed"), 10);
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE next_attempt_at IS NULL"
        ),
        8,
        "four events of each key wait without a due time"
    );

    let bus = EventBus::open(&path).await.unwrap();
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM sqlite_master WHERE name = 'durabus_keyed'"
        ),
        0,
        "the upgrade drops the table"
    );
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_seq IS NOT NULL"
        ),
        10
    );
    let order: Arc<Mutex<HashMap<String, Vec<i64>>>> = Arc::default();
    let o = order.clone();
    bus.subscribe(
        "o.*",
        move |e: Event| {
            let o = o.clone();
            async move {
                let n: i64 = e.payload().unwrap();
                o.lock()
                    .unwrap()
                    .entry(e.ordering_key.clone().unwrap_or_default())
                    .or_default()
                    .push(n);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    eventually("every event handled", || async {
        (order.lock().unwrap().values().map(Vec::len).sum::<usize>() == 10).then_some(())
    })
    .await;
    for key in ["a", "b"] {
        assert_eq!(
            order.lock().unwrap()[key],
            (0..5).collect::<Vec<_>>(),
            "key {key}"
        );
    }
    // The last runs' outcomes are written after their handlers return.
    eventually("every event gave up its place", || async {
        (count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_seq IS NOT NULL",
        ) == 0)
            .then_some(())
    })
    .await;
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_holding_its_key_in_schema_16_still_holds_it_after_the_upgrade() {
    let (_dir, path) = temp();
    let bus = EventBus::open(&path).await.unwrap();
    for n in 0..3i64 {
        bus.enqueue_event(NewEvent::new("o.step", &n).unwrap().ordering_key("k"))
            .await
            .unwrap();
    }
    bus.shutdown().await.unwrap();
    // The head died holding its key (what `hold_key_on_dead_letter` leaves behind).
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "UPDATE durabus_events SET status = 'dlq', next_attempt_at = NULL WHERE key_seq = 1;
             INSERT INTO durabus_key_holds (event_id, held_since)
                 SELECT id, 5 FROM durabus_events WHERE key_seq = 1;",
        )
        .unwrap();
    back_to_schema_16(&path);
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_keyed WHERE held_since = 5"
        ),
        1
    );
    let bus = EventBus::open(&path).await.unwrap();
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_key_holds AS h JOIN durabus_events AS e
                 ON e.id = h.event_id WHERE h.held_since = 5 AND e.status = 'dlq' AND e.key_seq = 1"
        ),
        1
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    bus.subscribe(
        "o.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(e.payload::<i64>().unwrap());
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();
    // The key stays held: nothing behind the dead letter runs.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(seen.lock().unwrap().is_empty());
    let g = bus.store().gauges(Timestamp(10)).await.unwrap();
    assert_eq!((g.held_keys, g.oldest_held_key_at), (1, Some(Timestamp(5))));
    bus.shutdown().await.unwrap();
}

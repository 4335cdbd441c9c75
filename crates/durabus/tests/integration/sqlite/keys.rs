//! Ordering keys' queues on SQLite: a database of schema 16, whose queues were rows of a table
//! of their own (`keyed`), or of schema 17, whose queues were places on the events' rows
//! (`key_seq`) read through an index by key, or of schema 18 (the flag's old name), keeps each
//! key's order and its held dead letters when it is upgraded to queues linked through the
//! events' rows; and the next event of a key is handed over by its head's completion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use durabus::{Event, SubscribeOptions};

use super::*;
use crate::support::eventually;

/// Takes a database written by this build back to schema 18: the queue flag has its old name.
fn back_to_schema_18(path: &std::path::Path) {
    Connection::open(path)
        .unwrap()
        .execute_batch(
            "ALTER TABLE durabus_events RENAME COLUMN key_queued TO key_seq;
             UPDATE durabus_meta SET value = '18' WHERE key = 'schema_version';",
        )
        .unwrap();
}

/// Takes a database written by this build back to schema 16: the queues and the held keys
/// move into the table of then (in each key's order: the tests queue their events in row
/// order), the columns, indexes and tables of schemas 17 to 19 go.
fn back_to_schema_16(path: &std::path::Path) {
    back_to_schema_18(path);
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
             WHERE e.key_seq IS NOT NULL ORDER BY e.ordering_key, e.rowid;
         DROP INDEX durabus_events_key_next;
         DROP TABLE durabus_key_tails;
         DROP TABLE durabus_key_holds;
         ALTER TABLE durabus_events DROP COLUMN key_prev;
         ALTER TABLE durabus_events DROP COLUMN key_seq;
         UPDATE durabus_meta SET value = '16' WHERE key = 'schema_version';",
    )
    .unwrap();
}

/// Takes a database written by this build back to schema 17: each queued event gets its place
/// in its key's queue (10, 20, 30, … in row order, the tests' queue order; the gaps are those
/// that events leaving a queue left), read through the index by key of then; the links and
/// the tails of schema 18 go.
fn back_to_schema_17(path: &std::path::Path) {
    back_to_schema_18(path);
    let conn = Connection::open(path).unwrap();
    conn.execute_batch(
        "UPDATE durabus_events SET key_seq = 10 * (
             SELECT count(*) FROM durabus_events AS p
             WHERE p.ordering_key = durabus_events.ordering_key AND p.key_seq IS NOT NULL
                 AND p.rowid <= durabus_events.rowid)
             WHERE key_seq IS NOT NULL;
         DROP INDEX durabus_events_key_next;
         DROP TABLE durabus_key_tails;
         ALTER TABLE durabus_events DROP COLUMN key_prev;
         CREATE INDEX durabus_events_key ON durabus_events(ordering_key, key_seq)
             WHERE key_seq IS NOT NULL;
         UPDATE durabus_meta SET value = '17' WHERE key = 'schema_version';",
    )
    .unwrap();
}

/// Publishes events `0..n` under key `k` on the file at `path`, one at a time, and closes the
/// bus before any runs: the first is the key's head, the others wait behind it.
async fn queue_on_key_k(path: &std::path::Path, n: i64) {
    let bus = EventBus::open(path).await.unwrap();
    for n in 0..n {
        bus.enqueue_event(NewEvent::new("o.step", &n).unwrap().ordering_key("k"))
            .await
            .unwrap();
    }
    bus.shutdown().await.unwrap();
}

/// Subscribes to `o.*` a handler that records each payload it is called with, in order.
async fn payloads_seen(bus: &EventBus) -> Arc<Mutex<Vec<i64>>> {
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
    seen
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
            "SELECT count(*) FROM durabus_events WHERE key_queued IS NOT NULL"
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
            "SELECT count(*) FROM durabus_events WHERE key_queued IS NOT NULL",
        ) == 0)
            .then_some(())
    })
    .await;
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_holding_its_key_in_schema_16_still_holds_it_after_the_upgrade() {
    let (_dir, path) = temp();
    queue_on_key_k(&path, 3).await;
    // The head died holding its key (what `hold_key_on_dead_letter` leaves behind).
    Connection::open(&path)
        .unwrap()
        .execute_batch(
            "UPDATE durabus_events SET status = 'dlq', next_attempt_at = NULL
                 WHERE key_queued IS NOT NULL AND key_prev IS NULL;
             INSERT INTO durabus_key_holds (event_id, held_since)
                 SELECT id, 5 FROM durabus_events WHERE status = 'dlq';",
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
                 ON e.id = h.event_id WHERE h.held_since = 5 AND e.status = 'dlq' AND e.key_queued = 1"
        ),
        1
    );
    let seen = payloads_seen(&bus).await;
    bus.start().await.unwrap();
    // The key stays held: nothing behind the dead letter runs.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(seen.lock().unwrap().is_empty());
    let g = bus.store().gauges(Timestamp(10)).await.unwrap();
    assert_eq!((g.held_keys, g.oldest_held_key_at), (1, Some(Timestamp(5))));
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_of_schema_17_keep_their_order_and_take_new_events_behind_them() {
    let (_dir, path) = temp();
    // Two keys, four events each, not delivered.
    let bus = EventBus::open(&path).await.unwrap();
    let mut batch = Vec::new();
    for n in 0..4i64 {
        for key in ["a", "b"] {
            batch.push(NewEvent::new("o.step", &n).unwrap().ordering_key(key));
        }
    }
    bus.enqueue_batch(batch).await.unwrap();
    bus.shutdown().await.unwrap();
    back_to_schema_17(&path);
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_seq IN (10, 20, 30, 40)"
        ),
        8
    );

    let bus = EventBus::open(&path).await.unwrap();
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM sqlite_master WHERE name = 'durabus_events_key'"
        ),
        0,
        "the upgrade drops the index by key"
    );
    assert_eq!(
        count(&path, "SELECT count(*) FROM durabus_key_tails"),
        2,
        "one tail per key"
    );
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_prev IS NOT NULL"
        ),
        6,
        "every event but the heads points at the one ahead"
    );
    // Published after the upgrade: behind the key's old events.
    for key in ["a", "b"] {
        bus.enqueue_event(NewEvent::new("o.step", &4i64).unwrap().ordering_key(key))
            .await
            .unwrap();
    }
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
    eventually("every queue emptied", || async {
        (count(
            &path,
            "SELECT (SELECT count(*) FROM durabus_key_tails)
                  + (SELECT count(*) FROM durabus_events
                     WHERE key_queued IS NOT NULL OR key_prev IS NOT NULL)",
        ) == 0)
            .then_some(())
    })
    .await;
    bus.shutdown().await.unwrap();
}

/// A database of schema 18 upgrades with its queues kept, and a process of schema 18 still
/// running on the file after another upgraded it fails on its keyed statements ("no such
/// column") instead of writing the flag as a place beside no link, which would leave events
/// that nothing wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_of_schema_18_fail_on_an_upgraded_file() {
    let (_dir, path) = temp();
    queue_on_key_k(&path, 2).await;
    back_to_schema_18(&path);
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_seq IS NOT NULL"
        ),
        2
    );
    let bus = EventBus::open(&path).await.unwrap();
    assert_eq!(
        count(
            &path,
            "SELECT count(*) FROM durabus_events WHERE key_queued IS NOT NULL"
        ),
        2,
        "the upgrade keeps both events in the queue"
    );
    let conn = Connection::open(&path).unwrap();
    for sql in [
        // Schema 18's insert of a keyed event, its completion of a key's head, its check.
        "INSERT INTO durabus_events (id, type, payload, created_at, updated_at, ordering_key,
             key_seq, key_prev) VALUES ('x', 't', '1', 0, 0, 'k', 1, NULL)",
        "UPDATE durabus_events SET status = 'done', key_seq = NULL WHERE id = ?1",
        "SELECT 1 FROM durabus_events WHERE id = ?1 AND key_seq IS NOT NULL",
    ] {
        let err = conn
            .prepare(sql)
            .err()
            .unwrap_or_else(|| panic!("schema 18's statement still runs: {sql}"));
        assert!(err.to_string().contains("key_seq"), "{err}");
    }
    let seen = payloads_seen(&bus).await;
    bus.start().await.unwrap();
    eventually("both events handled", || async {
        (seen.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), vec![0, 1]);
    bus.shutdown().await.unwrap();
}

/// A key moved on by an operator (a cancelled head, a resolved dead letter that held it, a
/// held dead event deleted) wakes the worker in the commit that did it: the contract test, on
/// a store that does not look for commits on the file, so that nothing else wakes the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_moved_on_by_an_operator_wakes_the_worker_itself() {
    let h = crate::support::Harness::sqlite_unwatched();
    crate::suite::ordering::a_key_moved_on_by_an_operator_wakes_the_worker(&h).await;
    h.finish().await;
}

/// The check of the keys' lists that every SQLite contract test ends with finds nothing on a
/// sound file and names what a broken one breaks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_list_check_catches_broken_lists() {
    use crate::support::sqlite_key_lists_broken as broken;
    let (_dir, path) = temp();
    queue_on_key_k(&path, 3).await;
    assert_eq!(broken(&path), Vec::<String>::new());
    let conn = Connection::open(&path).unwrap();
    // The middle event loses its link: two heads, and the first has none behind it.
    conn.execute_batch(
        "UPDATE durabus_events SET key_prev = NULL
             WHERE rowid = (SELECT rowid FROM durabus_events ORDER BY rowid LIMIT 1 OFFSET 1);
         DELETE FROM durabus_key_tails;",
    )
    .unwrap();
    let found = broken(&path).join("\n");
    for what in [
        "more than one head",
        "has no last event",
        "waits for a wake-up",
    ] {
        assert!(found.contains(what), "{what} not in {found}");
    }
}

/// The store on the file at `path`.
async fn store_with(path: &std::path::Path) -> SqliteStore {
    SqliteStore::open(path, SqliteOptions::default())
        .await
        .unwrap()
}

/// Stores `events` as pending at `now`; their ids.
async fn insert(
    store: &SqliteStore,
    events: Vec<NewEvent>,
    now: Timestamp,
) -> Vec<durabus::EventId> {
    let ids = events.iter().map(|e| e.id).collect();
    store
        .insert(events, InsertMode::Pending, now)
        .await
        .unwrap();
    ids
}

fn keyed(key: &str, n: i64) -> NewEvent {
    NewEvent::new("o.step", &n).unwrap().ordering_key(key)
}

async fn status(store: &SqliteStore, id: durabus::EventId) -> EventStatus {
    store.get_event(id).await.unwrap().unwrap().status
}

async fn done(store: &SqliteStore, id: durabus::EventId, now: Timestamp) {
    let outcome = durabus::Outcome::Done {
        id,
        delivered: Vec::new(),
    };
    assert!(store.record(outcome, now).await.unwrap());
}

fn ids_of(events: &[Event]) -> Vec<durabus::EventId> {
    events.iter().map(|e| e.id).collect()
}

#[tokio::test]
async fn a_completion_claims_the_next_event_of_its_key_for_the_next_claim() {
    let (_dir, path) = temp();
    let store = store_with(&path).await;
    let now = Timestamp(1_000);
    let a = insert(&store, (0..4).map(|n| keyed("a", n)).collect(), now).await;
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![a[0]]);

    // The head's completion claims the next event of the key: no wake, no due time to wait.
    done(&store, a[0], now).await;
    assert_eq!(status(&store, a[1]).await, EventStatus::Processing);
    assert_eq!(
        status(&store, a[2]).await,
        EventStatus::Pending,
        "still waiting"
    );
    let claimed = store.claim_due(now, 10).await.unwrap();
    assert_eq!(ids_of(&claimed), vec![a[1]]);
    assert_eq!(claimed[0].status, EventStatus::Processing);
    assert!(
        store.claim_due(now, 10).await.unwrap().is_empty(),
        "once only"
    );

    // Given back unclaimed (a worker stopping or paused): pending at its place, due since it
    // was published, claimed once.
    done(&store, a[1], now).await;
    assert_eq!(store.give_back_set_aside(now).await.unwrap(), 1);
    let back = store.get_event(a[2]).await.unwrap().unwrap();
    assert_eq!(back.status, EventStatus::Pending);
    assert_eq!(back.next_attempt_at, Some(back.created_at));
    assert_eq!(back.retry_count, 0, "no attempt counted");
    assert_eq!(store.give_back_set_aside(now).await.unwrap(), 0);
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![a[2]]);
    assert!(store.claim_due(now, 10).await.unwrap().is_empty());

    // Set aside when the store closes: given back, and pending after the next open, with no
    // attempt counted by the recovery.
    done(&store, a[2], now).await;
    assert_eq!(status(&store, a[3]).await, EventStatus::Processing);
    store.close().await.unwrap();
    let store = store_with(&path).await;
    let last = store.get_event(a[3]).await.unwrap().unwrap();
    assert_eq!(last.status, EventStatus::Pending);
    assert_eq!(store.recover_processing(now).await.unwrap(), 0);
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![a[3]]);
    store.close().await.unwrap();
}

#[tokio::test]
async fn set_aside_events_take_half_a_claim_unless_the_table_is_known_to_have_nothing_due() {
    let (_dir, path) = temp();
    let store = store_with(&path).await;
    let now = Timestamp(1_000);
    // Four keys of four events each.
    let mut steps: Vec<Vec<durabus::EventId>> = vec![Vec::new(); 4];
    for key in ["a", "b", "c", "d"] {
        let ids = insert(&store, (0..4).map(|n| keyed(key, n)).collect(), now).await;
        for (step, id) in steps.iter_mut().zip(ids) {
            step.push(id);
        }
    }
    // The heads; the claim had room left, so the table is known to have nothing else due.
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), steps[0]);
    for id in &steps[0] {
        done(&store, *id, now).await;
    }
    // Nothing was written since that could make an event due in the table: the set-aside
    // events fill the claim without a look at it (no transaction).
    let (transactions, _) = store.write_stats();
    assert_eq!(ids_of(&store.claim_due(now, 4).await.unwrap()), steps[1]);
    assert_eq!(store.write_stats().0, transactions, "no look at the table");

    // A look is trusted for 5 ms of the claims' time (a back-off may run out meanwhile).
    for id in &steps[1] {
        done(&store, *id, now).await;
    }
    let later = now.plus(Duration::from_millis(5));
    let (transactions, _) = store.write_stats();
    assert_eq!(ids_of(&store.claim_due(later, 4).await.unwrap()), steps[2]);
    assert_eq!(
        store.write_stats().0,
        transactions + 1,
        "the table looked at"
    );

    // Four events without a key become due: a claim that set-aside events would fill leaves
    // the table half of it.
    let plain: Vec<NewEvent> = (0..4)
        .map(|n| NewEvent::new("o.plain", &n).unwrap())
        .collect();
    let plain = insert(&store, plain, later).await;
    for id in &steps[2] {
        done(&store, *id, later).await;
    }
    let first = ids_of(&store.claim_due(later, 4).await.unwrap());
    assert_eq!(first, vec![steps[3][0], steps[3][1], plain[0], plain[1]]);
    let second = ids_of(&store.claim_due(later, 10).await.unwrap());
    assert_eq!(second, vec![steps[3][2], steps[3][3], plain[2], plain[3]]);
    store.close().await.unwrap();
}

#[tokio::test]
async fn claims_of_one_alternate_between_set_aside_events_and_the_table() {
    let (_dir, path) = temp();
    let store = store_with(&path).await;
    let now = Timestamp(1_000);
    let a = insert(&store, (0..3).map(|n| keyed("a", n)).collect(), now).await;
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![a[0]]);
    let plain: Vec<NewEvent> = (0..2)
        .map(|n| NewEvent::new("o.plain", &n).unwrap())
        .collect();
    let plain = insert(&store, plain, now).await;
    // `Bus::poll` claims one at a time: a key's chain of completions does not starve the
    // events due in the table.
    done(&store, a[0], now).await;
    assert_eq!(ids_of(&store.claim_due(now, 1).await.unwrap()), vec![a[1]]);
    done(&store, a[1], now).await;
    assert_eq!(
        ids_of(&store.claim_due(now, 1).await.unwrap()),
        vec![plain[0]]
    );
    assert_eq!(ids_of(&store.claim_due(now, 1).await.unwrap()), vec![a[2]]);
    assert_eq!(
        ids_of(&store.claim_due(now, 1).await.unwrap()),
        vec![plain[1]]
    );
    assert!(store.claim_due(now, 1).await.unwrap().is_empty());
    store.close().await.unwrap();
}

#[tokio::test]
async fn recovery_gives_set_aside_events_back_uncounted_and_never_delivers_them_twice() {
    let (_dir, path) = temp();
    let store = store_with(&path).await;
    let now = Timestamp(1_000);
    let a = insert(&store, vec![keyed("a", 0), keyed("a", 1)], now).await;
    store.claim_due(now, 10).await.unwrap();
    done(&store, a[0], now).await;
    // It never ran: given back, not recovered with an attempt counted.
    assert_eq!(store.recover_processing(now).await.unwrap(), 0);
    let back = store.get_event(a[1]).await.unwrap().unwrap();
    assert_eq!((back.status, back.retry_count), (EventStatus::Pending, 0));
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![a[1]]);
    assert!(store.claim_due(now, 10).await.unwrap().is_empty());
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_successor_due_later_or_with_a_priority_is_woken_into_its_lane_not_set_aside() {
    let (_dir, path) = temp();
    let store = store_with(&path).await;
    let now = Timestamp(1_000);
    let later = NewEvent::new("o.step", &1)
        .unwrap()
        .ordering_key("a")
        .deliver_at(Timestamp(5_000));
    let urgent = NewEvent::new("o.step", &2)
        .unwrap()
        .ordering_key("b")
        .priority(5);
    let a = insert(&store, vec![keyed("a", 0), later], now).await;
    let b = insert(&store, vec![keyed("b", 0), urgent], now).await;
    assert_eq!(store.claim_due(now, 10).await.unwrap().len(), 2);
    done(&store, a[0], now).await;
    done(&store, b[0], now).await;
    assert_eq!(status(&store, a[1]).await, EventStatus::Scheduled);
    assert_eq!(status(&store, b[1]).await, EventStatus::Pending);
    assert_eq!(store.give_back_set_aside(now).await.unwrap(), 0);
    assert_eq!(ids_of(&store.claim_due(now, 10).await.unwrap()), vec![b[1]]);
    assert_eq!(
        ids_of(&store.claim_due(Timestamp(5_000), 10).await.unwrap()),
        vec![a[1]]
    );
    store.close().await.unwrap();
}

//! Locks held by other processes, group commit, durability.

use super::*;

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
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    store.close().await.unwrap();
}

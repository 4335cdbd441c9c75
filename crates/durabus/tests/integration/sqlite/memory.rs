//! In-memory databases: private, shared by name, readers waiting out the writer.

use super::*;

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
        Err(Error::Invalid(_))
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
                Err(Error::Invalid(_))
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

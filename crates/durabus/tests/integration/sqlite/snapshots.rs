//! Payload snapshots in the file: soft delete clears the bytes, shared snapshots.

use super::*;

/// A soft-deleted snapshot's compressed bytes are overwritten in the file, not only hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_soft_deleted_snapshot_is_gone_from_the_file() {
    let (_dir, path) = temp();
    // Random text: gzip keeps it mostly as literals, so the stored blob is distinctive.
    let text: String = (0..8192)
        .map(|_| char::from(b'a' + fastrand_byte() % 26))
        .collect();
    let id = durabus::EventId::new();
    let bus = EventBus::open(&path).await.unwrap();
    bus.payloads()
        .store_snapshot(id, "secret.x", "webhook_raw", &text)
        .await
        .unwrap();
    let blob = bus.store().payload_list(id).await.unwrap()[0]
        .blob
        .clone()
        .unwrap();
    let needle = &blob[blob.len() / 2..blob.len() / 2 + 64];
    bus.shutdown().await.unwrap();
    assert!(
        file_holds(&path, needle),
        "the test must see the bytes first"
    );
    let bus = EventBus::open(&path).await.unwrap();
    let actor = durabus::Actor::new("ann", durabus::ActorKind::Library);
    bus.payloads()
        .delete(id, "right to be forgotten", &actor)
        .await
        .unwrap();
    bus.shutdown().await.unwrap();
    assert!(!file_holds(&path, needle), "the bytes are overwritten");
}

/// A `published` snapshot of a payload as published is a mark on the event's row, not a
/// second copy of the payload: no snapshot row is written with the publish; one is written,
/// compressed, when the event's row is purged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_snapshot_shares_the_events_payload_until_the_row_goes() {
    let (_dir, path) = temp();
    let bus = EventBus::builder()
        .database(path.to_str().unwrap())
        .payload_snapshots(true)
        .build()
        .await
        .unwrap();
    bus.subscribe(
        "ship.*",
        |_e: durabus::Event| async { Ok(()) },
        durabus::SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let id = bus
        .publish("ship.created", &serde_json::json!({"order": 7}))
        .await
        .unwrap();
    let rows = |path: &std::path::Path| -> (i64, i64) {
        let conn = Connection::open(path).unwrap();
        let snapshots: i64 = conn
            .query_row("SELECT count(*) FROM durabus_event_payloads", [], |r| {
                r.get(0)
            })
            .unwrap();
        let marked: i64 = conn
            .query_row(
                "SELECT count(*) FROM durabus_events WHERE published_snapshot IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        (snapshots, marked)
    };
    for _ in 0..500 {
        if bus.store().get_event(id).await.unwrap().unwrap().status == durabus::EventStatus::Done {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(rows(&path), (0, 1), "a mark, no copy");
    let seen = bus.payloads().get(id, "published").await.unwrap();
    assert_eq!(seen.payload.as_deref(), Some(r#"{"order":7}"#));
    assert_eq!(bus.history().purge(Duration::ZERO).await.unwrap(), 1);
    assert_eq!(rows(&path), (1, 0), "a compressed row of its own");
    assert_eq!(bus.payloads().get(id, "published").await.unwrap(), seen);
    bus.shutdown().await.unwrap();
}

/// A shared snapshot is a mark on its event's row: on its own (without its event) the store
/// refuses it rather than storing an empty snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_snapshot_is_refused_without_its_event() {
    let (_dir, path) = temp();
    let bus = EventBus::open(&path).await.unwrap();
    let shared = durabus::payload::NewSnapshot {
        event_id: durabus::EventId::new(),
        event_type: "ship.created".into(),
        stage: "published".into(),
        blob: Vec::new(),
        size_original: 2,
        flags: durabus::payload::detect::ContentFlags::default(),
        created_at: Timestamp(1),
        shared: true,
    };
    let err = bus
        .store()
        .payload_put(vec![shared.clone()])
        .await
        .unwrap_err();
    assert_eq!(err.kind(), durabus::ErrorKind::Internal, "{err}");
    assert!(
        bus.payloads()
            .list(shared.event_id)
            .await
            .unwrap()
            .is_empty()
    );
    bus.shutdown().await.unwrap();
}

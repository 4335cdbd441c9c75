//! Snapshots: byte for byte, compressed, configured per type, taken automatically.

use super::*;

pub async fn snapshots_round_trip_byte_for_byte(h: &Harness) {
    let bus = h.bus().await;
    let payloads = bus.payloads();
    let mut deep = json!("bottom");
    for i in 0..100 {
        deep = json!({ format!("level{i}"): deep });
    }
    let shapes = [
        json!({"order": 1, "items": [1, 2, 3]}),
        json!("1 MiB: ".to_owned() + &"x".repeat(1024 * 1024)),
        json!({"text": "grüße, 世界, emoji 🎉, \u{0001} control", "rtl": "שלום"}),
        deep,
        json!([]),
        json!(null),
        json!(12.5e300),
    ];
    for (i, value) in shapes.iter().enumerate() {
        let id = EventId::new();
        assert!(
            payloads
                .store_snapshot(id, "shape.test", "webhook_raw", value)
                .await
                .unwrap()
        );
        let got = payloads.get(id, "webhook_raw").await.unwrap();
        let want = serde_json::to_string(value).unwrap();
        assert_eq!(got.payload.as_deref(), Some(want.as_str()), "shape {i}");
        assert_eq!(got.size_original, want.len() as u64);
        assert!(got.size_compressed > 0);
        assert_eq!(got.stage, "webhook_raw");
        assert_eq!(got.event_type, "shape.test");
        assert!(got.deleted.is_none());
    }
    // Several stages of one event, newest first.
    let id = EventId::new();
    for (k, stage) in ["agent_request", "agent_response", "channel_send"]
        .iter()
        .enumerate()
    {
        payloads
            .store_snapshot(id, "chat.message", stage, &json!({ "k": k }))
            .await
            .unwrap();
        h.advance(Duration::from_millis(5));
    }
    let list = payloads.list(id).await.unwrap();
    let stages: Vec<&str> = list.iter().map(|s| s.stage.as_str()).collect();
    assert_eq!(
        stages,
        vec!["channel_send", "agent_response", "agent_request"]
    );
    assert_eq!(
        payloads.get(id, "nope").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(payloads.list(EventId::new()).await.unwrap().is_empty());
    assert_eq!(
        payloads
            .store_snapshot(id, "chat.message", "bad stage", &1)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
    bus.shutdown().await.unwrap();
}

pub async fn realistic_json_compresses_five_to_ten_times(h: &Harness) {
    let bus = h.bus().await;
    let order = json!({
        "order_id": "ord_8f3a2c",
        "customer": {"id": "cus_1923", "email": "ann@example.com", "name": "Ann Example"},
        "items": (0..40).map(|i| json!({
            "sku": format!("SKU-{:05}", i % 7),
            "title": "Stainless steel teapot, 1.2 litre, brushed finish",
            "quantity": 1 + i % 3,
            "unit_price": {"amount": 2499, "currency": "EUR"},
            "tax": {"rate": "0.19", "amount": 475, "currency": "EUR"}
        })).collect::<Vec<_>>(),
        "shipping": {"method": "standard", "address": {"street": "Main Street 1", "city": "Berlin", "country": "DE"}}
    });
    let id = EventId::new();
    bus.payloads()
        .store_snapshot(id, "order.placed", "webhook_raw", &order)
        .await
        .unwrap();
    let s = bus.payloads().get(id, "webhook_raw").await.unwrap();
    let ratio = s.size_original as f64 / s.size_compressed as f64;
    assert!(
        (5.0..=60.0).contains(&ratio),
        "{} → {} bytes: {ratio:.1}×",
        s.size_original,
        s.size_compressed
    );
    bus.shutdown().await.unwrap();
}

pub async fn configuration_is_per_type_with_a_default(h: &Harness) {
    let bus = h.bus().await;
    let p = bus.payloads();
    assert!(p.configs().await.unwrap().is_empty());
    let star = p
        .set_config("*", config(&["published", "custom_stage"], 7, &[]), &ann())
        .await
        .unwrap();
    assert_eq!(star.updated_by, "ann");
    p.set_config("order.paid", config(&["error"], 30, &["$.card"]), &ann())
        .await
        .unwrap();
    let rows = p.configs().await.unwrap();
    assert_eq!(rows.len(), 2);
    // The exact type's row decides; `*` for the rest.
    let id = EventId::new();
    assert!(
        !p.store_snapshot(id, "order.paid", "published", &1)
            .await
            .unwrap()
    );
    assert!(
        p.store_snapshot(id, "order.paid", "error", &1)
            .await
            .unwrap()
    );
    assert!(
        p.store_snapshot(id, "user.new", "published", &1)
            .await
            .unwrap()
    );
    assert!(
        p.store_snapshot(id, "user.new", "custom_stage", &1)
            .await
            .unwrap()
    );
    assert!(!p.store_snapshot(id, "user.new", "error", &1).await.unwrap());
    // Replacing and deleting rows.
    p.set_config("order.paid", config(&["*"], 1, &[]), &ann())
        .await
        .unwrap();
    assert!(
        p.store_snapshot(id, "order.paid", "published", &2)
            .await
            .unwrap()
    );
    p.delete_config("order.paid").await.unwrap();
    assert_eq!(
        p.delete_config("order.paid").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    // Bad input is refused and changes nothing.
    for (t, input) in [
        ("", config(&["*"], 1, &[])),
        ("x", config(&["*"], -1, &[])),
        ("x", config(&["no spaces"], 1, &[])),
        ("x", config(&["*"], 1, &["card.number"])),
        ("order.*", config(&["*"], 1, &[])),
    ] {
        let e = p.set_config(t, input, &ann()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{t}: {e}");
    }
    assert_eq!(p.configs().await.unwrap().len(), 1);
    bus.shutdown().await.unwrap();
}

pub async fn automatic_snapshots_follow_the_configuration(h: &Harness) {
    let bus = snapshotting_bus(h).await;
    bus.payloads()
        .set_config("quiet.x", config(&[STAGE_ERROR], 14, &[]), &ann())
        .await
        .unwrap();
    bus.subscribe(
        "*.fail",
        |_e: Event| async { Err("handler said no".into()) },
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
    )
    .await
    .unwrap();
    let ok = bus.publish("order.ok", &json!({"n": 1})).await.unwrap();
    let p = bus.payloads();
    let s = p.get(ok, STAGE_PUBLISHED).await.unwrap();
    assert_eq!(s.payload.as_deref(), Some(r#"{"n":1}"#));
    assert_eq!(p.list(ok).await.unwrap().len(), 1, "no error: one snapshot");
    // A failing attempt: its payload and error at `error`.
    let failed = bus.publish("order.fail", &json!({"n": 2})).await.unwrap();
    let e = p.get(failed, STAGE_ERROR).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(e.payload.as_deref().unwrap()).unwrap();
    assert_eq!(v["payload"]["n"], 2);
    assert_eq!(v["error"], "handler said no");
    assert_eq!(v["attempt"], 1);
    // A type configured for errors only: no `published` snapshot.
    let quiet = bus.publish("quiet.x", &1).await.unwrap();
    assert!(p.list(quiet).await.unwrap().is_empty());
    // Publishing an id again stores no second snapshot.
    let again = durabus::NewEvent::new("order.ok", &json!({"n": 3}))
        .unwrap()
        .with_id(ok);
    bus.publish_event(again).await.unwrap();
    assert_eq!(p.list(ok).await.unwrap().len(), 1);
    // Batches too.
    let batch: Vec<_> = (0..3)
        .map(|i| durabus::NewEvent::new("batch.x", &i).unwrap())
        .collect();
    let ids = bus.enqueue_batch(batch).await.unwrap();
    for id in ids {
        assert!(p.get(id, STAGE_PUBLISHED).await.is_ok());
    }
    bus.shutdown().await.unwrap();
    // Off by default.
    let plain = h.bus().await;
    let id = plain.publish("order.ok", &1).await.unwrap();
    assert!(plain.payloads().list(id).await.unwrap().is_empty());
    plain.shutdown().await.unwrap();
}

pub async fn a_configuration_change_touches_only_what_it_names(h: &Harness) {
    let bus = h.bus().await;
    let p = bus.payloads();
    // A type without a row starts from the default.
    let first = p
        .update_config(
            "order.paid",
            durabus::ConfigChange {
                redact_add: vec!["$.card".into(), "$.cvv".into()],
                ..Default::default()
            },
            &ann(),
        )
        .await
        .unwrap();
    assert_eq!(first.stages, vec!["*".to_owned()]);
    assert_eq!(first.retention_days, 14);
    assert_eq!(first.redact, vec!["$.card".to_owned(), "$.cvv".to_owned()]);
    let days = p
        .update_config(
            "order.paid",
            durabus::ConfigChange {
                retention_days: Some(3),
                ..Default::default()
            },
            &ann(),
        )
        .await
        .unwrap();
    assert_eq!((days.retention_days, days.redact.len()), (3, 2), "{days:?}");
    let refused = p
        .update_config(
            "order.paid",
            durabus::ConfigChange {
                redact_remove: vec!["$.nope".into()],
                ..Default::default()
            },
            &ann(),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::InvalidInput);
    let empty = p
        .update_config("order.paid", durabus::ConfigChange::default(), &ann())
        .await
        .unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::InvalidInput);
    let cleared = p
        .update_config(
            "order.paid",
            durabus::ConfigChange {
                redact_clear: true,
                redact_before_store: Some(false),
                ..Default::default()
            },
            &ann(),
        )
        .await
        .unwrap();
    assert!(cleared.redact.is_empty());
    assert_eq!(cleared.retention_days, 3);
    assert_eq!(p.configs().await.unwrap(), vec![cleared]);
    bus.shutdown().await.unwrap();
}

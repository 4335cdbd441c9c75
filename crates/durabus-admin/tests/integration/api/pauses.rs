//! Pauses and rate limits: listed by a reader, started and resumed by an admin (recorded with the token's
//! name), what they park, and what is refused.

use super::*;

pub(super) async fn pauses_are_started_listed_and_resumed(api: &Api) {
    let (s, empty) = api
        .call(Method::GET, "/api/v2/pauses", Some(READ), None)
        .await;
    assert_eq!((s, empty), (StatusCode::OK, json!([])));
    let body = json!({"scope": "subscription", "target": "payments",
        "reason": "the card processor is down", "for_seconds": 3600});
    let (s, _) = api
        .call(
            Method::POST,
            "/api/v2/pauses",
            Some(READ),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a reader cannot pause");
    let (s, pause) = api.post("/api/v2/pauses", body).await;
    assert_eq!(s, StatusCode::OK, "{pause}");
    assert_eq!(
        pause["scope"],
        json!({"kind": "subscription", "target": "payments"})
    );
    assert_eq!(pause["actor"], json!({"name": "ops", "kind": "api"}));
    let now = durabus::Clock::now(&api.clock);
    let until: durabus::Timestamp = serde_json::from_value(pause["until"].clone()).unwrap();
    assert_eq!(until, now.plus(std::time::Duration::from_secs(3600)));
    let id = pause["id"].as_i64().unwrap();

    // The paused subscription's event is parked, and the listing counts it.
    let event = api
        .bus
        .publish("pay.card", &json!({"order": 1}))
        .await
        .unwrap();
    let stored = api.bus.store().get_event(event).await.unwrap().unwrap();
    assert_eq!(stored.next_attempt_at, Some(durabus::pause::parked_at(id)));
    let (s, listed) = api.get("/api/v2/pauses").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (listed[0]["id"].as_i64(), listed[0]["parked"].as_u64()),
        (Some(id), Some(1))
    );

    let (s, ended) = api
        .post(
            &format!("/api/v2/pauses/{id}/resume"),
            json!({"reason": "back"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{ended}");
    assert_eq!(ended["ended"]["kind"], "resumed");
    assert_eq!(ended["ended"]["actor"]["name"], "ops");
    assert_eq!(ended["ended"]["reason"], "back");
    let stored = api.bus.store().get_event(event).await.unwrap().unwrap();
    assert_eq!(stored.next_attempt_at, Some(now), "due again at once");
    assert_eq!(api.get("/api/v2/pauses").await.1, json!([]));
    let (_, history) = api
        .get("/api/v2/pauses?ended_since=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(history[0]["id"].as_i64(), Some(id));

    // Refused: ended already, unknown, and bad bodies (nothing recorded).
    assert_error(
        &api.call(
            Method::POST,
            &format!("/api/v2/pauses/{id}/resume"),
            Some(ADMIN),
            None,
        )
        .await,
        StatusCode::CONFLICT,
        "conflict",
    );
    assert_error(
        &api.post("/api/v2/pauses/999999/resume", json!({})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &api.post(
            "/api/v2/pauses",
            json!({"scope": "subscription", "target": "nobody", "reason": "x"}),
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    for bad in [
        json!({"scope": "bus", "target": "payments", "reason": "x"}),
        json!({"scope": "matching", "reason": "x"}),
        json!({"scope": "bus", "reason": "  "}),
        json!({"scope": "bus", "reason": "x", "for_seconds": 0}),
        json!({"scope": "bus", "reason": "x", "for_seconds": 40_000_000}),
    ] {
        let got = api.post("/api/v2/pauses", bad.clone()).await;
        assert_eq!(got.0, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", got.1);
    }
    assert_error(
        &api.post(
            "/api/v2/pauses",
            json!({"scope": "everything", "reason": "x"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (_, history) = api
        .get("/api/v2/pauses?ended_since=2000-01-01T00:00:00Z")
        .await;
    assert_eq!(history.as_array().map(Vec::len), Some(1));
    // The whole bus: no target.
    let (s, bus) = api
        .post(
            "/api/v2/pauses",
            json!({"scope": "bus", "reason": "maintenance"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{bus}");
    assert_eq!(bus["scope"], json!({"kind": "bus"}));
}

pub(super) async fn rate_limits_are_set_listed_and_removed(api: &Api) {
    let (s, empty) = api
        .call(Method::GET, "/api/v2/rate-limits", Some(READ), None)
        .await;
    assert_eq!((s, empty), (StatusCode::OK, json!([])));
    let body = json!({"per": 100, "interval_ms": 1000});
    let (s, _) = api
        .call(
            Method::PUT,
            "/api/v2/rate-limits/payments",
            Some(READ),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a reader cannot set one");
    let (s, set) = api
        .call(
            Method::PUT,
            "/api/v2/rate-limits/payments",
            Some(ADMIN),
            Some(body),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{set}");
    assert_eq!(
        (set["per"].as_u64(), set["interval_ms"].as_u64()),
        (Some(100), Some(1000))
    );
    assert_eq!(set["set_by"], json!({"name": "ops", "kind": "api"}));
    assert_eq!(
        api.get("/api/v2/rate-limits").await.1[0]["subscription"],
        "payments"
    );
    for bad in [
        json!({"per": 0, "interval_ms": 1000}),
        json!({"per": 1, "interval_ms": 0}),
        json!({"per": 1, "interval_ms": 86_400_001}),
        json!({"per": 2_000_000, "interval_ms": 1000}),
    ] {
        let got = api
            .call(
                Method::PUT,
                "/api/v2/rate-limits/payments",
                Some(ADMIN),
                Some(bad.clone()),
            )
            .await;
        assert_eq!(got.0, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", got.1);
    }
    assert_error(
        &api.call(
            Method::PUT,
            "/api/v2/rate-limits/nobody",
            Some(ADMIN),
            Some(json!({"per": 1, "interval_ms": 1000})),
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_eq!(
        api.get("/api/v2/rate-limits").await.1[0]["per"],
        100,
        "unchanged"
    );
    let (s, gone) = api
        .call(
            Method::DELETE,
            "/api/v2/rate-limits/payments",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{gone}");
    assert_error(
        &api.call(
            Method::DELETE,
            "/api/v2/rate-limits/payments",
            Some(ADMIN),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_eq!(api.get("/api/v2/rate-limits").await.1, json!([]));
}

pub(super) async fn concurrency_limits_are_set_listed_and_removed(api: &Api) {
    let (s, empty) = api
        .call(Method::GET, "/api/v2/concurrency-limits", Some(READ), None)
        .await;
    assert_eq!((s, empty), (StatusCode::OK, json!([])));
    let body = json!({"max_in_flight": 5, "per_process": 2});
    let (s, _) = api
        .call(
            Method::PUT,
            "/api/v2/concurrency-limits/payments",
            Some(READ),
            Some(body.clone()),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a reader cannot set one");
    let (s, set) = api
        .call(
            Method::PUT,
            "/api/v2/concurrency-limits/payments",
            Some(ADMIN),
            Some(body),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{set}");
    assert_eq!(
        (set["max_in_flight"].as_u64(), set["per_process"].as_u64()),
        (Some(5), Some(2))
    );
    assert_eq!(
        (set["in_flight"].as_u64(), set["waiting"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(set["set_by"]["name"], "ops");
    for bad in [
        json!({"max_in_flight": 0}),
        json!({"max_in_flight": 100_001}),
        json!({"max_in_flight": 2, "per_process": 0}),
        json!({"max_in_flight": 2, "partition_by": "metadata.tenant"}),
        json!({"max_in_flight": 2, "per_partition": 1}),
        json!({"max_in_flight": 2, "partition_by": "metadata.tenant", "per_partition": 0}),
        json!({"max_in_flight": 2, "partition_by": "tenant", "per_partition": 1}),
        json!({"max_in_flight": 2, "partition_by": "metadata.", "per_partition": 1}),
    ] {
        let got = api
            .call(
                Method::PUT,
                "/api/v2/concurrency-limits/payments",
                Some(ADMIN),
                Some(bad.clone()),
            )
            .await;
        assert_eq!(got.0, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {}", got.1);
    }
    assert_error(
        &api.call(
            Method::PUT,
            "/api/v2/concurrency-limits/nobody",
            Some(ADMIN),
            Some(json!({"max_in_flight": 1})),
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let listed = api.get("/api/v2/concurrency-limits").await.1;
    assert_eq!(listed[0]["max_in_flight"], 5, "unchanged");
    assert!(listed[0].get("partition").is_none(), "{listed}");
    // A limit per tenant, by a metadata field.
    let (s, set) = api
        .call(
            Method::PUT,
            "/api/v2/concurrency-limits/payments",
            Some(ADMIN),
            Some(
                json!({"max_in_flight": 50, "partition_by": "metadata.tenant", "per_partition": 2}),
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{set}");
    assert_eq!(
        set["partition"],
        json!({"by": "metadata.tenant", "max_in_flight": 2})
    );
    assert_eq!(
        api.get("/api/v2/concurrency-limits").await.1[0]["partition"]["by"],
        "metadata.tenant"
    );
    let (s, _) = api
        .call(
            Method::DELETE,
            "/api/v2/concurrency-limits/payments",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_error(
        &api.call(
            Method::DELETE,
            "/api/v2/concurrency-limits/payments",
            Some(ADMIN),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

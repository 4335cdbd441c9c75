//! Events, payloads and their configuration, replays, jobs, subscriptions, statistics, metrics and health.

use super::*;
use durabus::NewEvent;

pub(super) async fn events_payloads_and_their_configuration(api: &Api) {
    let ids = api.dead_payments("pay.card", 3).await;
    let (s, page) = api.get("/api/v2/events?event_type=pay.card&limit=2").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    assert_eq!(page["next_offset"], 2);
    let (_, rest) = api
        .get("/api/v2/events?event_type=pay.card&limit=2&offset=2")
        .await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert_eq!(rest["next_offset"], Value::Null);
    let (_, dlq) = api.get("/api/v2/events?status=dlq").await;
    assert_eq!(dlq["items"].as_array().unwrap().len(), 3);
    assert_error(
        &api.get("/api/v2/events?status=gone").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (s, e) = api.get(&format!("/api/v2/events/{}", ids[0])).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(e["type"], "pay.card");
    assert_error(
        &api.get(&format!("/api/v2/events/{}", durabus::EventId::new()))
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    // Snapshots: published and error, newest first, byte for byte.
    let base = format!("/api/v2/events/{}/payloads", ids[0]);
    let (s, snaps) = api.get(&base).await;
    assert_eq!(s, StatusCode::OK, "{snaps}");
    let stages: Vec<&str> = snaps
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert!(
        stages.contains(&"published") && stages.contains(&"error"),
        "{stages:?}"
    );
    let (s, published) = api.get(&format!("{base}/published")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(published["payload"]["note"], "<img src=x onerror=alert(1)>");
    assert_error(
        &api.get(&format!("{base}/webhook_raw")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let delete = |body: Option<Value>| api.call(Method::DELETE, &base, Some(ADMIN), body);
    assert_error(
        &delete(Some(json!({ "reason": "" }))).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &delete(Some(json!({}))).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (s, deleted) = delete(Some(json!({ "reason": "GDPR request 42" }))).await;
    assert_eq!(s, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["deleted"], 2);
    let (_, after) = api.get(&format!("{base}/published")).await;
    assert_eq!(after["payload"], Value::Null);
    assert_eq!(after["deleted"]["deleted_by"], "ops");
    assert_eq!(after["deleted"]["reason"], "GDPR request 42");
    assert_error(
        &delete(Some(json!({ "reason": "again" }))).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    // Configuration.
    let put = |t: &str, body: Value| {
        let uri = format!("/api/v2/payload-config/{t}");
        async move { api.call(Method::PUT, &uri, Some(ADMIN), Some(body)).await }
    };
    let (s, c) = put(
        "pay.card",
        json!({ "stages": ["published"], "retention_days": 3, "redact": ["$.card"] }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(
        (&c["retention_days"], &c["updated_by"]),
        (&json!(3), &json!("ops"))
    );
    assert_error(
        &put("pay.card", json!({ "retention_days": -1 })).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &put("pay.card", json!({ "retention": 5 })).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &put("%20", json!({})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (_, configs) = api.get("/api/v2/payload-config").await;
    assert!(
        configs
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["event_type"] == "pay.card"),
        "{configs}"
    );
    let path = "/api/v2/payload-config/pay.card";
    assert_eq!(
        api.call(Method::DELETE, path, Some(ADMIN), None).await.0,
        StatusCode::NO_CONTENT
    );
    assert_error(
        &api.call(Method::DELETE, path, Some(ADMIN), None).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

pub(super) async fn replays_preview_dry_run_start_follow_and_cancel(api: &Api) {
    api.healthy.store(true, std::sync::atomic::Ordering::SeqCst);
    for order in 0..3u64 {
        api.bus
            .publish("pay.card", &json!({ "order": order }))
            .await
            .unwrap();
    }
    let body = json!({ "all": true, "types": ["pay.*"], "mode": "preview" });
    let (s, preview) = api.post("/api/v2/replay", body).await;
    assert_eq!(s, StatusCode::OK, "{preview}");
    assert_eq!(preview["preview"]["count"], 3);
    let (s, dry) = api
        .post("/api/v2/replay", json!({ "all": true, "mode": "dry_run" }))
        .await;
    assert_eq!(s, StatusCode::OK, "{dry}");
    assert_eq!(dry["dry_run"]["count"], 3);
    // The largest selection the document allows fits the default body limit.
    let ids: Vec<String> = (0..durabus::replay::MAX_IDS)
        .map(|_| durabus::EventId::new().to_string())
        .collect();
    let types: Vec<String> = (0..durabus::replay::MAX_TYPES)
        .map(|_| "t".repeat(durabus::pattern::MAX_TYPE_LEN))
        .collect();
    let body = json!({ "ids": ids, "types": types, "mode": "preview" });
    let (s, largest) = api.post("/api/v2/replay", body).await;
    assert_eq!(s, StatusCode::OK, "{largest}");
    assert_eq!(largest["preview"]["count"], 0);
    assert_error(
        &api.post("/api/v2/replay", json!({ "types": ["pay.*"] }))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post("/api/v2/replay", json!({ "all": true, "rate_limit": 0 }))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(
            "/api/v2/replay",
            json!({ "all": true, "rate_limit": 5, "unthrottled": true }),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (s, op) = api
        .post(
            "/api/v2/replay",
            json!({ "all": true, "unthrottled": true }),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{op}");
    assert_eq!(op["kind"], "replay");
    let id = op["id"].as_str().unwrap().to_owned();
    let (s, status) = api.get(&format!("/api/v2/replay/{id}")).await;
    assert_eq!(s, StatusCode::OK, "{status}");
    assert_eq!(status["result"]["status"], "pending");
    assert_eq!(status["operation"]["total"], 3);
    let (s, cancelled) = api
        .post(&format!("/api/v2/replay/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["result"]["status"], "cancelled");
    assert_error(
        &api.post(&format!("/api/v2/replay/{id}/cancel"), json!({}))
            .await,
        StatusCode::CONFLICT,
        "conflict",
    );
    // A rate-limited replay runs to completion through the runner.
    let (_, op) = api
        .post(
            "/api/v2/replay",
            json!({ "all": true, "types": ["pay.card"] }),
        )
        .await;
    let id = op["id"].as_str().unwrap().to_owned();
    assert_eq!(
        op["params"]["rate_limit"],
        durabus::replay::DEFAULT_OPERATOR_RATE,
        "{op}"
    );
    api.bus
        .operations()
        .run_claimable(&durabus::RunOptions::default())
        .await
        .unwrap();
    let (_, done) = api.get(&format!("/api/v2/replay/{id}")).await;
    assert_eq!(done["result"]["status"], "completed", "{done}");
    assert_eq!(done["result"]["processed"], 3);
    assert_error(
        &api.get("/api/v2/replay/nope").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

pub(super) async fn jobs_subscriptions_stats_metrics_and_health(api: &Api) {
    api.dead_payments("pay.card", 2).await;
    let (s, jobs) = api.get("/api/v2/jobs").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        jobs.as_array().unwrap().len(),
        durabus::scheduler::JOBS.len()
    );
    let (s, report) = api
        .post("/api/v2/jobs/cleanup-history/run", json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{report}");
    assert_eq!(report["status"], "ok");
    assert_error(
        &api.post("/api/v2/jobs/make-coffee/run", json!({})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let (_, subs) = api.get("/api/v2/subscriptions").await;
    let pay = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "payments")
        .expect("the payments subscription");
    assert_eq!(pay["in_this_process"], true);
    assert_eq!(pay["breaker"]["state"], "closed");
    assert_eq!(
        pay["breakers"],
        json!([]),
        "no worker process has reported yet"
    );
    // A worker process's report (as its bus writes it) is listed with the subscription.
    let now = durabus::Clock::now(&api.clock);
    durabus::BreakerStore::breaker_report(
        api.bus.store().as_ref(),
        vec![durabus::breaker::report::BreakerReport {
            subscription: "payments".into(),
            process: "worker-1".into(),
            state: durabus::BreakerState::Open,
            failure_rate: 1.0,
            samples: 4,
            opened_at: Some(now),
            reported_at: now,
        }],
        durabus::Timestamp(0),
    )
    .await
    .unwrap();
    let (_, subs) = api.get("/api/v2/subscriptions").await;
    let pay = subs
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "payments")
        .expect("the payments subscription");
    assert_eq!(pay["breakers"][0]["process"], "worker-1", "{pay}");
    assert_eq!(pay["breakers"][0]["state"], "open");
    let (_, stats) = api.get("/api/v2/stats").await;
    assert_eq!(stats["by_type"]["pay.card"]["dlq"], 2, "{stats}");
    assert!(stats["computed_at"].is_string(), "{stats}");
    assert!(stats["took_ms"].is_u64(), "{stats}");
    let (s, overview) = api.get("/api/v2/overview").await;
    assert_eq!(s, StatusCode::OK, "{overview}");
    assert_eq!(overview["dead_letters_pending"], 2, "{overview}");
    // Each dead letter announced itself as a `system.dead_letter` event, left pending: this
    // bus runs no worker loop (each publish's attempt is made inline).
    let (_, pending) = api
        .get("/api/v2/events?status=pending&event_type=system.dead_letter")
        .await;
    assert_eq!(pending["items"].as_array().unwrap().len(), 2, "{pending}");
    // And their failure group, new, as a `system.failure_group.new` event, pending too.
    let (_, new_groups) = api
        .get("/api/v2/events?status=pending&event_type=system.failure_group.new")
        .await;
    assert_eq!(
        new_groups["items"].as_array().unwrap().len(),
        1,
        "{new_groups}"
    );
    assert_eq!(overview["pending"], 3, "{overview}");
    assert_eq!(overview["processing"], 0, "{overview}");
    let minutes = overview["throughput"].as_array().unwrap();
    let dead: u64 = minutes.iter().map(|m| m["dead"].as_u64().unwrap()).sum();
    assert_eq!(dead, 2, "{overview}");
    // Served from the cache for a few seconds: the same reading, however the clock moved.
    api.clock.advance(std::time::Duration::from_secs(600));
    let (_, again) = api.get("/api/v2/overview").await;
    assert_eq!(again["now"], overview["now"]);
    // Kept: more dead letters do not show until the snapshot is refreshed.
    api.dead_payments("pay.card", 1).await;
    let (_, kept) = api.get("/api/v2/stats").await;
    assert_eq!(kept, stats, "the snapshot is served as it was computed");
    let (s, fresh) = api.get("/api/v2/stats?fresh=true").await;
    assert_eq!(s, StatusCode::OK, "{fresh}");
    assert_eq!(fresh["by_type"]["pay.card"]["dlq"], 3, "{fresh}");
    let (_, after) = api.get("/api/v2/stats").await;
    assert_eq!(after, fresh, "the fresh count is kept for the next readers");
    assert_error(
        &api.get("/api/v2/stats?fresh=soon").await,
        StatusCode::BAD_REQUEST,
        "malformed_request",
    );
    let (s, me) = api.get("/api/v2/whoami").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (me["name"].as_str(), me["role"].as_str()),
        (Some("ops"), Some("admin"))
    );
    let (_, me) = api
        .call(Method::GET, "/api/v2/whoami", Some(READ), None)
        .await;
    assert_eq!(
        (me["name"].as_str(), me["role"].as_str()),
        (Some("viewer"), Some("read"))
    );
    let response = tower::ServiceExt::oneshot(
        api.app.clone(),
        Request::builder()
            .uri("/metrics")
            .header(header::AUTHORIZATION, format!("Bearer {READ}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("durabus_dead_letters"), "{text}");
    assert_eq!(
        api.call(Method::GET, "/healthz", None, None).await.1["status"],
        "ok"
    );
    assert_eq!(
        api.call(Method::GET, "/readyz", None, None).await.1["status"],
        "ready"
    );
}

pub(super) async fn events_are_scheduled_listed_and_cancelled(api: &Api) {
    let later = NewEvent::new("remind.me", &json!({"user": 7}))
        .unwrap()
        .delay(std::time::Duration::from_secs(3600))
        .priority(5);
    let id = api.bus.enqueue_event(later).await.unwrap();
    let (s, page) = api.get("/api/v2/events?status=scheduled").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["priority"], 5);
    assert_eq!(items[0]["status"], "scheduled");
    assert!(items[0]["deliver_at"].is_string(), "{}", items[0]);
    let uri = format!("/api/v2/events/{id}/cancel");
    // A read-only token may not cancel; a blank reason and unknown fields are refused.
    let (s, _) = api
        .call(
            Method::POST,
            &uri,
            Some(READ),
            Some(json!({"reason": "no"})),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_error(
        &api.post(&uri, json!({"reason": "  "})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(&uri, json!({"reason": "x", "when": "now"})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(
            &format!("/api/v2/events/{}/cancel", durabus::EventId::new()),
            json!({"reason": "gone"}),
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let (s, c) = api
        .post(&uri, json!({"reason": "customer unsubscribed"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{c}");
    assert_eq!(c["outcome"], "cancelled");
    assert_eq!(c["actor"], "ops", "the token's name");
    // Twice: a conflict, with the API's error shape.
    assert_error(
        &api.post(&uri, json!({"reason": "again"})).await,
        StatusCode::CONFLICT,
        "conflict",
    );
    let (_, e) = api.get(&format!("/api/v2/events/{id}")).await;
    assert_eq!(e["status"], "cancelled");
    let (s, list) = api.get(&format!("/api/v2/events/{id}/cancellations")).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(list[0]["reason"], "customer unsubscribed");
    let (_, page) = api.get("/api/v2/events?status=cancelled").await;
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

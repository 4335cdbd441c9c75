//! Every route of the admin API through `oneshot`, on SQLite and PostgreSQL: success, each
//! error status, pagination and filters, roles, and a walk over the route table proving every
//! route is behind a token and every write behind an admin token.

use crate::support::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

both!(
    every_route_needs_a_token_and_every_write_an_admin_token,
    the_openapi_document_lists_exactly_the_routes,
    dead_letters_list_filter_page_and_show,
    dead_letter_actions_follow_the_lifecycle_and_record_the_token_name,
    bulk_actions_preview_submit_and_run_as_operations,
    bodies_that_cannot_be_read_get_the_right_status,
    events_payloads_and_their_configuration,
    replays_preview_dry_run_start_follow_and_cancel,
    jobs_subscriptions_stats_metrics_and_health,
    a_closed_store_answers_503_without_its_cause,
);

/// Fills a route's path parameters with well-formed values.
fn concrete(path: &str) -> String {
    path.replace("{id}", &durabus::EventId::new().to_string())
        .replace("{event_id}", &durabus::EventId::new().to_string())
        .replace("{stage}", "published")
        .replace("{event_type}", "order.created")
        .replace("{name}", "cleanup-history")
}

/// Every (method, path) of the OpenAPI document.
fn documented() -> Vec<(Method, String)> {
    let doc: Value = serde_json::from_str(&durabus_admin::openapi().to_json().unwrap()).unwrap();
    let mut routes = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            routes.push((method.to_uppercase().parse().unwrap(), path.clone()));
        }
    }
    routes
}

const OPEN: [&str; 2] = ["/healthz", "/readyz"];

async fn every_route_needs_a_token_and_every_write_an_admin_token(api: &Api) {
    let routes = documented();
    assert!(routes.len() >= 30, "{routes:?}");
    for (method, path) in &routes {
        let uri = concrete(path);
        if OPEN.contains(&path.as_str()) {
            let got = api.call(method.clone(), &uri, None, None).await;
            assert_eq!(got.0, StatusCode::OK, "{method} {path} is open: {}", got.1);
            continue;
        }
        let none = api.call(method.clone(), &uri, None, None).await;
        assert_error(&none, StatusCode::UNAUTHORIZED, "unauthorized");
        let wrong = api
            .call(method.clone(), &uri, Some("not-a-token-at-all-000"), None)
            .await;
        assert_error(&wrong, StatusCode::UNAUTHORIZED, "unauthorized");
        // A prefix of a real token is not a token.
        let prefix = api
            .call(method.clone(), &uri, Some(&ADMIN[..10]), None)
            .await;
        assert_error(&prefix, StatusCode::UNAUTHORIZED, "unauthorized");
        let read = api.call(method.clone(), &uri, Some(READ), None).await;
        if *method == Method::GET {
            assert!(
                read.0 != StatusCode::UNAUTHORIZED && read.0 != StatusCode::FORBIDDEN,
                "{method} {path} must accept the read-only token: {} {}",
                read.0,
                read.1
            );
        } else {
            assert_error(&read, StatusCode::FORBIDDEN, "forbidden");
        }
    }
    // Basic auth or a bare token is not a bearer token.
    let req = Request::builder()
        .uri("/api/v2/stats")
        .header(header::AUTHORIZATION, ADMIN)
        .body(Body::empty())
        .unwrap();
    assert_error(
        &api.raw(req).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    let req = Request::builder()
        .uri("/api/v2/stats")
        .header(header::AUTHORIZATION, format!("bearer {ADMIN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(
        api.raw(req).await.0,
        StatusCode::OK,
        "the scheme is case-insensitive"
    );
}

async fn the_openapi_document_lists_exactly_the_routes(api: &Api) {
    let routes = documented();
    let all = [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
    ];
    for (method, path) in &routes {
        // Each documented route exists: its answer is its handler's, not the fallbacks'.
        let got = api
            .call(method.clone(), &concrete(path), Some(ADMIN), None)
            .await;
        let code = got.1["error"]["code"].as_str().unwrap_or("");
        assert!(
            code != "no_route" && code != "method_not_allowed",
            "{method} {path} is documented but not routed: {}",
            got.1
        );
    }
    // Each documented path takes exactly its documented methods.
    let mut paths: Vec<&String> = routes.iter().map(|(_, p)| p).collect();
    paths.dedup();
    for path in paths {
        for m in &all {
            if routes.iter().any(|(rm, rp)| rm == m && rp == path) {
                continue;
            }
            let got = api
                .call(m.clone(), &concrete(path), Some(ADMIN), None)
                .await;
            assert_error(&got, StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");
        }
    }
    let got = api.get("/api/v2/nothing-here").await;
    assert_error(&got, StatusCode::NOT_FOUND, "no_route");
    let (status, served) = api.get("/api/v2/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(served["openapi"], "3.1.0");
    let made: Value = serde_json::from_str(&durabus_admin::openapi().to_json().unwrap()).unwrap();
    assert_eq!(served, made);
    for p in [
        "/api/v2/dead-letters",
        "/api/v2/dead-letters/{id}/resolve",
        "/api/v2/events/{event_id}/payloads/{stage}",
        "/api/v2/payload-config/{event_type}",
        "/api/v2/replay/{id}/cancel",
        "/metrics",
    ] {
        assert!(served["paths"].get(p).is_some(), "{p} missing");
    }
}

async fn dead_letters_list_filter_page_and_show(api: &Api) {
    let ids = api.dead_payments("pay.card", 5).await;
    api.dead_payments("pay.bank", 2).await;
    let (s, page) = api.get("/api/v2/dead-letters?limit=3").await;
    assert_eq!(s, StatusCode::OK, "{page}");
    assert_eq!(page["items"].as_array().unwrap().len(), 3);
    let next = page["next"].as_i64().expect("a next page");
    let (_, page2) = api
        .get(&format!("/api/v2/dead-letters?limit=3&before={next}"))
        .await;
    let (_, page3) = api
        .get(&format!(
            "/api/v2/dead-letters?limit=3&before={}",
            page2["next"].as_i64().expect("a third page")
        ))
        .await;
    assert_eq!(page2["items"].as_array().unwrap().len(), 3);
    assert_eq!(page3["items"].as_array().unwrap().len(), 1);
    assert_eq!(page3["next"], Value::Null);
    let (_, card) = api
        .get("/api/v2/dead-letters?event_type=pay.card&status=pending,retrying")
        .await;
    let items = card["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    assert_eq!(items[0]["event_id"], ids[4].to_string(), "newest first");
    // The seed's spelling of the type filter works too; a glob matches both types.
    let (_, alias) = api.get("/api/v2/dead-letters?eventType=pay.bank").await;
    assert_eq!(alias["items"].as_array().unwrap().len(), 2);
    let (_, glob) = api.get("/api/v2/dead-letters?event_type=pay.*").await;
    assert_eq!(glob["items"].as_array().unwrap().len(), 7);
    // LIKE metacharacters are literal.
    let (_, none) = api.get("/api/v2/dead-letters?event_type=pay._ard").await;
    assert_eq!(none["items"].as_array().unwrap().len(), 0);
    let (_, resolved) = api.get("/api/v2/dead-letters?status=resolved").await;
    assert_eq!(resolved["items"].as_array().unwrap().len(), 0);
    let group = items[0]["fingerprint"].as_str().unwrap().to_owned();
    let (_, by_group) = api
        .get(&format!("/api/v2/dead-letters?group={group}"))
        .await;
    assert_eq!(by_group["items"].as_array().unwrap().len(), 7, "one cause");
    let (_, groups) = api.get("/api/v2/dead-letter-groups").await;
    assert_eq!(groups[0]["fingerprint"], group.as_str());
    assert_eq!(groups[0]["count"], 7);
    let future = "2100-01-01T00:00:00Z";
    let (_, later) = api
        .get(&format!("/api/v2/dead-letters?from={future}"))
        .await;
    assert_eq!(later["items"].as_array().unwrap().len(), 0);
    let (_, earlier) = api.get(&format!("/api/v2/dead-letters?to={future}")).await;
    assert_eq!(earlier["items"].as_array().unwrap().len(), 7);

    let (s, one) = api.get(&format!("/api/v2/dead-letters/{}", ids[0])).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(one["payload"]["order"], 0);
    assert!(
        items[0].get("payload").is_none(),
        "listings leave the payload out"
    );
    assert_eq!(items[0]["rounds"], 1);
    assert_eq!(one["status"], "pending");
    assert_eq!(one["error_history"][0]["round"], 1);
    assert!(one["last_error"].as_str().unwrap().contains("refused"));

    let unknown = durabus::EventId::new();
    assert_error(
        &api.get(&format!("/api/v2/dead-letters/{unknown}")).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &api.get("/api/v2/dead-letters/not-a-uuid").await,
        StatusCode::BAD_REQUEST,
        "malformed_request",
    );
    assert_error(
        &api.get("/api/v2/dead-letters?status=lost").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    for bad in ["limit=0", "limit=1001"] {
        assert_error(
            &api.get(&format!("/api/v2/dead-letters?{bad}")).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        );
    }
    for bad in ["limit=-1", "before=x", "from=yesterday", "colour=red"] {
        assert_error(
            &api.get(&format!("/api/v2/dead-letters?{bad}")).await,
            StatusCode::BAD_REQUEST,
            "malformed_request",
        );
    }
}

async fn dead_letter_actions_follow_the_lifecycle_and_record_the_token_name(api: &Api) {
    let ids = api.dead_payments("pay.card", 3).await;
    let (s, d) = api
        .post(&format!("/api/v2/dead-letters/{}/retry", ids[0]), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["status"], "retrying");
    assert_eq!(d["last_retry_by"], "ops", "the token's name is the actor");
    assert_error(
        &api.post(&format!("/api/v2/dead-letters/{}/retry", ids[0]), json!({}))
            .await,
        StatusCode::CONFLICT,
        "conflict",
    );

    let resolve = format!("/api/v2/dead-letters/{}/resolve", ids[1]);
    assert_error(
        &api.call(Method::POST, &resolve, Some(ADMIN), None).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_error(
        &api.post(&resolve, json!({})).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(&resolve, json!({ "note": "  " })).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(&resolve, json!({ "note": "x".repeat(2001) }))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (s, d) = api
        .post(&resolve, json!({ "note": "refunded by hand" }))
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(
        (&d["status"], &d["resolved_by"], &d["resolution_note"]),
        (
            &json!("resolved"),
            &json!("ops"),
            &json!("refunded by hand")
        )
    );
    assert_error(
        &api.post(&resolve, json!({ "note": "again" })).await,
        StatusCode::CONFLICT,
        "conflict",
    );

    // Abandon takes no body, or a note.
    let abandon = format!("/api/v2/dead-letters/{}/abandon", ids[2]);
    let (s, d) = api.call(Method::POST, &abandon, Some(ADMIN), None).await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["status"], "abandoned");
    let unknown = format!("/api/v2/dead-letters/{}/abandon", durabus::EventId::new());
    assert_error(
        &api.post(&unknown, json!({ "note": "n" })).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    assert_error(
        &api.post(&abandon, json!({ "reason": "wrong field" })).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
}

async fn bulk_actions_preview_submit_and_run_as_operations(api: &Api) {
    api.dead_payments("pay.card", 4).await;
    api.dead_payments("pay.bank", 1).await;
    let filter = json!({ "event_type": "pay.card", "status": ["pending"] });
    let (s, preview) = api
        .post(
            "/api/v2/dead-letters/bulk/preview",
            json!({ "filter": filter }),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{preview}");
    assert_eq!(preview["count"], 4);
    assert_eq!(preview["samples"].as_array().unwrap().len(), 4);

    assert_error(
        &api.post("/api/v2/dead-letters/bulk", json!({ "action": "retry" }))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(
            "/api/v2/dead-letters/bulk",
            json!({ "action": "resolve", "filter": filter }),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.post(
            "/api/v2/dead-letters/bulk",
            json!({ "action": "explode", "filter": filter }),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let (s, op) = api
        .post(
            "/api/v2/dead-letters/bulk",
            json!({ "action": "retry", "filter": filter }),
        )
        .await;
    assert_eq!(s, StatusCode::ACCEPTED, "{op}");
    assert_eq!(op["kind"], "dead_letters.retry");
    assert_eq!(op["total"], 4);
    assert_eq!(op["actor"]["name"], "ops");
    assert_eq!(op["actor"]["kind"], "api");
    let id = op["id"].as_str().unwrap().to_owned();
    // The server's runner (a started bus) would take it; run it here.
    let ran = api
        .bus
        .operations()
        .run_claimable(&durabus::RunOptions::default())
        .await
        .unwrap();
    assert_eq!(ran, 1);
    let (_, done) = api.get(&format!("/api/v2/operations/{id}")).await;
    assert_eq!(
        (&done["status"], &done["processed"]),
        (&json!("completed"), &json!(4))
    );
    let (_, retrying) = api.get("/api/v2/dead-letters?status=retrying").await;
    assert_eq!(retrying["items"].as_array().unwrap().len(), 4);
    assert_error(
        &api.post(&format!("/api/v2/operations/{id}/cancel"), json!({}))
            .await,
        StatusCode::CONFLICT,
        "conflict",
    );
    let (_, list) = api
        .get("/api/v2/operations?kind=dead_letters.retry&status=completed")
        .await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_error(
        &api.get("/api/v2/operations?status=sleeping").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.get("/api/v2/operations/no-such-operation").await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    // A submitted operation can be cancelled before it runs.
    let (_, op) = api
        .post(
            "/api/v2/dead-letters/bulk",
            json!({ "action": "abandon", "note": "vendor gone", "all": true }),
        )
        .await;
    let id = op["id"].as_str().unwrap();
    let (s, cancelled) = api
        .post(&format!("/api/v2/operations/{id}/cancel"), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
}

async fn bodies_that_cannot_be_read_get_the_right_status(api: &Api) {
    let bulk = "/api/v2/dead-letters/bulk";
    let req = |body: &str, content_type: &str| {
        Request::builder()
            .method(Method::POST)
            .uri(bulk)
            .header(header::AUTHORIZATION, format!("Bearer {ADMIN}"))
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body.to_owned()))
            .unwrap()
    };
    assert_error(
        &api.raw(req("{not json", "application/json")).await,
        StatusCode::BAD_REQUEST,
        "malformed_request",
    );
    assert_error(
        &api.raw(req(r#"{"action": "retry"}"#, "text/plain")).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
    );
    assert_error(
        &api.raw(req(r#"{"action": 7}"#, "application/json")).await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    assert_error(
        &api.raw(req(
            r#"{"action": "retry", "all": "yes"}"#,
            "application/json",
        ))
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "validation_failed",
    );
    let huge = format!(
        r#"{{"action": "retry", "note": "{}"}}"#,
        "x".repeat(300 * 1024)
    );
    assert_error(
        &api.raw(req(&huge, "application/json")).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
    );
    // Every response carries a request id.
    let response = tower::ServiceExt::oneshot(
        api.app.clone(),
        Request::builder()
            .uri("/healthz")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .unwrap();
    assert!(response.headers().contains_key("x-request-id"));
}

async fn events_payloads_and_their_configuration(api: &Api) {
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

async fn replays_preview_dry_run_start_follow_and_cancel(api: &Api) {
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

async fn jobs_subscriptions_stats_metrics_and_health(api: &Api) {
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
    let (_, stats) = api.get("/api/v2/stats").await;
    assert_eq!(stats["by_type"]["pay.card"]["dlq"], 2, "{stats}");
    let (s, overview) = api.get("/api/v2/overview").await;
    assert_eq!(s, StatusCode::OK, "{overview}");
    assert_eq!(overview["dead_letters_pending"], 2, "{overview}");
    // Each dead letter announced itself as a `system.dead_letter` event, left pending: this
    // bus runs no worker loop (each publish's attempt is made inline).
    let (_, pending) = api
        .get("/api/v2/events?status=pending&event_type=system.dead_letter")
        .await;
    assert_eq!(pending["items"].as_array().unwrap().len(), 2, "{pending}");
    assert_eq!(overview["pending"], 2, "{overview}");
    assert_eq!(overview["processing"], 0, "{overview}");
    let minutes = overview["throughput"].as_array().unwrap();
    let dead: u64 = minutes.iter().map(|m| m["dead"].as_u64().unwrap()).sum();
    assert_eq!(dead, 2, "{overview}");
    // Served from the cache for a few seconds: the same reading, however the clock moved.
    api.clock.advance(std::time::Duration::from_secs(600));
    let (_, again) = api.get("/api/v2/overview").await;
    assert_eq!(again["now"], overview["now"]);
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

async fn a_closed_store_answers_503_without_its_cause(api: &Api) {
    api.bus.shutdown().await.unwrap();
    let got = api.get("/api/v2/stats").await;
    assert_error(&got, StatusCode::SERVICE_UNAVAILABLE, "store_unavailable");
    let message = got.1["error"]["message"].as_str().unwrap();
    assert!(
        !message.contains("closed"),
        "the cause stays in the log: {message}"
    );
    let ready = api.call(Method::GET, "/readyz", None, None).await;
    assert_eq!(ready.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        api.call(Method::GET, "/healthz", None, None).await.0,
        StatusCode::OK
    );
}

/// The API over a fresh SQLite bus with `config` instead of the defaults.
async fn with_config(config: impl FnOnce(&mut durabus_admin::AdminConfig)) -> (Api, axum::Router) {
    let api = Api::sqlite().await;
    let mut c = durabus_admin::AdminConfig::new(tokens());
    config(&mut c);
    let app = durabus_admin::router(durabus_admin::AdminState::new(api.bus.clone(), c));
    (api, app)
}

async fn send(app: &axum::Router, req: Request<Body>) -> axum::response::Response {
    tower::ServiceExt::oneshot(app.clone(), req).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_is_off_unless_origins_are_configured() {
    let preflight = || {
        Request::builder()
            .method(Method::OPTIONS)
            .uri("/api/v2/dead-letters")
            .header(header::ORIGIN, "https://ops.example.com")
            .header(header::ACCESS_CONTROL_REQUEST_METHOD, "GET")
            .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "authorization")
            .body(Body::empty())
            .unwrap()
    };
    let (api, app) = with_config(|_| {}).await;
    let off = send(&app, preflight()).await;
    assert!(
        !off.headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN),
        "{:?}",
        off.headers()
    );
    api.finish().await;
    let (api, app) = with_config(|c| {
        c.cors_origins = vec![header::HeaderValue::from_static("https://ops.example.com")]
    })
    .await;
    let on = send(&app, preflight()).await;
    assert_eq!(
        on.headers()[header::ACCESS_CONTROL_ALLOW_ORIGIN],
        "https://ops.example.com"
    );
    let other = send(
        &app,
        Request::builder()
            .uri("/healthz")
            .header(header::ORIGIN, "https://evil.example.com")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        !other
            .headers()
            .contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN)
    );
    api.finish().await;
}

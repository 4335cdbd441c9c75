//! Every route behind a token, the OpenAPI document against the routes, bodies that cannot be read, a closed store, CORS.

use super::*;

pub(super) async fn every_route_needs_a_token_and_every_write_an_admin_token(api: &Api) {
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

pub(super) async fn the_openapi_document_lists_exactly_the_routes(api: &Api) {
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
    let made: Value = durabus_admin::openapi();
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

pub(super) async fn bodies_that_cannot_be_read_get_the_right_status(api: &Api) {
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
        "x".repeat(600 * 1024)
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

pub(super) async fn a_closed_store_answers_503_without_its_cause(api: &Api) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
pub(super) async fn cors_is_off_unless_origins_are_configured() {
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

/// Every refused value names its field, what is wrong with it and what is accepted, whether
/// the library refused it, the route, a query parameter, a path parameter or the body's shape.
pub(super) async fn every_refused_value_names_its_field_problem_and_accepted_range(api: &Api) {
    let details = |got: &(StatusCode, Value), status: StatusCode, field: &str| {
        assert_eq!(got.0, status, "{}", got.1);
        let d = &got.1["error"]["details"];
        assert_eq!(d["field"], field, "{}", got.1);
        for key in ["problem", "accepted"] {
            assert!(
                d[key].as_str().is_some_and(|s| !s.is_empty()),
                "{key} missing: {}",
                got.1
            );
        }
        let message = got.1["error"]["message"].as_str().unwrap();
        assert!(!message.contains("invalid configuration"), "{message}");
        d.clone()
    };
    // An ordering key out of range, and a periodic event's name.
    details(
        &api.get("/api/v2/events?ordering_key=").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "ordering_key",
    );
    details(
        &api.post("/api/v2/periodic/has%20space/pause", json!({}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "name",
    );
    // The route's own range.
    let d = details(
        &api.get("/api/v2/dead-letters?limit=5000").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "limit",
    );
    assert_eq!(
        (d["problem"].as_str(), d["accepted"].as_str()),
        (Some("5000"), Some("1 to 1000"))
    );
    // A query parameter that cannot be read.
    let d = details(
        &api.get("/api/v2/dead-letters?limit=-1").await,
        StatusCode::BAD_REQUEST,
        "limit",
    );
    assert!(d["problem"].as_str().unwrap().contains("-1"), "{d}");
    // A status the library does not know.
    let d = details(
        &api.get("/api/v2/events?status=finished").await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "status",
    );
    assert_eq!(
        d["accepted"],
        "scheduled, pending, processing, done, dlq or cancelled"
    );
    // A path parameter.
    details(
        &api.get("/api/v2/dead-letters/not-a-uuid").await,
        StatusCode::BAD_REQUEST,
        "id",
    );
    // A missing field of the body, and one of the wrong type.
    let d = details(
        &api.post(
            "/api/v2/replay",
            json!({"mode": "preview", "from": "2026-01-01T00:00:00Z", "rate_limit": "fast"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "rate_limit",
    );
    assert_eq!(d["accepted"], "a whole number from 0 to 4294967295", "{d}");
    details(
        &api.post("/api/v2/dead-letters/bulk", json!({"all": true}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "action",
    );
    let d = details(
        &api.post("/api/v2/dead-letters/bulk/preview", json!({"all": true}))
            .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "all",
    );
    assert_eq!(d["problem"], "unknown field `all`");
    // Refused by the library's rules.
    let d = details(
        &api.post(
            "/api/v2/replay",
            json!({"mode": "run", "from": "2026-01-01T00:00:00Z", "rate_limit": 0}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "rate_limit",
    );
    assert_eq!(d["problem"], "0 events/s");
    // An empty range is a selection of nothing; a time without its zone is refused.
    let (s, empty) = api
        .post(
            "/api/v2/replay",
            json!({"mode": "preview", "from": "2026-02-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(
        (s, &empty["preview"]["count"]),
        (StatusCode::OK, &json!(0)),
        "{empty}"
    );
    let d = details(
        &api.post(
            "/api/v2/replay",
            json!({"mode": "preview", "from": "2026-02-01T00:00:00"}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "from",
    );
    assert!(d["accepted"].as_str().unwrap().contains("RFC 3339"), "{d}");
    details(
        &api.call(
            Method::PUT,
            "/api/v2/payload-config/order.created",
            Some(ADMIN),
            Some(json!({"stages": ["no spaces"], "retention_days": 7})),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "stages",
    );
    details(
        &api.post(
            "/api/v2/replay",
            json!({"mode": "preview", "from": "2026-01-01T00:00:00Z", "types": ["order..x"]}),
        )
        .await,
        StatusCode::UNPROCESSABLE_ENTITY,
        "pattern",
    );
}

//! Hostile input to the admin API, on SQLite and PostgreSQL: SQL and LIKE metacharacters in
//! every filter are taken literally (they match nothing and break nothing); malformed values
//! (invalid UTF-8, numbers out of range, bad times, statuses and ids, JSON nested past any
//! sense) get a 4xx in the API's error shape; and proptest-generated query strings and bodies
//! never get a 5xx.

use crate::support::*;
use axum::http::{Method, StatusCode};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::{Value, json};

both!(
    metacharacters_in_every_filter_match_nothing_and_break_nothing,
    malformed_values_get_a_4xx_with_the_error_shape,
    generated_queries_and_bodies_never_get_a_5xx,
);

/// Values that would match something, or break the query, if they reached SQL unescaped.
const HOSTILE: &[&str] = &[
    "%",
    "_",
    "pay.%",
    "pay._ard",
    "pay.card%",
    "'",
    "\"",
    "\\",
    "\\%",
    "'; DROP TABLE durabus_events; --",
    "' OR '1'='1",
    "%' OR 1=1 --",
    "pay.card\0",
    "\0",
    "[a-z]*",
    "pay.card' --",
    "\u{202e}pay.card",
    "$1",
    "?",
];

/// Percent-encodes every byte but letters and digits.
fn enc(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (*b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A 4xx in the error shape, or a 2xx: never a 5xx.
fn not_a_server_error(what: &str, got: &(StatusCode, Value)) {
    assert!(!got.0.is_server_error(), "{what}: {} {}", got.0, got.1);
    if got.0.is_client_error() {
        assert!(got.1["error"]["code"].is_string(), "{what}: {}", got.1);
        assert!(got.1["error"]["message"].is_string(), "{what}: {}", got.1);
    }
}

/// The number of items a listing answered, or `None` if it refused the value (4xx).
fn listed(what: &str, got: &(StatusCode, Value)) -> Option<usize> {
    not_a_server_error(what, got);
    if got.0 == StatusCode::OK {
        Some(got.1["items"].as_array().map_or(0, Vec::len))
    } else {
        assert!(
            got.0 == StatusCode::BAD_REQUEST || got.0 == StatusCode::UNPROCESSABLE_ENTITY,
            "{what}: {} {}",
            got.0,
            got.1
        );
        None
    }
}

async fn metacharacters_in_every_filter_match_nothing_and_break_nothing(api: &Api) {
    api.dead_payments("pay.card", 3).await;
    api.dead_payments("pay.bank", 1).await;
    let (mut answered, mut refused) = (0, 0);
    for value in HOSTILE {
        let v = enc(value.as_bytes());
        let lists = [
            format!("/api/v2/dead-letters?event_type={v}"),
            format!("/api/v2/dead-letters?subscription={v}"),
            format!("/api/v2/dead-letters?group={v}"),
            format!("/api/v2/events?event_type={v}"),
        ];
        for uri in &lists {
            match listed(&format!("{uri} ({value:?})"), &api.get(uri).await) {
                Some(n) => {
                    answered += 1;
                    assert_eq!(n, 0, "{uri} ({value:?}) matched something");
                }
                None => refused += 1,
            }
        }
        // Statuses and kinds are closed sets: anything else is refused.
        for uri in [
            format!("/api/v2/dead-letters?status={v}"),
            format!("/api/v2/events?status={v}"),
            format!("/api/v2/operations?status={v}"),
            format!("/api/v2/operations?kind={v}"),
        ] {
            assert_eq!(
                listed(&uri, &api.get(&uri).await),
                None,
                "{uri} was accepted"
            );
        }
        // The same filters in bodies: a bulk preview and a replay preview select nothing.
        for filter in [
            json!({ "event_type": value }),
            json!({ "subscription": value }),
            json!({ "group": value }),
        ] {
            let got = api
                .post(
                    "/api/v2/dead-letters/bulk/preview",
                    json!({ "filter": filter }),
                )
                .await;
            not_a_server_error(&format!("bulk preview {filter}"), &got);
            if got.0 == StatusCode::OK {
                assert_eq!(got.1["count"], 0, "bulk preview {filter}: {}", got.1);
            }
        }
        let got = api
            .post(
                "/api/v2/replay",
                json!({ "all": true, "types": [value], "mode": "preview" }),
            )
            .await;
        not_a_server_error(&format!("replay preview {value:?}"), &got);
        if got.0 == StatusCode::OK {
            assert_eq!(got.1["preview"]["count"], 0, "replay {value:?}: {}", got.1);
        }
    }
    assert!(answered > 0, "every hostile value was refused");
    assert!(answered + refused == HOSTILE.len() * 4);
    // Nothing was dropped or changed on the way.
    let (s, all) = api.get("/api/v2/dead-letters").await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert_eq!(all["items"].as_array().unwrap().len(), 4);
    let (_, card) = api.get("/api/v2/dead-letters?event_type=pay.card").await;
    assert_eq!(card["items"].as_array().unwrap().len(), 3);
}

async fn malformed_values_get_a_4xx_with_the_error_shape(api: &Api) {
    api.dead_payments("pay.card", 1).await;
    for uri in [
        // Invalid UTF-8, alone and inside a value.
        "/api/v2/dead-letters?event_type=%FF",
        "/api/v2/dead-letters?subscription=pay%C3%28",
        "/api/v2/events?event_type=%ED%A0%80",
        // Numbers out of range or not numbers.
        "/api/v2/dead-letters?limit=-1",
        "/api/v2/dead-letters?limit=0",
        "/api/v2/dead-letters?limit=99999999999999999999",
        "/api/v2/dead-letters?before=abc",
        "/api/v2/dead-letters?before=99999999999999999999",
        "/api/v2/events?offset=-5",
        "/api/v2/events?limit=1e3",
        "/api/v2/dead-letter-groups?limit=NaN",
        "/api/v2/operations?limit=100000",
        // Times that are not times.
        "/api/v2/dead-letters?from=yesterday",
        "/api/v2/dead-letters?to=2026-13-45T99:99:99Z",
        "/api/v2/events?from=%27%20OR%201%3D1",
        // Unknown parameters, and ids that are not ids.
        "/api/v2/dead-letters?evil=1",
        "/api/v2/dead-letters/'%20OR%201=1",
        "/api/v2/dead-letters/%FF",
        "/api/v2/events/..%2F..%2Fetc%2Fpasswd",
        "/api/v2/events/00000000-0000-0000-0000-000000000000%00/payloads",
    ] {
        let got = api.get(uri).await;
        not_a_server_error(uri, &got);
        assert!(
            got.0 == StatusCode::BAD_REQUEST || got.0 == StatusCode::UNPROCESSABLE_ENTITY,
            "{uri}: {} {}",
            got.0,
            got.1
        );
    }
    // Operation ids are free text: a hostile one is simply not found.
    for uri in [
        "/api/v2/replay/'%20OR%201=1",
        "/api/v2/operations/%25",
        "/api/v2/operations/'%3B%20DROP%20TABLE%20durabus_operations%3B%20--",
    ] {
        let got = api.get(uri).await;
        not_a_server_error(uri, &got);
        assert_eq!(got.0, StatusCode::NOT_FOUND, "{uri}: {}", got.1);
    }
    // JSON nested far past any sense, a huge number, a string where a list belongs.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    for (uri, body) in [
        ("/api/v2/dead-letters/bulk/preview", deep.clone()),
        ("/api/v2/replay", deep),
        (
            "/api/v2/replay",
            r#"{"all":true,"rate_limit":1e400}"#.to_owned(),
        ),
        (
            "/api/v2/replay",
            r#"{"all":true,"types":"pay.*"}"#.to_owned(),
        ),
        (
            "/api/v2/dead-letters/bulk/preview",
            r#"{"filter":{"status":["pending","'; DROP TABLE x; --"]}}"#.to_owned(),
        ),
        // Times must be RFC 3339 strings within the years 0000–9999 in UTC: numbers (before 1970
        // they made the time formatting panic and the connection drop) and earlier times are
        // refused.
        (
            "/api/v2/replay",
            r#"{"from":-1000,"to":-1,"mode":"run","rate_limit":1}"#.to_owned(),
        ),
        (
            "/api/v2/replay",
            r#"{"from":1767225600000,"mode":"run","rate_limit":1}"#.to_owned(),
        ),
        (
            "/api/v2/replay",
            r#"{"from":"0000-01-01T00:00:00+00:01","mode":"preview"}"#.to_owned(),
        ),
        (
            "/api/v2/dead-letters/bulk/preview",
            r#"{"filter":{"from":-1000}}"#.to_owned(),
        ),
        (
            "/api/v2/dead-letters/bulk",
            r#"{"filter":{"from":-1000},"action":"retry"}"#.to_owned(),
        ),
    ] {
        let req = axum::http::Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header("authorization", format!("Bearer {ADMIN}"))
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.clone()))
            .unwrap();
        let got = api.raw(req).await;
        let what = format!("{uri} with {:.60}…", body);
        not_a_server_error(&what, &got);
        assert!(got.0.is_client_error(), "{what}: {} {}", got.0, got.1);
        assert!(
            got.1["error"]["code"].is_string(),
            "{what}: the error shape: {}",
            got.1
        );
    }
    // A time that is not one names its field.
    let got = api
        .post(
            "/api/v2/dead-letters/bulk/preview",
            serde_json::json!({"filter": {"from": -1000}}),
        )
        .await;
    assert_error(&got, StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(
        got.1["error"]["details"]["field"], "filter.from",
        "{}",
        got.1
    );
    let details = &got.1["error"]["details"];
    assert!(
        details["problem"].as_str().unwrap().contains("-1000"),
        "the problem names the value: {}",
        got.1
    );
    assert!(
        details["accepted"].as_str().unwrap().contains("RFC 3339"),
        "what is accepted: {}",
        got.1
    );
    // Still serving.
    let (s, all) = api.get("/api/v2/dead-letters").await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert_eq!(all["items"].as_array().unwrap().len(), 1);
}

/// The query parameters the API knows, and a few it does not.
const KEYS: &[&str] = &[
    "event_type",
    "eventType",
    "subscription",
    "group",
    "status",
    "kind",
    "from",
    "to",
    "before",
    "offset",
    "limit",
    "evil",
];

/// Listings that take query parameters.
const LISTS: &[&str] = &[
    "/api/v2/dead-letters",
    "/api/v2/events",
    "/api/v2/operations",
    "/api/v2/dead-letter-groups",
];

async fn generated_queries_and_bodies_never_get_a_5xx(api: &Api) {
    api.dead_payments("pay.card", 2).await;
    let query = proptest::collection::vec(
        (
            proptest::sample::select(KEYS),
            proptest::collection::vec(any::<u8>(), 0..24),
        ),
        0..4,
    );
    let scalar = prop_oneof![
        any::<String>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<bool>().prop_map(Value::from),
        Just(Value::Null),
    ];
    let filter = proptest::collection::btree_map(
        proptest::sample::select(
            &[
                "event_type",
                "subscription",
                "group",
                "status",
                "from",
                "to",
                "x",
            ][..],
        ),
        scalar.clone(),
        0..4,
    );
    let replay = proptest::collection::btree_map(
        proptest::sample::select(
            &[
                "from",
                "to",
                "ids",
                "types",
                "statuses",
                "all",
                "rate_limit",
                "unthrottled",
                "mode",
            ][..],
        ),
        prop_oneof![
            scalar.clone(),
            proptest::collection::vec(scalar, 0..3).prop_map(Value::from),
        ],
        0..5,
    );
    let mut runner = TestRunner::deterministic();
    for case in 0..150 {
        let list = LISTS[case % LISTS.len()];
        let params = query.new_tree(&mut runner).unwrap().current();
        let q: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", enc(v)))
            .collect();
        let uri = format!("{list}?{}", q.join("&"));
        not_a_server_error(&uri, &api.get(&uri).await);

        let f = filter.new_tree(&mut runner).unwrap().current();
        let body = json!({ "filter": f });
        let got = api
            .post("/api/v2/dead-letters/bulk/preview", body.clone())
            .await;
        not_a_server_error(&format!("bulk preview {body}"), &got);

        let mut r = replay.new_tree(&mut runner).unwrap().current();
        // Never start a real replay: a preview, or whatever mode was generated if not `run`.
        if !matches!(r.get("mode"), Some(Value::String(m)) if m != "run") {
            r.insert("mode", json!("preview"));
        }
        let body = json!(r);
        let got = api.post("/api/v2/replay", body.clone()).await;
        not_a_server_error(&format!("replay {body}"), &got);
    }
    // Untouched by all that.
    let (s, all) = api.get("/api/v2/dead-letters").await;
    assert_eq!(s, StatusCode::OK, "{all}");
    assert_eq!(all["items"].as_array().unwrap().len(), 2);
}

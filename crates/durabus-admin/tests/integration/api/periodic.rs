//! Periodic events: listed by a reader, paused, resumed and removed by an admin.

use super::*;

pub(super) async fn periodic_events_are_listed_paused_resumed_and_removed(api: &Api) {
    let (s, empty) = api.get("/api/v2/periodic").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(empty, json!([]));
    let p = durabus::Periodic::new("nightly", "0 2 * * *", "report.due", &json!({"k": 1}))
        .unwrap()
        .timezone("Europe/Paris");
    api.bus.periodic(p).await.unwrap();
    let (s, listed) = api
        .call(Method::GET, "/api/v2/periodic", Some(READ), None)
        .await;
    assert_eq!(s, StatusCode::OK, "a reader lists them");
    assert_eq!(listed[0]["name"], "nightly");
    assert_eq!(listed[0]["schedule"], "0 2 * * *");
    assert_eq!(listed[0]["timezone"], "Europe/Paris");
    assert!(listed[0]["next_tick"].is_string(), "{listed}");
    let (s, _) = api
        .call(
            Method::POST,
            "/api/v2/periodic/nightly/pause",
            Some(READ),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a reader cannot pause");
    let (s, paused) = api.post("/api/v2/periodic/nightly/pause", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{paused}");
    assert_eq!(paused["paused"], true);
    assert!(paused["next_tick"].is_null());
    let (s, resumed) = api.post("/api/v2/periodic/nightly/resume", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["paused"], false);
    assert_error(
        &api.post("/api/v2/periodic/nope/pause", json!({})).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    let (s, gone) = api
        .call(
            Method::DELETE,
            "/api/v2/periodic/nightly",
            Some(ADMIN),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{gone}");
    assert_eq!(gone["name"], "nightly");
    assert_eq!(api.get("/api/v2/periodic").await.1, json!([]));
    assert_error(
        &api.call(
            Method::DELETE,
            "/api/v2/periodic/nightly",
            Some(ADMIN),
            None,
        )
        .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
}

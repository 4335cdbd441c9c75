//! Dead letters: listings, filters and pages, actions and their lifecycle, bulk actions as operations.

use super::*;

pub(super) async fn dead_letters_list_filter_page_and_show(api: &Api) {
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
    // New (first seen just now), its seven dead letters in the last of its 24 hours.
    assert_eq!(groups[0]["new"], true, "{groups}");
    let hourly: Vec<u64> = groups[0]["hourly"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    assert_eq!(hourly.len(), 24, "{groups}");
    assert_eq!(hourly[23], 7, "{groups}");
    assert_eq!(hourly.iter().sum::<u64>(), 7, "{groups}");
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
    assert_eq!(
        one["actions"],
        json!(["retry", "resolve", "abandon", "purge"]),
        "a pending record offers what its status allows"
    );
    assert_eq!(
        items[0]["actions"], one["actions"],
        "listings carry them too"
    );
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

pub(super) async fn dead_letter_actions_follow_the_lifecycle_and_record_the_token_name(api: &Api) {
    let ids = api.dead_payments("pay.card", 3).await;
    let (s, d) = api
        .post(&format!("/api/v2/dead-letters/{}/retry", ids[0]), json!({}))
        .await;
    assert_eq!(s, StatusCode::OK, "{d}");
    assert_eq!(d["status"], "retrying");
    assert_eq!(
        d["actions"],
        json!(["resolve", "abandon"]),
        "a retry can be called off until a worker picks it up"
    );
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
    assert_eq!(
        d["actions"],
        json!(["purge"]),
        "a closed record can only be purged"
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

pub(super) async fn bulk_actions_preview_submit_and_run_as_operations(api: &Api) {
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

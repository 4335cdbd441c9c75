//! Health, readiness, subscriptions with their breakers, statistics, `/metrics` and the
//! OpenAPI document.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use durabus::{BreakerSnapshot, StoreStats, Timestamp};
use serde::Serialize;
use utoipa::ToSchema;

use super::Errors;
use crate::AdminState;
use crate::error::{ApiError, ApiResult};

/// A health answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Health {
    /// `ok` (alive) or `ready` (the store answers).
    status: String,
}

/// Liveness: the server runs. Needs no token.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()),
    responses((status = 200, body = Health)))]
pub(crate) async fn healthz() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".into(),
    })
}

/// Readiness: the store answers a query (its schema was checked and brought up to date when
/// it was opened). Needs no token.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, body = Health), Errors))]
pub(crate) async fn readyz(State(state): State<AdminState>) -> ApiResult<axum::Json<Health>> {
    if state.bus().is_shutdown() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        ));
    }
    state.bus().store().next_due().await?;
    Ok(axum::Json(Health {
        status: "ready".into(),
    }))
}

/// A subscription as stored, with its breaker where this process runs its handler.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct SubscriptionView {
    /// Its id.
    id: String,
    /// Its stable name, if it has one.
    name: Option<String>,
    /// Its pattern of event types.
    event_type: String,
    /// When it was made.
    created_at: Timestamp,
    /// Whether its handler runs in the process serving this API.
    in_this_process: bool,
    /// Its circuit breaker, when its handler runs in this process (breakers live in the
    /// process running the handler; a separate admin server does not see them).
    breaker: Option<BreakerSnapshot>,
}

/// Subscriptions stored in the database, with the breakers of those whose handlers run here.
#[utoipa::path(get, path = "/api/v2/subscriptions", tag = "system",
    responses((status = 200, body = Vec<SubscriptionView>), Errors))]
pub(crate) async fn subscriptions(
    State(state): State<AdminState>,
) -> ApiResult<axum::Json<Vec<SubscriptionView>>> {
    let rows = state.bus().store().subscriptions().await?;
    let breakers = state.bus().breakers();
    let local = state.bus().subscriptions();
    Ok(axum::Json(
        rows.into_iter()
            .map(|r| SubscriptionView {
                in_this_process: local.iter().any(|s| s.id == r.id),
                breaker: breakers
                    .iter()
                    .find(|b| b.subscription_id == r.id)
                    .map(|b| b.breaker.clone()),
                id: r.id,
                name: r.name,
                event_type: r.event_type,
                created_at: r.created_at,
            })
            .collect(),
    ))
}

/// Counts by status and type, and the retry count distribution.
#[utoipa::path(get, path = "/api/v2/stats", tag = "system",
    responses((status = 200, body = StoreStats), Errors))]
pub(crate) async fn stats(State(state): State<AdminState>) -> ApiResult<axum::Json<StoreStats>> {
    let store = state.bus().store();
    Ok(axum::Json(StoreStats::collect(store.as_ref()).await?))
}

/// The Prometheus text of the bus's metrics (every name is listed in the operations guide).
#[utoipa::path(get, path = "/metrics", tag = "system",
    responses((status = 200, description = "Prometheus text exposition", content_type = "application/openmetrics-text", body = String), Errors))]
pub(crate) async fn metrics(State(state): State<AdminState>) -> ApiResult<Response> {
    let text = state.bus().metrics_text().await?;
    Ok((
        [(header::CONTENT_TYPE, durabus::telemetry::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/api/v2/openapi.json", tag = "system",
    responses((status = 200, description = "The OpenAPI document", body = Object), Errors))]
pub(crate) async fn openapi_json() -> Response {
    static DOC: OnceLock<String> = OnceLock::new();
    let doc = DOC.get_or_init(|| {
        crate::openapi()
            .to_json()
            .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    });
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
}

//! `/api/v2/rate-limits…`: rate limits per subscription across every worker process (list,
//! set, remove).

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use durabus::RateLimit;
use serde::Deserialize;
use utoipa::ToSchema;

use super::Errors;
use crate::AdminState;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::extract::{Json, Path};

/// The rate limits, by subscription.
#[utoipa::path(get, path = "/api/v2/rate-limits", tag = "rate-limits",
    responses((status = 200, body = Vec<RateLimit>), Errors))]
pub(crate) async fn list(State(state): State<AdminState>) -> ApiResult<axum::Json<Vec<RateLimit>>> {
    Ok(axum::Json(state.bus().rate_limits().list().await?))
}

/// A limit to set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LimitBody {
    /// Handler runs allowed per interval (1 to 1,000,000).
    #[serde(deserialize_with = "durabus::whole::number")]
    #[schema(value_type = u32)]
    per: u32,
    /// The interval in milliseconds (1 to 86,400,000: a day).
    #[serde(deserialize_with = "durabus::whole::number")]
    #[schema(value_type = u64)]
    interval_ms: u64,
}

/// Limits a subscription to `per` handler runs per `interval_ms` across every worker process,
/// replacing its limit at once (each process reads it within its refresh); events past the
/// limit wait for their slot. `404` for an unknown subscription.
#[utoipa::path(put, path = "/api/v2/rate-limits/{subscription}", tag = "rate-limits",
    params(("subscription" = String, Path, description = "The subscription's name (or id)")),
    request_body = LimitBody,
    responses((status = 200, description = "The limit on record", body = RateLimit), Errors))]
pub(crate) async fn set(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(subscription): Path<String>,
    Json(body): Json<LimitBody>,
) -> ApiResult<axum::Json<RateLimit>> {
    let limit = state
        .bus()
        .rate_limits()
        .set(
            &subscription,
            body.per,
            Duration::from_millis(body.interval_ms),
            &caller.actor(),
        )
        .await?;
    Ok(axum::Json(limit))
}

/// Removes a subscription's limit and answers it (`404` if it has none).
#[utoipa::path(delete, path = "/api/v2/rate-limits/{subscription}", tag = "rate-limits",
    params(("subscription" = String, Path, description = "The subscription's name (or id)")),
    responses((status = 200, description = "The limit removed", body = RateLimit), Errors))]
pub(crate) async fn remove(
    State(state): State<AdminState>,
    Path(subscription): Path<String>,
) -> ApiResult<axum::Json<RateLimit>> {
    Ok(axum::Json(
        state.bus().rate_limits().remove(&subscription).await?,
    ))
}

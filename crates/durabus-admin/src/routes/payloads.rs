//! `/api/v2/events/{event_id}/payloads…` and `/api/v2/payload-config…`: snapshots by stage,
//! soft delete with a reason, and the configuration per event type.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use durabus::{ConfigInput, EventId, PayloadConfig, Snapshot};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Errors;
use crate::AdminState;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::extract::{Json, Path};

/// Why the payloads are deleted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeleteBody {
    /// Kept for the audit (required, at most 255 bytes).
    reason: String,
}

/// How many snapshots were soft-deleted.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Deleted {
    /// Snapshots whose bytes were cleared.
    deleted: u64,
}

/// Every payload snapshot of an event, newest first, decompressed and redacted as
/// configured; soft-deleted ones come without a payload and with their deletion.
#[utoipa::path(get, path = "/api/v2/events/{event_id}/payloads", tag = "payloads",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id")),
    responses((status = 200, body = Vec<Snapshot>), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Path(id): Path<EventId>,
) -> ApiResult<axum::Json<Vec<Snapshot>>> {
    Ok(axum::Json(state.bus().payloads().list(id).await?))
}

/// The newest snapshot of an event at one stage.
#[utoipa::path(get, path = "/api/v2/events/{event_id}/payloads/{stage}", tag = "payloads",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id"),
           ("stage" = String, Path, description = "The stage (`published`, `error`, …)")),
    responses((status = 200, body = Snapshot), Errors))]
pub(crate) async fn get(
    State(state): State<AdminState>,
    Path((id, stage)): Path<(EventId, String)>,
) -> ApiResult<axum::Json<Snapshot>> {
    Ok(axum::Json(state.bus().payloads().get(id, &stage).await?))
}

/// Soft-deletes every snapshot of an event: the bytes are cleared; the rows stay with who,
/// when and why.
#[utoipa::path(delete, path = "/api/v2/events/{event_id}/payloads", tag = "payloads",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id")),
    request_body = DeleteBody,
    responses((status = 200, body = Deleted), Errors))]
pub(crate) async fn delete(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<EventId>,
    Json(body): Json<DeleteBody>,
) -> ApiResult<axum::Json<Deleted>> {
    let deleted = state
        .bus()
        .payloads()
        .delete(id, &body.reason, &caller.actor())
        .await?;
    Ok(axum::Json(Deleted { deleted }))
}

/// The payload configuration rows (`*` is the default for every type without its own).
#[utoipa::path(get, path = "/api/v2/payload-config", tag = "payloads",
    responses((status = 200, body = Vec<PayloadConfig>), Errors))]
pub(crate) async fn configs(
    State(state): State<AdminState>,
) -> ApiResult<axum::Json<Vec<PayloadConfig>>> {
    Ok(axum::Json(state.bus().payloads().configs().await?))
}

/// Sets the configuration of an event type (`*` for the default), replacing its row. Applies
/// at once here and within seconds in other processes.
#[utoipa::path(put, path = "/api/v2/payload-config/{event_type}", tag = "payloads",
    params(("event_type" = String, Path, description = "An exact event type, or `*`")),
    request_body = ConfigInput,
    responses((status = 200, body = PayloadConfig), Errors))]
pub(crate) async fn set_config(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(event_type): Path<String>,
    Json(input): Json<ConfigInput>,
) -> ApiResult<axum::Json<PayloadConfig>> {
    Ok(axum::Json(
        state
            .bus()
            .payloads()
            .set_config(&event_type, input, &caller.actor())
            .await?,
    ))
}

/// Deletes the configuration row of an event type: it falls back to `*`, then the defaults.
#[utoipa::path(delete, path = "/api/v2/payload-config/{event_type}", tag = "payloads",
    params(("event_type" = String, Path, description = "An exact event type, or `*`")),
    responses((status = 204, description = "Deleted"), Errors))]
pub(crate) async fn delete_config(
    State(state): State<AdminState>,
    Path(event_type): Path<String>,
) -> ApiResult<StatusCode> {
    state.bus().payloads().delete_config(&event_type).await?;
    Ok(StatusCode::NO_CONTENT)
}

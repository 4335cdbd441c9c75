//! `/api/v2/periodic…`: the periodic events the applications registered (list, pause,
//! resume, remove).

use axum::extract::State;
use durabus::PeriodicInfo;

use super::Errors;
use crate::AdminState;
use crate::error::ApiResult;
use crate::extract::Path;

/// The periodic events, by name, with their schedules, time zones, last and next ticks.
#[utoipa::path(get, path = "/api/v2/periodic", tag = "periodic",
    responses((status = 200, body = Vec<PeriodicInfo>), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
) -> ApiResult<axum::Json<Vec<PeriodicInfo>>> {
    Ok(axum::Json(state.bus().periodics().list().await?))
}

/// Pauses a periodic event: its ticks are skipped until it is resumed (`404` for an unknown
/// name).
#[utoipa::path(post, path = "/api/v2/periodic/{name}/pause", tag = "periodic",
    params(("name" = String, Path, description = "The periodic event's name")),
    responses((status = 200, body = PeriodicInfo), Errors))]
pub(crate) async fn pause(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<PeriodicInfo>> {
    Ok(axum::Json(state.bus().periodics().pause(&name).await?))
}

/// Resumes a paused periodic event from its next tick (`404` for an unknown name).
#[utoipa::path(post, path = "/api/v2/periodic/{name}/resume", tag = "periodic",
    params(("name" = String, Path, description = "The periodic event's name")),
    responses((status = 200, body = PeriodicInfo), Errors))]
pub(crate) async fn resume(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<PeriodicInfo>> {
    Ok(axum::Json(state.bus().periodics().resume(&name).await?))
}

/// Removes a periodic event and answers it as it was (`404` for an unknown name). An
/// application that registers it on start brings it back.
#[utoipa::path(delete, path = "/api/v2/periodic/{name}", tag = "periodic",
    params(("name" = String, Path, description = "The periodic event's name")),
    responses((status = 200, body = PeriodicInfo), Errors))]
pub(crate) async fn remove(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<PeriodicInfo>> {
    Ok(axum::Json(state.bus().periodics().remove(&name).await?))
}

//! `/api/v2/operations…` (bulk actions and replays: list, one, cancel) and `/api/v2/jobs…`
//! (the maintenance jobs: list, run now).

use axum::extract::State;
use durabus::scheduler::{JobInfo, JobReport};
use durabus::{Operation, OperationStatus};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{Errors, limit};
use crate::AdminState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};

/// Filters of the operations listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only this status: `pending`, `running`, `completed`, `failed`, `cancelled`.
    status: Option<String>,
    /// Only this kind: `replay`, `dead_letters.retry`, `dead_letters.resolve`,
    /// `dead_letters.abandon`, `dead_letters.purge`.
    kind: Option<String>,
    /// Most operations: 1 to 1000, 50 by default.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    limit: Option<u32>,
}

/// Durable operations, newest first.
#[utoipa::path(get, path = "/api/v2/operations", tag = "operations", params(ListQuery),
    responses((status = 200, body = Vec<Operation>), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Query(q): Query<ListQuery>,
) -> ApiResult<axum::Json<Vec<Operation>>> {
    let status = q
        .status
        .as_deref()
        .map(|s| s.parse::<OperationStatus>().map_err(ApiError::from))
        .transpose()?;
    let kind = q
        .kind
        .as_deref()
        .map(|k| k.parse::<durabus::OperationKind>().map_err(ApiError::from))
        .transpose()?;
    let n = limit(q.limit, 50, 1000)?;
    Ok(axum::Json(
        state.bus().operations().list(status, kind, n).await?,
    ))
}

/// One operation: selection, progress, actor, times.
#[utoipa::path(get, path = "/api/v2/operations/{id}", tag = "operations",
    params(("id" = String, Path, description = "The operation's id")),
    responses((status = 200, body = Operation), Errors))]
pub(crate) async fn get(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Operation>> {
    Ok(axum::Json(state.bus().operations().get(&id).await?))
}

/// Cancels an operation: at once if it has not started, else at its next chunk (`409` if it
/// has ended).
#[utoipa::path(post, path = "/api/v2/operations/{id}/cancel", tag = "operations",
    params(("id" = String, Path, description = "The operation's id")),
    responses((status = 200, body = Operation), Errors))]
pub(crate) async fn cancel(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<Operation>> {
    Ok(axum::Json(state.bus().operations().cancel(&id).await?))
}

/// The maintenance jobs with their schedules, next and last runs.
#[utoipa::path(get, path = "/api/v2/jobs", tag = "jobs",
    responses((status = 200, body = Vec<JobInfo>), Errors))]
pub(crate) async fn jobs(State(state): State<AdminState>) -> ApiResult<axum::Json<Vec<JobInfo>>> {
    Ok(axum::Json(state.bus().scheduler()?.jobs().await?))
}

/// Runs a job now, outside its schedule; answers when it has finished (`status: skipped` if a
/// run was already going). A run outlives a request that times out.
#[utoipa::path(post, path = "/api/v2/jobs/{name}/run", tag = "jobs",
    params(("name" = String, Path, description = "The job: `dead-letter-auto-retry`, `cleanup-dead-letters`, `cleanup-history`, `cleanup-payloads`, `refresh-stats`")),
    responses((status = 200, body = JobReport), Errors))]
pub(crate) async fn run_job(
    State(state): State<AdminState>,
    Path(name): Path<String>,
) -> ApiResult<axum::Json<JobReport>> {
    let scheduler = state.bus().scheduler()?;
    // Its own task: a client that goes away (or a request timeout) must not stop a job
    // halfway and leave its lock to run out.
    let run = tokio::spawn(async move { scheduler.run_now(&name).await });
    match run.await {
        Ok(report) => Ok(axum::Json(report?)),
        Err(e) => Err(ApiError::internal(format!("the job's task failed: {e}"))),
    }
}

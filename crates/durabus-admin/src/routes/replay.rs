//! `/api/v2/replay…`: preview, dry run or start a replay; follow it; cancel it.

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use durabus::replay::{DEFAULT_OPERATOR_RATE, DryRun, ReplayPreview};
use durabus::{
    EventId, EventStatus, Operation, ReplayHooks, ReplayRequest, ReplayResult, ReplaySelection,
    Timestamp,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::Errors;
use crate::AdminState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path};

/// What to do with the replay request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Mode {
    /// Count the selection and show the first events (fast; changes nothing).
    Preview,
    /// Walk the whole selection as the replay would (changes nothing).
    DryRun,
    /// Submit the replay; the server runs it.
    #[default]
    Run,
}

/// A replay: which stored events, how fast, and what to do.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ReplayBody {
    /// Events created at or after this time.
    from: Option<Timestamp>,
    /// Events created before this time (default: now).
    to: Option<Timestamp>,
    /// Only these events (at most 10,000).
    ids: Vec<EventId>,
    /// Only these types, exact or globs with `*` (at most 100).
    types: Vec<String>,
    /// Only events in these statuses.
    statuses: Vec<EventStatus>,
    /// Select the whole history (needed when neither `from` nor `ids` is given).
    all: bool,
    /// Most events replayed per second: 1 to 1,000,000; 2,000 unless given.
    #[serde(default, deserialize_with = "durabus::whole::optional")]
    rate_limit: Option<u32>,
    /// No rate limit: as fast as the store goes (live traffic shares the store).
    unthrottled: bool,
    /// `preview`, `dry_run` or `run` (the default).
    mode: Mode,
}

/// The answer to a preview or a dry run: one of the two is set, as `mode` says.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReplayCheck {
    /// `preview` or `dry_run`.
    mode: String,
    /// The preview's count and first events.
    preview: Option<ReplayPreview>,
    /// The dry run's count, types and samples.
    dry_run: Option<DryRun>,
}

/// A replay's state: the specification's result, and the operation with its progress.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReplayStatus {
    /// Processed, skipped, errors, duration, status.
    result: ReplayResult,
    /// The operation: selection, total, progress, actor, times.
    operation: Operation,
}

/// Previews, dry-runs or starts a replay of stored events through normal delivery (each as a
/// new event that names its original). A run answers `202` with the operation.
#[utoipa::path(post, path = "/api/v2/replay", tag = "replay", request_body = ReplayBody,
    responses(
        (status = 200, description = "The preview or dry run", body = ReplayCheck),
        (status = 202, description = "Submitted", body = Operation),
        Errors))]
pub(crate) async fn start(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<ReplayBody>,
) -> ApiResult<Response> {
    if body.unthrottled && body.rate_limit.is_some() {
        return Err(ApiError::invalid(
            "rate_limit",
            "given with unthrottled",
            "rate_limit or unthrottled, not both",
        ));
    }
    let request = ReplayRequest {
        selection: ReplaySelection {
            from: body.from,
            to: body.to,
            ids: body.ids,
            types: body.types,
            statuses: body.statuses,
            all: body.all,
        },
        rate_limit: if body.unthrottled {
            None
        } else {
            Some(body.rate_limit.unwrap_or(DEFAULT_OPERATOR_RATE))
        },
    };
    let replays = state.bus().replays();
    Ok(match body.mode {
        Mode::Preview => {
            request.validate()?;
            let preview = replays.preview(&request.selection).await?;
            axum::Json(ReplayCheck {
                mode: "preview".into(),
                preview: Some(preview),
                dry_run: None,
            })
            .into_response()
        }
        Mode::DryRun => {
            let dry = replays
                .dry_run(&request, &ReplayHooks::default(), |_| {})
                .await?;
            axum::Json(ReplayCheck {
                mode: "dry_run".into(),
                preview: None,
                dry_run: Some(dry),
            })
            .into_response()
        }
        Mode::Run => {
            let op = replays.submit(&request, &caller.actor()).await?;
            (StatusCode::ACCEPTED, axum::Json(op)).into_response()
        }
    })
}

/// A replay's result and progress.
#[utoipa::path(get, path = "/api/v2/replay/{id}", tag = "replay",
    params(("id" = String, Path, description = "The replay's operation id")),
    responses((status = 200, body = ReplayStatus), Errors))]
pub(crate) async fn status(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<ReplayStatus>> {
    let replays = state.bus().replays();
    let operation = replays.get(&id).await?;
    Ok(axum::Json(ReplayStatus {
        result: ReplayResult::of(&operation, replays.now()),
        operation,
    }))
}

/// Cancels a replay: at once if it has not started, else after its current chunk (`409` if
/// it has ended).
#[utoipa::path(post, path = "/api/v2/replay/{id}/cancel", tag = "replay",
    params(("id" = String, Path, description = "The replay's operation id")),
    responses((status = 200, body = ReplayStatus), Errors))]
pub(crate) async fn cancel(
    State(state): State<AdminState>,
    Path(id): Path<String>,
) -> ApiResult<axum::Json<ReplayStatus>> {
    let replays = state.bus().replays();
    let operation = replays.cancel(&id).await?;
    Ok(axum::Json(ReplayStatus {
        result: ReplayResult::of(&operation, replays.now()),
        operation,
    }))
}

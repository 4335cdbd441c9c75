//! `/api/v2/pauses…`: pause a subscription, every subscription matching a pattern, or the
//! whole bus, across every worker process; list the pauses; resume one.

use std::time::Duration;

use axum::Extension;
use axum::extract::State;
use durabus::{Pause, PauseRequest, PauseScope, ResumeRequest, ResumeTarget, Timestamp};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::{Errors, limit};
use crate::AdminState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};

/// Which pauses to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Also the pauses that ended at or after this time (RFC 3339), newest first.
    #[param(value_type = Option<String>, format = DateTime)]
    ended_since: Option<Timestamp>,
    /// Most ended pauses: 1 to 1000, 100 by default.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    limit: Option<u32>,
}

/// The active pauses, oldest first, each with the events it holds parked; with
/// `ended_since`, also the pauses that ended since.
#[utoipa::path(get, path = "/api/v2/pauses", tag = "pauses", params(ListQuery),
    responses((status = 200, body = Vec<Pause>), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Query(q): Query<ListQuery>,
) -> ApiResult<axum::Json<Vec<Pause>>> {
    let limit = limit(q.limit, 100, 1000)?;
    let list = state
        .bus()
        .pauses()
        .list(q.ended_since, limit as usize)
        .await?;
    Ok(axum::Json(list))
}

/// What a pause covers.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ScopeKind {
    /// One subscription (`target`: its name).
    Subscription,
    /// Every subscription whose name matches `target` (`*`: any run of characters).
    Matching,
    /// The whole bus (no `target`).
    Bus,
}

/// A pause to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PauseBody {
    /// What it covers.
    scope: ScopeKind,
    /// The subscription's name or the pattern; absent (or null) for the bus.
    #[serde(default)]
    target: Option<String>,
    /// Why (required, at most 1000 characters).
    reason: String,
    /// Resume by itself after this many seconds (1 to a year); absent: when resumed.
    #[serde(default, deserialize_with = "durabus::whole::optional")]
    #[schema(value_type = Option<u64>)]
    for_seconds: Option<u64>,
}

/// Pauses a subscription, every subscription matching a pattern, or the whole bus; every
/// worker process stops running its handlers within its refresh (500 ms by default) and
/// parks its events until the pause ends. `404` for an unknown subscription, `422` for a bad
/// value.
#[utoipa::path(post, path = "/api/v2/pauses", tag = "pauses",
    request_body = PauseBody,
    responses((status = 200, description = "The pause on record", body = Pause), Errors))]
pub(crate) async fn pause(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<PauseBody>,
) -> ApiResult<axum::Json<Pause>> {
    let scope = match (body.scope, body.target) {
        (ScopeKind::Bus, None) => PauseScope::Bus,
        (ScopeKind::Subscription, Some(t)) => PauseScope::Subscription(t),
        (ScopeKind::Matching, Some(t)) => PauseScope::Matching(t),
        (ScopeKind::Bus, Some(_)) => {
            return Err(ApiError::invalid(
                "target",
                "a pause of the whole bus names no target",
                "absent or null for scope bus",
            ));
        }
        (_, None) => {
            return Err(ApiError::invalid(
                "target",
                "absent",
                "the subscription's name or the pattern",
            ));
        }
    };
    let until = match body.for_seconds {
        None => None,
        Some(s) if (1..=durabus::pause::MAX_PAUSE_SECONDS).contains(&s) => {
            Some(state.bus().clock().now().plus(Duration::from_secs(s)))
        }
        Some(s) => {
            return Err(ApiError::invalid(
                "for_seconds",
                s.to_string(),
                format!("1 to {}", durabus::pause::MAX_PAUSE_SECONDS),
            ));
        }
    };
    let request = PauseRequest {
        scope,
        until,
        actor: caller.actor(),
        reason: body.reason,
    };
    Ok(axum::Json(state.bus().pause(request).await?))
}

/// Why a pause is resumed.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeBody {
    /// Why (optional, at most 1000 characters).
    #[serde(default)]
    reason: Option<String>,
}

/// Ends a pause; the events it parked are due at once. Answers it as ended. `404` for an
/// unknown pause, `409` for one that has ended already.
#[utoipa::path(post, path = "/api/v2/pauses/{id}/resume", tag = "pauses",
    params(("id" = i64, Path, description = "The pause's id")),
    request_body(content = Option<ResumeBody>, description = "Optional"),
    responses((status = 200, description = "The pause, ended", body = Pause), Errors))]
pub(crate) async fn resume(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<i64>,
    body: axum::body::Bytes,
) -> ApiResult<axum::Json<Pause>> {
    let body: ResumeBody = crate::extract::optional_json(&body)?;
    let reason = body.reason;
    let request = ResumeRequest {
        target: ResumeTarget::Id(id),
        actor: caller.actor(),
        reason,
    };
    let mut ended = state.bus().resume(request).await?;
    ended
        .pop()
        .map(axum::Json)
        .ok_or_else(|| ApiError::internal("the resume ended no pause"))
}

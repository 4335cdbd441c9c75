//! `/api/v2/events`: the history query and one event.

use axum::Extension;
use axum::extract::State;
use durabus::cancel::{CancelRequest, Cancellation};
use durabus::{Event, EventId, EventQuery, EventStatus, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Errors, limit};
use crate::AdminState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};

/// Filters of the history query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only this status: `scheduled`, `pending`, `processing`, `done`, `dlq`, `cancelled`.
    status: Option<String>,
    /// Only this exact type.
    #[serde(alias = "eventType")]
    event_type: Option<String>,
    /// Created at or after (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<Timestamp>,
    /// Created before (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<Timestamp>,
    /// Only events with this ordering key.
    ordering_key: Option<String>,
    /// Events to skip (the `next_offset` of the previous page).
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    offset: Option<u64>,
    /// Most events: 1 to 1000, 100 by default.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    limit: Option<u32>,
}

/// A page of events.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventPage {
    /// The events, oldest first.
    items: Vec<Event>,
    /// The `offset` of the next page; `null` on the last page.
    next_offset: Option<u64>,
}

/// Stored events, filtered by status, type, time and ordering key.
#[utoipa::path(get, path = "/api/v2/events", tag = "events", params(ListQuery),
    responses((status = 200, body = EventPage), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Query(q): Query<ListQuery>,
) -> ApiResult<axum::Json<EventPage>> {
    let status = q
        .status
        .as_deref()
        .map(|s| s.parse::<EventStatus>().map_err(ApiError::from))
        .transpose()?;
    let n = limit(q.limit, 100, 1000)?;
    let offset = q.offset.unwrap_or(0);
    if let Some(k) = &q.ordering_key
        && (k.is_empty() || k.len() > durabus::options::ORDERING_KEY_MAX || k.contains('\0'))
    {
        return Err(ApiError::from(durabus::Error::invalid(
            "ordering_key",
            format!("a key of {} bytes", k.len()),
            format!(
                "1 to {} bytes, no NUL character",
                durabus::options::ORDERING_KEY_MAX
            ),
        )));
    }
    let items = state
        .bus()
        .history()
        .list(EventQuery {
            status,
            event_type: q.event_type,
            created_from: q.from,
            created_before: q.to,
            ordering_key: q.ordering_key,
            offset,
            limit: u64::from(n),
        })
        .await?;
    let next_offset = (items.len() == n as usize).then(|| offset + u64::from(n));
    Ok(axum::Json(EventPage { items, next_offset }))
}

/// One stored event.
#[utoipa::path(get, path = "/api/v2/events/{event_id}", tag = "events",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id")),
    responses((status = 200, body = Event), Errors))]
pub(crate) async fn get(
    State(state): State<AdminState>,
    Path(id): Path<EventId>,
) -> ApiResult<axum::Json<Event>> {
    Ok(axum::Json(state.bus().history().get(id).await?))
}

/// What to cancel and why.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CancelBody {
    /// Why (required, at most 1000 characters).
    reason: String,
    /// Only for this subscription (its name, or its id for an unnamed one); absent: every one.
    #[serde(default)]
    subscription: Option<String>,
}

/// Cancels an event that has not been delivered, for every subscription or one. A waiting
/// event never runs (`outcome: cancelled`); a running one finishes its attempt and no retry
/// follows it (`outcome: running`). `404` for an unknown event, `409` for one that has
/// finished, or whose subscription has handled it already.
#[utoipa::path(post, path = "/api/v2/events/{event_id}/cancel", tag = "events",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id")),
    request_body = CancelBody,
    responses((status = 200, description = "The cancellation on record", body = Cancellation), Errors))]
pub(crate) async fn cancel(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<EventId>,
    Json(body): Json<CancelBody>,
) -> ApiResult<axum::Json<Cancellation>> {
    let request = CancelRequest {
        event_id: id,
        subscription: body.subscription,
        actor: caller.actor(),
        reason: body.reason,
    };
    Ok(axum::Json(state.bus().cancel(request).await?))
}

/// An event's cancellations, oldest first (empty for an unknown event).
#[utoipa::path(get, path = "/api/v2/events/{event_id}/cancellations", tag = "events",
    params(("event_id" = uuid::Uuid, Path, description = "The event's id")),
    responses((status = 200, body = Vec<Cancellation>), Errors))]
pub(crate) async fn cancellations(
    State(state): State<AdminState>,
    Path(id): Path<EventId>,
) -> ApiResult<axum::Json<Vec<Cancellation>>> {
    Ok(axum::Json(state.bus().cancellations(id).await?))
}

//! `/api/v2/events`: the history query and one event.

use axum::extract::State;
use durabus::{Event, EventId, EventQuery, EventStatus, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Errors, limit};
use crate::AdminState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Path, Query};

/// Filters of the history query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only this status: `pending`, `processing`, `done`, `dlq`.
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

/// Stored events, filtered by status, type and time.
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
    let items = state
        .bus()
        .history()
        .list(EventQuery {
            status,
            event_type: q.event_type,
            created_from: q.from,
            created_before: q.to,
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

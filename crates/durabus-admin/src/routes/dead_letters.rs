//! `/api/v2/dead-letters…` and `/api/v2/dead-letter-groups`: list, one, retry, resolve,
//! abandon, groups, bulk preview and bulk actions (durable operations).

use axum::Extension;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use durabus::{
    Action, BulkRequest, DeadLetter, DeadLetterFilter, DeadLetterStatus, DeadLetterSummaryPage,
    EventId, GroupTrend, Keyset, Operation, Preview, Timestamp,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Errors, limit};
use crate::AdminState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Json, Path, Query};

/// Filters of a dead-letter listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListQuery {
    /// Only these statuses, comma-separated: `pending`, `retrying`, `resolved`, `abandoned`.
    status: Option<String>,
    /// Only this event type, exact or a glob with `*` (`order.*`).
    #[serde(alias = "eventType")]
    event_type: Option<String>,
    /// Only failures of this subscription (its name, or its id if unnamed).
    subscription: Option<String>,
    /// Only this failure group (a fingerprint from `/api/v2/dead-letter-groups`).
    group: Option<String>,
    /// Only dead letters created at or after this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    from: Option<Timestamp>,
    /// Only dead letters created before this time (RFC 3339).
    #[param(value_type = Option<String>, format = DateTime)]
    to: Option<Timestamp>,
    /// Start after this position: the `next` of the previous page.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    before: Option<i64>,
    /// Most records per page: 1 to 1000, 50 by default.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    limit: Option<u32>,
}

/// Which dead letters a bulk action covers. An empty filter selects every dead letter.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct FilterBody {
    /// Only these statuses (any, if empty).
    status: Vec<DeadLetterStatus>,
    /// Only this event type, exact or a glob with `*`.
    event_type: Option<String>,
    /// Only failures of this subscription.
    subscription: Option<String>,
    /// Only this failure group.
    group: Option<String>,
    /// Created at or after.
    from: Option<Timestamp>,
    /// Created before.
    to: Option<Timestamp>,
}

impl From<FilterBody> for DeadLetterFilter {
    fn from(f: FilterBody) -> DeadLetterFilter {
        DeadLetterFilter {
            status: f.status,
            event_type: f.event_type,
            subscription: f.subscription,
            group: f.group,
            created_from: f.from,
            created_before: f.to,
        }
    }
}

/// What a bulk preview covers.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PreviewBody {
    /// The selection.
    #[serde(deserialize_with = "crate::extract::object")]
    filter: FilterBody,
}

/// A bulk action's name.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum BulkAction {
    /// Send back through delivery.
    Retry,
    /// Close, with a note.
    Resolve,
    /// Stop auto-retrying.
    Abandon,
    /// Delete the records and their events.
    Purge,
}

/// A bulk action on everything a filter selects.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkBody {
    /// What to do.
    action: BulkAction,
    /// Why: required for `resolve`, optional for `abandon`, refused otherwise.
    #[serde(default)]
    note: Option<String>,
    /// The selection.
    #[serde(default, deserialize_with = "crate::extract::object")]
    filter: FilterBody,
    /// Must be `true` when the filter is empty (every dead letter).
    #[serde(default)]
    all: bool,
}

/// A note on resolving.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResolveBody {
    /// Why it is resolved (required, at most 2000 bytes).
    note: String,
}

/// An optional note on abandoning.
#[derive(Debug, Default, Deserialize, Serialize, ToSchema)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AbandonBody {
    /// Why (at most 2000 bytes).
    note: Option<String>,
}

/// The `status` parameter: statuses separated by commas, nothing else (as the document's
/// pattern says).
fn statuses(text: Option<&str>) -> ApiResult<Vec<DeadLetterStatus>> {
    text.map(|t| {
        t.split(',')
            .map(|s| s.parse::<DeadLetterStatus>().map_err(ApiError::from))
            .collect()
    })
    .unwrap_or_else(|| Ok(Vec::new()))
}

/// Dead letters, newest first, one keyset page at a time.
#[utoipa::path(get, path = "/api/v2/dead-letters", tag = "dead-letters", params(ListQuery),
    responses((status = 200, description = "One page (records without payload and error history; `GET /api/v2/dead-letters/{id}` has them); `next` is the `before` of the next page", body = DeadLetterSummaryPage), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
    Query(q): Query<ListQuery>,
) -> ApiResult<axum::Json<DeadLetterSummaryPage>> {
    let filter = DeadLetterFilter {
        status: statuses(q.status.as_deref())?,
        event_type: q.event_type,
        subscription: q.subscription,
        group: q.group,
        created_from: q.from,
        created_before: q.to,
    };
    let page = Keyset {
        before: q.before,
        limit: limit(q.limit, 50, durabus::dlq::MAX_PAGE)?,
    };
    Ok(axum::Json(
        state
            .bus()
            .dead_letters()
            .list_summaries(filter, page)
            .await?,
    ))
}

/// One dead letter: payload (redacted as configured), every round's errors, lifecycle.
#[utoipa::path(get, path = "/api/v2/dead-letters/{id}", tag = "dead-letters",
    params(("id" = uuid::Uuid, Path, description = "The dead letter's event id")),
    responses((status = 200, body = DeadLetter), Errors))]
pub(crate) async fn get(
    State(state): State<AdminState>,
    Path(id): Path<EventId>,
) -> ApiResult<axum::Json<DeadLetter>> {
    Ok(axum::Json(state.bus().dead_letters().get(id).await?))
}

async fn act(
    state: &AdminState,
    id: EventId,
    action: Action,
    caller: &Caller,
) -> ApiResult<axum::Json<DeadLetter>> {
    match state
        .bus()
        .dead_letters()
        .act(id, action, &caller.actor())
        .await?
    {
        Some(d) => Ok(axum::Json(d)),
        None => Err(ApiError::not_found(format!("dead letter {id} not found"))),
    }
}

/// Sends a dead letter back through normal delivery with a fresh attempt budget (`409` unless
/// it is pending or abandoned).
#[utoipa::path(post, path = "/api/v2/dead-letters/{id}/retry", tag = "dead-letters",
    params(("id" = uuid::Uuid, Path, description = "The dead letter's event id")),
    responses((status = 200, description = "The record after the retry (`retrying`)", body = DeadLetter), Errors))]
pub(crate) async fn retry(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<EventId>,
) -> ApiResult<axum::Json<DeadLetter>> {
    act(&state, id, Action::Retry, &caller).await
}

/// Resolves a dead letter; the note is required.
#[utoipa::path(post, path = "/api/v2/dead-letters/{id}/resolve", tag = "dead-letters",
    params(("id" = uuid::Uuid, Path, description = "The dead letter's event id")),
    request_body = ResolveBody,
    responses((status = 200, description = "The record, `resolved`", body = DeadLetter), Errors))]
pub(crate) async fn resolve(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<EventId>,
    Json(body): Json<ResolveBody>,
) -> ApiResult<axum::Json<DeadLetter>> {
    act(&state, id, Action::Resolve { note: body.note }, &caller).await
}

/// Abandons a dead letter: no more auto retries (the body, with its note, is optional).
#[utoipa::path(post, path = "/api/v2/dead-letters/{id}/abandon", tag = "dead-letters",
    params(("id" = uuid::Uuid, Path, description = "The dead letter's event id")),
    request_body(content = Option<AbandonBody>, description = "Optional"),
    responses((status = 200, description = "The record, `abandoned`", body = DeadLetter), Errors))]
pub(crate) async fn abandon(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<EventId>,
    body: Bytes,
) -> ApiResult<axum::Json<DeadLetter>> {
    let body: AbandonBody = crate::extract::optional_json(&body)?;
    act(&state, id, Action::Abandon { note: body.note }, &caller).await
}

/// Query of the groups listing.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupsQuery {
    /// Most groups: 1 to 1000, 50 by default.
    #[serde(default, deserialize_with = "durabus::whole::optional_text")]
    limit: Option<u32>,
}

/// Failure groups: dead letters with the same cause, largest first, each with its dead
/// letters per hour over the last day (`hourly`, oldest first) and whether it is new (first
/// seen less than a day ago).
#[utoipa::path(get, path = "/api/v2/dead-letter-groups", tag = "dead-letters", params(GroupsQuery),
    responses((status = 200, body = Vec<GroupTrend>), Errors))]
pub(crate) async fn groups(
    State(state): State<AdminState>,
    Query(q): Query<GroupsQuery>,
) -> ApiResult<axum::Json<Vec<GroupTrend>>> {
    let n = limit(q.limit, 50, 1000)?;
    Ok(axum::Json(
        state.bus().dead_letters().group_trends(n).await?,
    ))
}

/// What a bulk action on this filter would cover now: the count and the newest samples.
/// Changes nothing (an admin token is needed all the same: it is the first step of a write).
#[utoipa::path(post, path = "/api/v2/dead-letters/bulk/preview", tag = "dead-letters",
    request_body = PreviewBody,
    responses((status = 200, body = Preview), Errors))]
pub(crate) async fn bulk_preview(
    State(state): State<AdminState>,
    Json(body): Json<PreviewBody>,
) -> ApiResult<axum::Json<Preview>> {
    let filter = DeadLetterFilter::from(body.filter);
    Ok(axum::Json(
        state.bus().dead_letters().preview(&filter).await?,
    ))
}

/// Submits a bulk action as a durable operation over the selection frozen now; the server
/// runs it in chunks. Follow it at `/api/v2/operations/{id}`.
#[utoipa::path(post, path = "/api/v2/dead-letters/bulk", tag = "dead-letters",
    request_body = BulkBody,
    responses((status = 202, description = "Submitted", body = Operation), Errors))]
pub(crate) async fn bulk(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Json(body): Json<BulkBody>,
) -> ApiResult<(StatusCode, axum::Json<Operation>)> {
    let action = match (body.action, body.note) {
        (BulkAction::Retry, None) => Action::Retry,
        (BulkAction::Purge, None) => Action::Purge,
        (BulkAction::Resolve, Some(note)) => Action::Resolve { note },
        (BulkAction::Resolve, None) => {
            return Err(ApiError::invalid(
                "note",
                "resolving dead letters needs a note that says why",
                "1 to 2000 bytes of text",
            ));
        }
        (BulkAction::Abandon, note) => Action::Abandon { note },
        (BulkAction::Retry | BulkAction::Purge, Some(_)) => {
            return Err(ApiError::invalid(
                "note",
                "only resolve and abandon take a note",
                "no note for retry and purge",
            ));
        }
    };
    let request = BulkRequest {
        filter: body.filter.into(),
        action,
        all: body.all,
    };
    let op = state
        .bus()
        .dead_letters()
        .submit(&request, &caller.actor())
        .await?;
    Ok((StatusCode::ACCEPTED, axum::Json(op)))
}

//! Health, readiness, the caller, subscriptions with their breakers, statistics, the
//! overview, `/metrics` and the OpenAPI document.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::Extension;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use durabus::breaker::report::BreakerReport;
use durabus::store::MinuteCount;
use durabus::telemetry::StoreGauges;
use durabus::{BreakerSnapshot, StatsSnapshot, Timestamp};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::Errors;
use crate::AdminState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::Query;

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
    /// Its breaker in every process that runs its handler, as each reported it to the store
    /// within the last minute (every 10 s, and at every change).
    breakers: Vec<BreakerReport>,
}

/// Subscriptions stored in the database, with the breakers of those whose handlers run here.
#[utoipa::path(get, path = "/api/v2/subscriptions", tag = "system",
    responses((status = 200, body = Vec<SubscriptionView>), Errors))]
pub(crate) async fn subscriptions(
    State(state): State<AdminState>,
) -> ApiResult<axum::Json<Vec<SubscriptionView>>> {
    let rows = state.bus().store().subscriptions().await?;
    let reports = state.bus().breaker_reports().await?;
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
                breakers: reports
                    .iter()
                    .filter(|b| Some(&b.subscription) == r.name.as_ref().or(Some(&r.id)))
                    .cloned()
                    .collect(),
                id: r.id,
                name: r.name,
                event_type: r.event_type,
                created_at: r.created_at,
            })
            .collect(),
    ))
}

/// `GET /api/v2/stats`'s parameters.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct StatsQuery {
    /// `true`: count now (a read of every event; a refresh already running elsewhere is waited
    /// for, not doubled) instead of answering the snapshot the `refresh-stats` job kept.
    fresh: Option<bool>,
}

/// Counts by status and type and the retry count distribution, as of `computed_at`: the
/// snapshot the `refresh-stats` job keeps (every 5 minutes by default), read in one indexed
/// query. The first call on a database without one counts now. Live depths are in
/// `/api/v2/overview`.
#[utoipa::path(get, path = "/api/v2/stats", tag = "system", params(StatsQuery),
    responses((status = 200, body = StatsSnapshot), Errors))]
pub(crate) async fn stats(
    State(state): State<AdminState>,
    Query(q): Query<StatsQuery>,
) -> ApiResult<axum::Json<StatsSnapshot>> {
    let store = state.bus().store();
    if !q.fresh.unwrap_or(false)
        && let Some(s) = StatsSnapshot::last(store.as_ref()).await?
    {
        return Ok(axum::Json(s));
    }
    // Through the job, so that refreshes asked by many callers and processes at once run
    // once; in its own task, so a client that goes away does not stop it halfway.
    let scheduler = state.bus().scheduler()?;
    let run = tokio::spawn(async move { scheduler.run_now("refresh-stats").await });
    let report = run
        .await
        .map_err(|e| ApiError::internal(format!("the statistics task failed: {e}")))??;
    if report.status == "failed" {
        return Err(ApiError::internal(format!(
            "refreshing the statistics failed: {}",
            report.message
        )));
    }
    match StatsSnapshot::last(store.as_ref()).await? {
        Some(s) => Ok(axum::Json(s)),
        // Skipped: another process is computing the first snapshot; count here too.
        None => Ok(axum::Json(
            StatsSnapshot::refresh(store.as_ref(), &*state.bus().clock()).await?,
        )),
    }
}

/// Who the caller is.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Whoami {
    /// The token's name (recorded as the actor of this caller's actions).
    name: String,
    /// `read` (reads only) or `admin` (reads and actions).
    role: String,
}

/// The caller's token name and role (a dashboard shows actions only to an admin token).
#[utoipa::path(get, path = "/api/v2/whoami", tag = "system",
    responses((status = 200, body = Whoami), Errors))]
pub(crate) async fn whoami(Extension(caller): Extension<Caller>) -> axum::Json<Whoami> {
    axum::Json(Whoami {
        name: caller.name,
        role: caller.role.as_str().to_owned(),
    })
}

/// How long an overview is served from the cache.
pub(crate) const OVERVIEW_TTL: Duration = Duration::from_secs(5);
/// The overview's throughput window.
const WINDOW_MINUTES: i64 = 60;

/// The figures of a dashboard's front page.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct Overview {
    /// When the figures were read (the bus's clock).
    now: Timestamp,
    /// Events waiting for delivery (due or not).
    pending: u64,
    /// Events being delivered.
    processing: u64,
    /// Events published for a later time.
    scheduled: u64,
    /// The earliest due time of a scheduled event, if any.
    next_scheduled_at: Option<Timestamp>,
    /// Seconds since the earliest due time of a pending event (0 when none is due).
    oldest_due_age_seconds: f64,
    /// Open dead letters waiting for an operator or the auto retry.
    dead_letters_pending: u64,
    /// Dead letters sent back and not yet delivered.
    dead_letters_retrying: u64,
    /// Seconds since the oldest pending dead letter was created (0 when none).
    oldest_pending_dead_letter_age_seconds: f64,
    /// Events delivered and dead-lettered per minute over the last hour, oldest first;
    /// minutes in which nothing ended are left out.
    throughput: Vec<MinuteCount>,
}

/// The cached overview.
pub(crate) type OverviewCache = Arc<std::sync::Mutex<Option<(Instant, Overview)>>>;

/// Depths, ages and the last hour's throughput, read from the store (served from a cache for
/// 5 s, so many open dashboards cost one read).
#[utoipa::path(get, path = "/api/v2/overview", tag = "system",
    responses((status = 200, body = Overview), Errors))]
pub(crate) async fn overview(State(state): State<AdminState>) -> ApiResult<axum::Json<Overview>> {
    let cached = state
        .overview_cache()
        .lock()
        .ok()
        .and_then(|c| c.clone())
        .filter(|(at, _)| at.elapsed() < OVERVIEW_TTL);
    if let Some((_, o)) = cached {
        return Ok(axum::Json(o));
    }
    let store = state.bus().store();
    let now = state.bus().clock().now();
    let g = store.gauges(now).await?;
    let since = Timestamp(now.as_millis() - WINDOW_MINUTES * 60_000);
    let overview = Overview {
        now,
        pending: g.pending,
        processing: g.processing,
        scheduled: g.scheduled,
        next_scheduled_at: g.next_scheduled_at,
        oldest_due_age_seconds: StoreGauges::age(g.oldest_due_at, now),
        dead_letters_pending: g.dead_letters_pending,
        dead_letters_retrying: g.dead_letters_retrying,
        oldest_pending_dead_letter_age_seconds: StoreGauges::age(
            g.oldest_pending_dead_letter_at,
            now,
        ),
        throughput: store.finished_per_minute(since).await?,
    };
    if let Ok(mut c) = state.overview_cache().lock() {
        *c = Some((Instant::now(), overview.clone()));
    }
    Ok(axum::Json(overview))
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
    let doc = DOC.get_or_init(|| crate::openapi().to_string());
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
}

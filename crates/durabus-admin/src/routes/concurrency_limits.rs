//! `/api/v2/concurrency-limits…`: concurrency limits per subscription across every worker
//! process (list, set, remove).

use axum::Extension;
use axum::extract::State;
use durabus::{ConcurrencyLimit, PartitionBy, PartitionLimit};
use serde::Deserialize;
use utoipa::ToSchema;

use super::Errors;
use crate::AdminState;
use crate::auth::Caller;
use crate::error::ApiResult;
use crate::extract::{Json, Path};

/// The concurrency limits, by subscription, with the runs in flight and the events waiting.
#[utoipa::path(get, path = "/api/v2/concurrency-limits", tag = "concurrency-limits",
    responses((status = 200, body = Vec<ConcurrencyLimit>), Errors))]
pub(crate) async fn list(
    State(state): State<AdminState>,
) -> ApiResult<axum::Json<Vec<ConcurrencyLimit>>> {
    Ok(axum::Json(state.bus().concurrency_limits().list().await?))
}

/// A limit to set.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConcurrencyBody {
    /// Handler runs at once across every process (1 to 100,000).
    #[serde(deserialize_with = "durabus::whole::number")]
    #[schema(value_type = u32)]
    max_in_flight: u32,
    /// Handler runs at once in each process (1 to 100,000; above `max_in_flight` it never
    /// binds); absent: no per-process limit.
    #[serde(default, deserialize_with = "durabus::whole::optional")]
    #[schema(value_type = Option<u32>)]
    per_process: Option<u32>,
    /// What splits the events into partitions (tenants): `ordering_key` or
    /// `metadata.<field>`; with `per_partition`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    partition_by: Option<PartitionBy>,
    /// Handler runs of one partition at once across every process (1 to 100,000); with
    /// `partition_by`.
    #[serde(default, deserialize_with = "durabus::whole::optional")]
    #[schema(value_type = Option<u32>)]
    per_partition: Option<u32>,
}

impl ConcurrencyBody {
    /// The partition limit the body asks for: both fields or neither.
    fn partition(&self) -> durabus::Result<Option<PartitionLimit>> {
        match (&self.partition_by, self.per_partition) {
            (Some(by), Some(each)) => Ok(Some(PartitionLimit::new(by.clone(), each))),
            (None, None) => Ok(None),
            (Some(_), None) => Err(durabus::Error::invalid(
                "per_partition",
                "missing",
                "a number of runs per partition with partition_by",
            )),
            (None, Some(_)) => Err(durabus::Error::invalid(
                "partition_by",
                "missing",
                "ordering_key or metadata.<field> with per_partition",
            )),
        }
    }
}

/// Limits a subscription to `max_in_flight` handler runs at once across every worker process
/// (and `per_process` in each, and `per_partition` of each partition `partition_by` splits its
/// events into), replacing its limit at once; events past it wait in line. `404` for an
/// unknown subscription.
#[utoipa::path(put, path = "/api/v2/concurrency-limits/{subscription}", tag = "concurrency-limits",
    params(("subscription" = String, Path, description = "The subscription's name (or id)")),
    request_body = ConcurrencyBody,
    responses((status = 200, description = "The limit on record", body = ConcurrencyLimit), Errors))]
pub(crate) async fn set(
    State(state): State<AdminState>,
    Extension(caller): Extension<Caller>,
    Path(subscription): Path<String>,
    Json(body): Json<ConcurrencyBody>,
) -> ApiResult<axum::Json<ConcurrencyLimit>> {
    let limit = state
        .bus()
        .concurrency_limits()
        .set_partitioned(
            &subscription,
            body.max_in_flight,
            body.per_process,
            body.partition()?,
            &caller.actor(),
        )
        .await?;
    Ok(axum::Json(limit))
}

/// Removes a subscription's limit (the events waiting in line are due at once) and answers
/// it (`404` if it has none).
#[utoipa::path(delete, path = "/api/v2/concurrency-limits/{subscription}", tag = "concurrency-limits",
    params(("subscription" = String, Path, description = "The subscription's name (or id)")),
    responses((status = 200, description = "The limit removed", body = ConcurrencyLimit), Errors))]
pub(crate) async fn remove(
    State(state): State<AdminState>,
    Path(subscription): Path<String>,
) -> ApiResult<axum::Json<ConcurrencyLimit>> {
    Ok(axum::Json(
        state
            .bus()
            .concurrency_limits()
            .remove(&subscription)
            .await?,
    ))
}

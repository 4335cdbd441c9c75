//! The routes, one file per resource. Each handler carries its OpenAPI description
//! (`#[utoipa::path]`) and is registered with `routes!`, so the router and the document are
//! made from the same list: a route cannot exist without being documented.

mod concurrency_limits;
mod dead_letters;
mod events;
mod operations;
mod pauses;
mod payloads;
mod periodic;
mod rate_limits;
mod replay;
mod system;

use axum::Router;
use axum::http::StatusCode;
use utoipa::IntoResponses;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AdminState;

use crate::error::{ApiError, ErrorBody};
pub(crate) use system::OverviewCache;

/// Routes that need a token.
pub(crate) fn protected() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(dead_letters::list))
        .routes(routes!(dead_letters::get))
        .routes(routes!(dead_letters::retry))
        .routes(routes!(dead_letters::resolve))
        .routes(routes!(dead_letters::abandon))
        .routes(routes!(dead_letters::groups))
        .routes(routes!(dead_letters::bulk_preview))
        .routes(routes!(dead_letters::bulk))
        .routes(routes!(events::list))
        .routes(routes!(events::get))
        .routes(routes!(events::cancel))
        .routes(routes!(events::cancellations))
        .routes(routes!(payloads::list, payloads::delete))
        .routes(routes!(payloads::get))
        .routes(routes!(payloads::configs))
        .routes(routes!(payloads::set_config, payloads::delete_config))
        .routes(routes!(replay::start))
        .routes(routes!(replay::status))
        .routes(routes!(replay::cancel))
        .routes(routes!(operations::list))
        .routes(routes!(operations::get))
        .routes(routes!(operations::cancel))
        .routes(routes!(operations::jobs))
        .routes(routes!(operations::run_job))
        .routes(routes!(periodic::list))
        .routes(routes!(periodic::pause))
        .routes(routes!(periodic::resume))
        .routes(routes!(periodic::remove))
        .routes(routes!(pauses::list, pauses::pause))
        .routes(routes!(pauses::resume))
        .routes(routes!(concurrency_limits::list))
        .routes(routes!(concurrency_limits::set, concurrency_limits::remove))
        .routes(routes!(rate_limits::list))
        .routes(routes!(rate_limits::set, rate_limits::remove))
        .routes(routes!(system::subscriptions))
        .routes(routes!(system::stats))
        .routes(routes!(system::overview))
        .routes(routes!(system::whoami))
        .routes(routes!(system::metrics))
        .routes(routes!(system::openapi_json))
}

/// Routes anyone may call: liveness and readiness.
pub(crate) fn open() -> OpenApiRouter<AdminState> {
    OpenApiRouter::new()
        .routes(routes!(system::healthz))
        .routes(routes!(system::readyz))
}

/// The protected and the open routes as routers with `state`.
pub(crate) fn split(state: AdminState) -> (Router, Router) {
    let (protected, _) = protected().with_state(state.clone()).split_for_parts();
    let (open, _) = open().with_state(state).split_for_parts();
    (protected, open)
}

/// Every error a route may answer, in the one error shape.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub(crate) enum Errors {
    /// The request could not be read (`malformed_request`).
    #[response(status = 400)]
    Malformed(ErrorBody),
    /// No valid bearer token (`unauthorized`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token's role is too low (`forbidden`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Nothing there (`not_found`, `no_route`).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// The method is not allowed on this path (`method_not_allowed`).
    #[response(status = 405)]
    MethodNotAllowed(ErrorBody),
    /// The current state does not allow it (`conflict`).
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body is over the limit (`payload_too_large`).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// The body is not JSON (`unsupported_media_type`).
    #[response(status = 415)]
    MediaType(ErrorBody),
    /// A value is not acceptable (`validation_failed`).
    #[response(status = 422)]
    Validation(ErrorBody),
    /// The server met an error (`internal`); the log has the cause.
    #[response(status = 500)]
    Internal(ErrorBody),
    /// The store cannot do this (`unsupported`).
    #[response(status = 501)]
    Unsupported(ErrorBody),
    /// The store is unreachable or busy, or the request timed out (`store_unavailable`,
    /// `timeout`).
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// What a path no route matches answers.
pub(crate) async fn no_route() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_route",
        "no such path; GET /api/v2/openapi.json lists every route",
    )
}

/// What a known path answers to a method it does not take.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this path does not take that method; GET /api/v2/openapi.json lists every route",
    )
}

/// `limit` within `1..=max`, `default` when absent.
pub(crate) fn limit(given: Option<u32>, default: u32, max: u32) -> Result<u32, ApiError> {
    match given {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(n) => Err(ApiError::invalid(
            "limit",
            format!("{n}"),
            format!("1 to {max}"),
        )),
    }
}

//! The one error shape of the API: `{"error": {"code", "message", "details"}}` with the status
//! that says what kind of failure it is. Internal causes never reach the client: they ride on
//! the response (as an extension) to the request log, which writes them with the request id.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use durabus::ErrorKind;
use serde::Serialize;
use utoipa::ToSchema;

/// An error answered by the API.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code (`not_found`, `validation_failed`, …).
    pub code: &'static str,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// More about it (the field at fault, the current state), or `null`.
    pub details: serde_json::Value,
    /// The cause behind a 5xx, logged with the request id and never sent.
    internal: Option<String>,
}

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorObject,
}

/// The error inside [`ErrorBody`].
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorObject {
    /// A stable code to branch on.
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// More about it, or `null`.
    #[schema(value_type = Object, nullable)]
    pub details: serde_json::Value,
}

/// The cause of a 5xx, kept on the response for the request log.
#[derive(Debug, Clone)]
pub(crate) struct InternalCause(pub String);

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: serde_json::Value::Null,
            internal: None,
        }
    }

    /// Adds details.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> ApiError {
        self.details = details;
        self
    }

    /// 400: the request could not be read (bad JSON, a bad path or query parameter).
    pub fn malformed(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "malformed_request", message)
    }

    /// 422: the request was read but a value is not acceptable.
    pub fn validation(message: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            message,
        )
    }

    /// 422 for a refused value: the message and `details` (`{"field", "problem", "accepted"}`)
    /// name the field, what is wrong with the value given and what is accepted.
    pub fn invalid(
        field: impl Into<String>,
        problem: impl Into<String>,
        accepted: impl Into<String>,
    ) -> ApiError {
        let (field, problem, accepted) = (field.into(), problem.into(), accepted.into());
        ApiError::validation(format!("{field}: {problem}; accepted: {accepted}"))
            .with_details(field_details(&field, &problem, &accepted))
    }

    /// 400 for a parameter that cannot be read, with the same `details` as [`invalid`](Self::invalid).
    pub fn unreadable(
        field: impl Into<String>,
        problem: impl Into<String>,
        accepted: impl Into<String>,
    ) -> ApiError {
        let (field, problem, accepted) = (field.into(), problem.into(), accepted.into());
        ApiError::malformed(format!("{field}: {problem}; accepted: {accepted}"))
            .with_details(field_details(&field, &problem, &accepted))
    }

    /// 404: nothing at this path.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 500 with a cause that is logged, never sent.
    pub fn internal(cause: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server met an error; its log has the cause under this request's id (the x-request-id header)",
        );
        e.internal = Some(cause.into());
        e
    }
}

impl From<durabus::Error> for ApiError {
    fn from(e: durabus::Error) -> ApiError {
        let message = e.to_string();
        match e.kind() {
            ErrorKind::InvalidInput => match e.invalid_value() {
                Some(v) => ApiError::validation(message).with_details(field_details(
                    &v.field,
                    &v.problem,
                    &v.accepted,
                )),
                None => ApiError::validation(message),
            },
            ErrorKind::NotFound => ApiError::not_found(message),
            ErrorKind::Conflict => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            ErrorKind::Locked | ErrorKind::Unavailable | ErrorKind::Closed => {
                let mut api = ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the database is unavailable or busy; retry later",
                );
                api.internal = Some(message);
                api
            }
            ErrorKind::Unsupported => {
                let mut api = ApiError::new(
                    StatusCode::NOT_IMPLEMENTED,
                    "unsupported",
                    "this server's build or database cannot do that",
                );
                api.internal = Some(message);
                api
            }
            _ => ApiError::internal(message),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorObject {
                code: self.code.to_owned(),
                message: self.message,
                details: self.details,
            },
        };
        let mut response = (self.status, Json(body)).into_response();
        if let Some(cause) = self.internal {
            response.extensions_mut().insert(InternalCause(cause));
        }
        response
    }
}

fn field_details(field: &str, problem: &str, accepted: &str) -> serde_json::Value {
    serde_json::json!({ "field": field, "problem": problem, "accepted": accepted })
}

/// What handlers return.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn library_kinds_map_to_statuses_and_hide_internal_causes() {
        let e: ApiError = durabus::Error::NotFound {
            what: "dead letter x".into(),
        }
        .into();
        assert_eq!((e.status, e.code), (StatusCode::NOT_FOUND, "not_found"));
        let e: ApiError = durabus::Error::invalid("limit", "5000 records", "1 to 1000").into();
        assert_eq!(e.status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            e.details,
            serde_json::json!({"field": "limit", "problem": "5000 records", "accepted": "1 to 1000"})
        );
        assert_eq!(e.message, "limit: 5000 records; accepted: 1 to 1000");
        let e: ApiError = durabus::Error::InvalidId("x".into()).into();
        assert_eq!(e.details["field"], "id");
        let e: ApiError = durabus::Error::Internal("secret detail".into()).into();
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(!e.message.contains("secret"));
        assert_eq!(e.internal.as_deref(), Some("internal error: secret detail"));
    }
}

//! Extractors whose failures answer in the API's error shape: unreadable JSON, path or query
//! parameters are `400 malformed_request`; JSON of the wrong shape is `422 validation_failed`;
//! a body over the limit is `413 payload_too_large`; a body that is not JSON is `415`.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts};
use axum::http::StatusCode;

use crate::error::ApiError;

/// A JSON body: `415` without a JSON content type, `413` over the body limit, `400` when it
/// is not JSON at all, `422` when it is JSON of the wrong shape.
#[derive(Debug)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|mime| {
                let mime = mime.trim().to_ascii_lowercase();
                mime == "application/json" || mime.ends_with("+json")
            });
        if !is_json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "send the body as JSON with `Content-Type: application/json`",
            ));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|r| {
                if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        "the request body is over the server's limit",
                    )
                } else {
                    ApiError::malformed(r.body_text())
                }
            })?;
        parse_json(&bytes).map(Json)
    }
}

/// Parses a body: `400` when it is not JSON, `422` when it is JSON of the wrong shape.
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(bytes).map_err(|e| {
        if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok() {
            ApiError::validation(format!("the body does not fit: {e}"))
        } else {
            ApiError::malformed(format!("the body is not valid JSON: {e}"))
        }
    })
}

/// Path parameters.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// Query parameters.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct Query<T>(pub T);

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::malformed(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::malformed(r.body_text())
    }
}

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

/// Parses a body: `400` when it is not JSON, `422` when it is JSON of the wrong shape, with
/// the field that does not fit and why in `details` (`{"field": "filter.created_from",
/// "problem": …}`).
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
            return ApiError::malformed(format!("the body is not valid JSON: {}", e.inner()));
        }
        let field = e.path().to_string();
        let problem = e.inner().to_string();
        let message = if field == "." {
            format!("the body does not fit: {problem}")
        } else {
            format!("the body does not fit: {field}: {problem}")
        };
        ApiError::validation(message)
            .with_details(serde_json::json!({ "field": field, "problem": problem }))
    })
}

/// Path parameters.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct Path<T>(pub T);

/// Query parameters: `400` when they do not parse, or when a value is not UTF-8 once
/// percent-decoded (rather than silently replacing the bytes, as form decoding would, and
/// filtering on the result).
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        if let Some(query) = parts.uri.query()
            && !decodes_to_utf8(query)
        {
            return Err(ApiError::malformed(
                "the query string is not UTF-8 once percent-decoded",
            ));
        }
        let axum::extract::Query(value) =
            axum::extract::Query::<T>::from_request_parts(parts, state).await?;
        Ok(Query(value))
    }
}

/// Whether `query` percent-decodes to UTF-8 (`%` not followed by two hex digits stays as it
/// is, as in form decoding).
fn decodes_to_utf8(query: &str) -> bool {
    let bytes = query.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                decoded.push(b);
                i += 3;
            }
            (b, _) => {
                decoded.push(b);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&decoded).is_ok()
}

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

#[cfg(test)]
mod tests {
    use super::decodes_to_utf8;

    #[test]
    fn percent_decoding_to_utf8_is_checked() {
        assert!(decodes_to_utf8("event_type=order.*&limit=5"));
        assert!(decodes_to_utf8("event_type=caf%C3%A9"));
        assert!(decodes_to_utf8("note=100%"));
        assert!(decodes_to_utf8("note=%zz%2"));
        assert!(!decodes_to_utf8("event_type=%FF"));
        assert!(!decodes_to_utf8("subscription=pay%C3%28"));
        assert!(!decodes_to_utf8("event_type=%ED%A0%80"));
    }
}

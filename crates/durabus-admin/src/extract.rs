//! Extractors whose failures answer in the API's error shape: unreadable JSON, path or query
//! parameters are `400 malformed_request`; JSON of the wrong shape is `422 validation_failed`;
//! a body over the limit is `413 payload_too_large`; a body that is not JSON is `415`.

use axum::extract::rejection::PathRejection;
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
    // Every body of the API is an object; serde would also read a struct from an array of
    // its fields in order, which the document does not allow.
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[') {
        if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
            return Err(ApiError::malformed("the body is not valid JSON"));
        }
        return Err(ApiError::invalid(
            "body",
            "is an array",
            "an object (GET /api/v2/openapi.json has the shape)",
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() {
            return ApiError::malformed(format!("the body is not valid JSON: {}", e.inner()));
        }
        let (field, problem, accepted) = described(&e, "body");
        ApiError::invalid(field, problem, accepted)
    })
}

/// Reads a nested object only from a JSON object (`#[serde(deserialize_with = …)]`): serde
/// would also read a struct from an array of its fields, which the document does not allow.
/// The fields are read through the same map, so an error inside still names its path.
pub(crate) fn object<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    struct Object<T>(std::marker::PhantomData<T>);
    impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Object<T> {
        type Value = T;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    deserializer.deserialize_map(Object(std::marker::PhantomData))
}

/// The field, problem and accepted form of a deserialisation error: serde says what it
/// expected after ", expected " (or names a missing field); `whole` names the top level.
fn described<E: std::fmt::Display>(
    e: &serde_path_to_error::Error<E>,
    whole: &str,
) -> (String, String, String) {
    let path = e.path().to_string();
    let field = if path == "." { whole.to_owned() } else { path };
    let text = e.inner().to_string();
    let text = text
        .split_once(" at line ")
        .map_or(text.as_str(), |(before, _)| before)
        .to_owned();
    match text.split_once(", expected ") {
        Some((problem, expected)) => (field, problem.to_owned(), expected.to_owned()),
        None if text.starts_with("missing field") => {
            let missing = text
                .trim_start_matches("missing field ")
                .trim_matches('`')
                .to_owned();
            let field = if field == whole {
                missing
            } else {
                format!("{field}.{missing}")
            };
            (
                field,
                "missing".to_owned(),
                "a value (GET /api/v2/openapi.json has the shape)".to_owned(),
            )
        }
        None => (
            field,
            text,
            "what GET /api/v2/openapi.json describes".to_owned(),
        ),
    }
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
        let _ = state;
        let query = parts.uri.query().unwrap_or_default();
        let de = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(de)
            .map(Query)
            .map_err(|e| {
                let (field, mut problem, mut accepted) = described(&e, "query");
                // Number and flag parsers do not quote the value: name it, and what they take.
                if let Some((_, value)) =
                    form_urlencoded::parse(query.as_bytes()).find(|(k, _)| *k == field)
                    && !problem.contains(value.as_ref())
                {
                    problem = format!("{value:?}: {problem}");
                }
                if let Some(taken) = parser_accepts(&problem) {
                    accepted = taken.to_owned();
                }
                ApiError::unreadable(field, problem, accepted)
            })
    }
}

/// What a standard parser takes, from its complaint.
fn parser_accepts(problem: &str) -> Option<&'static str> {
    const INTEGER: [&str; 4] = [
        "invalid digit found in string",
        "cannot parse integer from empty string",
        "number too large to fit in target type",
        "number too small to fit in target type",
    ];
    if INTEGER.iter().any(|m| problem.ends_with(m)) {
        Some("a whole number within the parameter's range (GET /api/v2/openapi.json)")
    } else if problem.ends_with("provided string was not `true` or `false`") {
        Some("true or false")
    } else {
        None
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
        use axum::extract::path::ErrorKind;
        let PathRejection::FailedToDeserializePathParams(e) = &r else {
            return ApiError::malformed(r.body_text());
        };
        let (field, value) = match e.kind() {
            ErrorKind::ParseErrorAtKey { key, value, .. }
            | ErrorKind::DeserializeError { key, value, .. } => (key.clone(), Some(value)),
            ErrorKind::ParseError { value, .. } => ("id".to_owned(), Some(value)),
            ErrorKind::InvalidUtf8InPathParam { key } => (key.clone(), None),
            _ => return ApiError::malformed(r.body_text()),
        };
        let problem = value.map_or_else(
            || "not UTF-8 once percent-decoded".to_owned(),
            |v| format!("{v:?} cannot be read"),
        );
        let accepted = if field == "id" {
            "a UUID such as 0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70"
        } else {
            "what GET /api/v2/openapi.json describes for this path"
        };
        ApiError::unreadable(field, problem, accepted)
    }
}

/// An optional JSON body: empty, or `null`, is the default.
pub(crate) fn optional_json<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
) -> crate::error::ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    Ok(parse_json::<Option<T>>(body)?.unwrap_or_default())
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::{decodes_to_utf8, parse_json};

    #[derive(Debug, Default, serde::Deserialize)]
    struct Body {
        #[serde(default)]
        note: Option<String>,
    }

    #[test]
    fn a_body_is_an_object_never_an_array_of_its_fields() {
        let refused = parse_json::<Body>(b" [\"x\"]").expect_err("an array is not a body");
        assert_eq!(refused.status, axum::http::StatusCode::UNPROCESSABLE_ENTITY);
        let refused = parse_json::<Body>(b"[").expect_err("not JSON");
        assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
        let body = parse_json::<Body>(br#"{"note":"x"}"#).expect("an object is read");
        assert_eq!(body.note.as_deref(), Some("x"));
        let none = parse_json::<Option<Body>>(b"null").expect("null where allowed");
        assert!(none.is_none());

        #[derive(Debug, serde::Deserialize)]
        struct Outer {
            #[serde(default, deserialize_with = "super::object")]
            inner: Body,
        }
        let refused = parse_json::<Outer>(br#"{"inner":[]}"#).expect_err("an array inside");
        assert_eq!(refused.details["field"], "inner");
        let refused = parse_json::<Outer>(br#"{"inner":{"note":5}}"#).expect_err("a number");
        assert_eq!(refused.details["field"], "inner.note");
        let outer = parse_json::<Outer>(b"{}").expect("absent is the default");
        assert!(outer.inner.note.is_none());
    }

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

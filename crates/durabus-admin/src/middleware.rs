//! What wraps every request: a request id (kept from the client's `x-request-id` or made, and
//! sent back), a time limit, a handler that panics answered with a logged 500 in the API's
//! error shape (never a dropped connection), headers that keep answers out of caches and
//! browsers' type sniffing, and one log line (method, path, status, latency, request id) with
//! the internal cause of a 5xx. The `Authorization` header is never logged. An answer to a
//! request whose body was left unread (refused before it: 401, 403, 404, 415, 413) says
//! `Connection: close`, so a client never sends its next request into a connection the server
//! is closing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::set_header::SetResponseHeaderLayer;

use crate::error::{ApiError, InternalCause};

/// Wraps `app` with the request log, the time limit and request ids.
pub(crate) fn outer(app: Router, timeout: Duration) -> Router {
    app.layer(CatchPanicLayer::custom(panicked))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(axum::middleware::from_fn_with_state(timeout, log_request))
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
        .layer(axum::middleware::from_fn(close_if_body_unread))
}

/// Marks the answer `Connection: close` when the request's body was not read to its end. The
/// HTTP server cannot reuse a connection with unread bytes on it (it drains a little, then
/// closes); without the header a keep-alive client would send its next request into that
/// closing connection and get no answer.
async fn close_if_body_unread(request: Request, next: Next) -> Response {
    use http_body::Body as _;
    let (parts, body) = request.into_parts();
    if body.is_end_stream() {
        return next.run(Request::from_parts(parts, body)).await;
    }
    let read = Arc::new(AtomicBool::new(false));
    let body = Body::new(ReadToEnd {
        inner: body,
        read: Arc::clone(&read),
    });
    let mut response = next.run(Request::from_parts(parts, body)).await;
    if !read.load(Ordering::Acquire) {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// A request body that notes when it has been read to its end.
struct ReadToEnd {
    inner: Body,
    read: Arc<AtomicBool>,
}

impl http_body::Body for ReadToEnd {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) || self.inner.is_end_stream() {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The answer to a handler that panicked: 500 in the API's error shape, the panic's message
/// logged (with the request's id) and never sent.
fn panicked(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    ApiError::internal(format!("a handler panicked: {message}")).into_response()
}

async fn log_request(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let request_id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let mut response = match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "timeout",
            format!(
                "the request took longer than {} ms; it may still finish (check before repeating a write)",
                timeout.as_millis()
            ),
        )
        .into_response(),
    };
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    match response.extensions_mut().remove::<InternalCause>() {
        Some(InternalCause(cause)) => tracing::error!(
            %method, %path, status, latency_ms, request_id, cause, "admin request failed"
        ),
        None if status >= 500 => {
            tracing::warn!(%method, %path, status, latency_ms, request_id, "admin request")
        }
        None => tracing::info!(%method, %path, status, latency_ms, request_id, "admin request"),
    }
    response
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::get;
    use tower::ServiceExt;

    #[tokio::test]
    async fn a_handler_that_panics_answers_500_in_the_error_shape() {
        async fn boom() -> &'static str {
            panic!("all times should be after the epoch")
        }
        let app = outer(
            Router::new().route("/boom", get(boom)),
            Duration::from_secs(5),
        );
        let response = app
            .oneshot(
                axum::http::Request::builder()
                    .uri("/boom")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()["x-content-type-options"], "nosniff");
        assert_eq!(response.headers()["cache-control"], "no-store");
        assert!(response.headers().contains_key("x-request-id"));
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"]["code"], "internal");
        assert!(
            !json.to_string().contains("epoch"),
            "the cause is logged, never sent: {json}"
        );
    }

    #[tokio::test]
    async fn an_answer_that_left_the_body_unread_closes_the_connection() {
        async fn ignores_body() -> StatusCode {
            StatusCode::UNAUTHORIZED
        }
        async fn reads_body(body: String) -> String {
            body
        }
        let app = outer(
            Router::new()
                .route("/refuse", axum::routing::post(ignores_body))
                .route("/echo", axum::routing::post(reads_body)),
            Duration::from_secs(5),
        );
        let call = |path: &'static str, body: &'static str| {
            app.clone().oneshot(
                Request::builder()
                    .method("POST")
                    .uri(path)
                    .body(Body::from(body))
                    .unwrap(),
            )
        };
        let refused = call("/refuse", "{\"a\": 1}").await.unwrap();
        assert_eq!(refused.headers()["connection"], "close");
        let read = call("/echo", "{\"a\": 1}").await.unwrap();
        assert_eq!(read.status(), StatusCode::OK);
        assert!(
            !read.headers().contains_key("connection"),
            "a read body keeps it"
        );
        let empty = call("/refuse", "").await.unwrap();
        assert!(
            !empty.headers().contains_key("connection"),
            "nothing to read"
        );
    }

    #[tokio::test]
    async fn a_request_over_its_time_limit_answers_503_timeout_with_a_request_id() {
        let app = Router::new()
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    "late"
                }),
            )
            .route("/quick", get(|| async { "ok" }));
        let app = outer(app, Duration::from_millis(2));
        let call = |path: &'static str| {
            app.clone()
                .oneshot(Request::builder().uri(path).body(Body::empty()).unwrap())
        };
        let started = Instant::now();
        let slow = call("/slow").await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(slow.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(slow.headers().contains_key("x-request-id"));
        let body = axum::body::to_bytes(slow.into_body(), usize::MAX)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "timeout");
        assert_eq!(call("/quick").await.unwrap().status(), StatusCode::OK);
    }
}

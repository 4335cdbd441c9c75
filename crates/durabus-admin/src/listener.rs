//! A TCP listener for the admin API ([`AdminListener`]) whose connections answer in the API's
//! error shape even where the HTTP parser answers by itself, before any route or middleware sees
//! the request: a URI over 64 KiB (414), headers too large (431), a request that is not HTTP
//! (400). hyper writes those answers with an empty body and closes the connection; the
//! connection's writer replaces exactly those answers (status 400, 414 or 431, no
//! `content-type`, `content-length: 0`), which the API itself never sends, with the same status
//! and a JSON error body.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

/// A TCP listener for [`axum::serve()`] whose connections answer the HTTP parser's own refusals
/// in the API's error shape (see the module docs).
///
/// ```no_run
/// # async fn run(state: durabus_admin::AdminState) -> std::io::Result<()> {
/// let listener = durabus_admin::AdminListener::bind("127.0.0.1:8080").await?;
/// axum::serve(listener, durabus_admin::router(state)).await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct AdminListener {
    inner: TcpListener,
}

impl AdminListener {
    /// Binds to `addr`.
    pub async fn bind(addr: impl tokio::net::ToSocketAddrs) -> io::Result<AdminListener> {
        Ok(AdminListener {
            inner: TcpListener::bind(addr).await?,
        })
    }

    /// Wraps a bound listener.
    pub fn new(inner: TcpListener) -> AdminListener {
        AdminListener { inner }
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

impl axum::serve::Listener for AdminListener {
    type Io = ShapedConnection<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
        (ShapedConnection::new(io), addr)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// A connection whose writer gives the HTTP parser's bodiless refusals the API's error body.
#[derive(Debug)]
pub struct ShapedConnection<T> {
    inner: T,
    /// A replacement being written: its bytes, how many are out, and the length of the
    /// original write it stands for (reported as written once it is all out).
    replacing: Option<(Vec<u8>, usize, usize)>,
}

impl<T> ShapedConnection<T> {
    /// Wraps a connection.
    pub fn new(inner: T) -> ShapedConnection<T> {
        ShapedConnection {
            inner,
            replacing: None,
        }
    }
}

/// The answer that replaces `head`, when `head` is one of the parser's own bodiless refusals.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    if !text.ends_with("\r\n\r\n") {
        return None;
    }
    let (status, code, message) = match text.get(..13)? {
        "HTTP/1.1 400 " => (
            "400 Bad Request",
            "bad_request",
            "the request is not valid HTTP/1.1",
        ),
        "HTTP/1.1 414 " => (
            "414 URI Too Long",
            "uri_too_long",
            "the URI is longer than 64 KiB; send filters in the query string's documented parameters",
        ),
        "HTTP/1.1 431 " => (
            "431 Request Header Fields Too Large",
            "headers_too_large",
            "the request's headers are too large",
        ),
        _ => return None,
    };
    let lower = text.to_ascii_lowercase();
    if lower.contains("\r\ncontent-type:") || !lower.contains("\r\ncontent-length: 0\r\n") {
        return None;
    }
    let body = serde_json::json!({
        "error": { "code": code, "message": message, "details": null }
    })
    .to_string();
    Some(
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\ncache-control: no-store\r\nx-content-type-options: nosniff\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

impl<T: AsyncRead + Unpin> AsyncRead for ShapedConnection<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for ShapedConnection<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            match replacement(buf) {
                Some(bytes) => this.replacing = Some((bytes, 0, buf.len())),
                None => return Pin::new(&mut this.inner).poll_write(cx, buf),
            }
        }
        while let Some((bytes, out, stands_for)) = &mut this.replacing {
            if *out == bytes.len() {
                let n = *stands_for;
                this.replacing = None;
                return Poll::Ready(Ok(n));
            }
            match Pin::new(&mut this.inner).poll_write(cx, &bytes[*out..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *out += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(0))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // Not vectored: hyper then writes each answer's head as one contiguous buffer, which is
    // what the replacement looks at.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn written(chunks: &[&[u8]]) -> String {
        let (a, mut b) = tokio::io::duplex(64);
        let mut shaped = ShapedConnection::new(a);
        let chunks: Vec<Vec<u8>> = chunks.iter().map(|c| c.to_vec()).collect();
        let writer = tokio::spawn(async move {
            for c in chunks {
                shaped.write_all(&c).await.unwrap();
            }
            shaped.shutdown().await.unwrap();
        });
        let mut out = String::new();
        b.read_to_string(&mut out).await.unwrap();
        writer.await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_parsers_bodiless_refusals_get_the_error_shape() {
        let out = written(&[b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Wed, 25 Nov 2026 18:16:28 GMT\r\n\r\n"]).await;
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"), "{head}");
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains("connection: close"));
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["error"]["code"], "uri_too_long");
        assert!(head.contains(&format!("content-length: {}", body.len())));
    }

    #[tokio::test]
    async fn every_other_write_passes_unchanged() {
        let api_error = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        let body = b"HTTP/1.1 414 looks like a head but is a body chunk";
        let out = written(&[api_error, ok, body]).await;
        let expected = [&api_error[..], ok, body].concat();
        assert_eq!(out.as_bytes(), &expected[..]);
    }
}

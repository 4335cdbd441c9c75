//! `durabus serve` as an operator starts it: tokens from the environment or a file, the
//! loopback rule, requests over real TCP, SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn serve(db: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_durabus"));
    c.arg("--db")
        .arg(db)
        .arg("serve")
        .args(args)
        .env_remove("DURABUS_ADMIN_TOKEN")
        .env_remove("DURABUS_READ_TOKEN")
        .env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn demo_db(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("serve.db");
    let out = Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(&db)
        .arg("demo")
        .output()
        .unwrap();
    assert!(out.status.success());
    db
}

/// One HTTP/1.1 request; returns the status and the body.
fn http(addr: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text[9..12].parse().unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Waits for the "… on http://ADDR …" line; returns ADDR.
fn address(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let start = line.find("http://").expect(&line) + 7;
    line[start..].split([' ', '/']).next().unwrap().to_owned()
}

/// What a stopped child wrote to its piped standard error.
fn stderr_of(child: &mut Child) -> String {
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    err
}

/// Each line of `text` as a JSON value (a line that is not one fails the test).
fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    child.wait().unwrap()
}

#[test]
fn a_non_loopback_address_without_tokens_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let out = serve(&db, &["--listen", "0.0.0.0:0"], &[])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve on 0.0.0.0:0 without tokens"),
        "{err}"
    );
}

#[test]
fn bad_tokens_and_databases_fail_with_one_line_and_never_echo_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let out = serve(&db, &[], &[("DURABUS_ADMIN_TOKEN", "ops:short-secret")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("DURABUS_ADMIN_TOKEN") && err.contains("at least 16"),
        "{err}"
    );
    assert!(!err.contains("short-secret"), "{err}");
    let file = dir.path().join("tokens");
    std::fs::write(
        &file,
        "admin ops:0123456789abcdef0123\nsuper x:0123456789abcdefXXXX\n",
    )
    .unwrap();
    let out = serve(&db, &["--tokens-file", file.to_str().unwrap()], &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("line 2"), "{err}");
    let out = serve(&dir.path().join("missing.db"), &[], &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("does not exist"), "{err}");
    assert!(
        !dir.path().join("missing.db").exists(),
        "serve must not create a database"
    );
}

#[test]
fn serve_answers_over_tcp_with_env_tokens_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let admin = "ops:admin-token-0123456789";
    let read = "viewer:read-token-0123456789";
    let mut child = serve(
        &db,
        &["--listen", "127.0.0.1:0"],
        &[("DURABUS_ADMIN_TOKEN", admin), ("DURABUS_READ_TOKEN", read)],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let addr = address(&mut child);
    assert_eq!(http(&addr, "GET", "/healthz", None).0, 200);
    assert_eq!(http(&addr, "GET", "/api/v2/stats", None).0, 401);
    let (status, body) = http(
        &addr,
        "GET",
        "/api/v2/dead-letters",
        Some("read-token-0123456789"),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"status\":\"pending\""), "{body}");
    let (status, _) = http(
        &addr,
        "POST",
        "/api/v2/jobs/cleanup-history/run",
        Some("read-token-0123456789"),
    );
    assert_eq!(status, 403);
    let (status, body) = http(
        &addr,
        "POST",
        "/api/v2/jobs/cleanup-history/run",
        Some("admin-token-0123456789"),
    );
    assert_eq!(status, 200, "{body}");
    let exit = terminate(&mut child);
    assert!(exit.success(), "{exit:?}");
    let err = stderr_of(&mut child);
    assert!(err.contains("stopped"), "{err}");
    assert!(
        err.contains("path=/api/v2/dead-letters") && err.contains("status=200"),
        "the request log: {err}"
    );
    assert!(
        !err.contains("token-0123456789"),
        "a token reached the log: {err}"
    );
}

#[test]
fn without_tokens_on_loopback_a_token_is_made_for_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let mut child = serve(&db, &["--listen", "127.0.0.1:0"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let token = line
        .split("admin token is ")
        .nth(1)
        .expect(&line)
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let addr = address(&mut child);
    assert_eq!(http(&addr, "GET", "/api/v2/stats", Some(&token)).0, 200);
    assert_eq!(
        http(
            &addr,
            "GET",
            "/api/v2/stats",
            Some("guess-guess-guess-guess")
        )
        .0,
        401
    );
    assert!(terminate(&mut child).success());
}

/// Sends raw bytes on `s` and reads one answer: its head (lower-cased) and body.
fn exchange(s: &mut TcpStream, request: &[u8]) -> (String, String) {
    s.write_all(request).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).unwrap();
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let head = head.to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .map_or(0, |v| v.trim().parse().unwrap());
            if body.len() >= length {
                return (head, body[..length].to_owned());
            }
        }
        assert!(n > 0, "the connection closed mid-answer: {text}");
    }
}

#[test]
fn refusals_before_the_api_keep_the_error_shape_and_never_strand_a_keep_alive_client() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let mut child = serve(
        &db,
        &["--listen", "127.0.0.1:0"],
        &[("DURABUS_ADMIN_TOKEN", "ops:admin-token-0123456789")],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let addr = address(&mut child);

    // A 100 KB URI is refused by the HTTP parser itself: still the API's error shape.
    let mut s = TcpStream::connect(&addr).unwrap();
    let long = format!(
        "GET /api/v2/dead-letters?event_type={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(100_000)
    );
    let (head, body) = exchange(&mut s, long.as_bytes());
    assert!(head.starts_with("http/1.1 414"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"]["code"], "uri_too_long", "{body}");

    // A POST refused before its body is read says the connection closes, so a keep-alive
    // client opens a new one instead of writing into a closing socket.
    let mut s = TcpStream::connect(&addr).unwrap();
    let payload = format!(
        "{{\"action\":\"retry\",\"filter\":{{}},\"pad\":\"{}\"}}",
        "x".repeat(200_000)
    );
    let post = format!(
        "POST /api/v2/dead-letters/bulk HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Authorization: Bearer wrong-token-0123456789\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    );
    let (head, body) = exchange(&mut s, post.as_bytes());
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(body.contains("unauthorized"), "{body}");

    // A connection whose requests are answered normally stays open for the next one.
    let mut s = TcpStream::connect(&addr).unwrap();
    for _ in 0..3 {
        let (head, _) = exchange(&mut s, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(!head.contains("connection: close"), "{head}");
    }
    assert!(terminate(&mut child).success());
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = demo_db(dir.path());
    let mut child = serve(
        &db,
        &["--listen", "127.0.0.1:0", "--log-format", "json"],
        &[("DURABUS_READ_TOKEN", "viewer:read-token-0123456789")],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let addr = address(&mut child);
    let (status, _) = http(
        &addr,
        "GET",
        "/api/v2/dead-letters",
        Some("read-token-0123456789"),
    );
    assert_eq!(status, 200);
    assert!(terminate(&mut child).success());
    let err = stderr_of(&mut child);
    let lines = json_lines(&err);
    let request = lines
        .iter()
        .find(|l| l["fields"]["path"] == "/api/v2/dead-letters")
        .unwrap_or_else(|| panic!("the request's line: {err}"));
    assert_eq!(request["fields"]["status"], 200, "{request}");
    assert_eq!(request["level"], "INFO", "{request}");
    assert!(request["timestamp"].is_string(), "{request}");
}

#[test]
fn a_handler_failure_logs_its_event_as_json_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(dir.path().join("demo.db"))
        .args(["--log-format", "json", "demo"])
        .env("RUST_LOG", "durabus=warn")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    let failed: Vec<serde_json::Value> = json_lines(&err)
        .into_iter()
        .filter(|l| l["fields"]["message"] == "event delivery failed")
        .collect();
    assert!(!failed.is_empty(), "the demo's failures: {err}");
    for line in failed {
        for field in [
            "event_id",
            "event_type",
            "subscription_id",
            "attempt",
            "error",
        ] {
            assert!(!line["fields"][field].is_null(), "{field}: {line}");
        }
    }
}

#[test]
fn an_unknown_log_format_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_durabus"))
        .args(["--log-format", "xml", "stats"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'xml'") && err.contains("text") && err.contains("json"),
        "{err}"
    );
}

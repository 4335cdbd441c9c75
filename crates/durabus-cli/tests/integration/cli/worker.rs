//! `durabus worker`: commands as handlers, on SQLite and PostgreSQL.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{durabus, json, stderr, stdout};

/// `durabus` with the database options `db` (`--db …` and maybe `--schema …`), run in `dir`.
fn run(dir: &Path, db: &[&str], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durabus"))
        .current_dir(dir)
        .args(db)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn publish(dir: &Path, db: &[&str], ty: &str, payload: &str) -> String {
    let o = run(dir, db, &["events", "publish", ty, payload]);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o).trim().to_owned()
}

fn dead_letter(dir: &Path, db: &[&str], id: &str) -> serde_json::Value {
    let o = run(dir, db, &["--json", "dlq", "show", id]);
    json(&o)
}

fn event_status(dir: &Path, db: &[&str], id: &str) -> String {
    let o = run(dir, db, &["--json", "events", "show", id]);
    json(&o)["event"]["status"].as_str().unwrap().to_owned()
}

/// Handled, failed for good (exit 65, though retries are allowed), failed with retries left
/// (the next run), and the environment each command sees.
fn commands_handle_fail_and_fail_for_good(dir: &Path, db: &[&str]) {
    // The first run makes the database (nothing to do yet).
    let first = run(
        dir,
        db,
        &["worker", "--handler", "x.*=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let a = publish(dir, db, "shop.order", r#"{"n":1}"#);
    let b = publish(dir, db, "shop.order", r#"{"n":2}"#);
    let perm = publish(dir, db, "shop.perm", r#"{"n":3}"#);
    let o = run(
        dir,
        db,
        &[
            "worker",
            "--handler",
            // One write per run: two runs at once never interleave their lines.
            r#"shop.order=echo "$(cat) $DURABUS_EVENT_ID $DURABUS_EVENT_TYPE $DURABUS_ATTEMPT $DURABUS_SUBSCRIPTION $DURABUS_METADATA" >> seen.txt"#,
            "--handler",
            "shop.perm=echo 'line one' >&2; echo 'bad amount' >&2; exit 65",
            "--max-retries",
            "5",
            "--exit-when-idle",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("2 handler(s)"), "{}", stdout(&o));
    let seen = std::fs::read_to_string(dir.join("seen.txt")).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 2, "{seen}");
    for (id, payload) in [(&a, r#"{"n":1}"#), (&b, r#"{"n":2}"#)] {
        let line = lines
            .iter()
            .find(|l| l.contains(id.as_str()))
            .unwrap_or_else(|| panic!("{id} not handled: {seen}"));
        assert_eq!(
            *line,
            format!("{payload} {id} shop.order 1 shop.order {{}}"),
            "{seen}"
        );
        assert_eq!(event_status(dir, db, id), "done");
    }
    // Exit 65: dead-lettered after one attempt though 5 retries were allowed, with the end
    // of standard error.
    let d = dead_letter(dir, db, &perm);
    assert_eq!(d["attempts"], 1, "{d}");
    let error = d["last_error"].as_str().unwrap();
    assert!(
        error.contains("exit status 65") && error.contains("line one\nbad amount"),
        "{error}"
    );
}

/// The timeout kills a command; any other exit status fails the attempt with its error.
fn a_slow_command_is_killed_and_a_failing_one_retried(dir: &Path, db: &[&str]) {
    let slow = publish(dir, db, "job.slow", "{}");
    let failing = publish(dir, db, "job.fails", r#""x""#);
    let start = Instant::now();
    let o = run(
        dir,
        db,
        &[
            "worker",
            "--handler",
            "job.slow=sleep 30",
            "--handler",
            "job.fails=cat >&2; exit 3",
            "--timeout",
            "200ms",
            "--max-retries",
            "0",
            "--exit-when-idle",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "the sleep was not killed: {:?}",
        start.elapsed()
    );
    let d = dead_letter(dir, db, &slow);
    assert!(
        d["last_error"].as_str().unwrap().contains("timed out"),
        "{d}"
    );
    let d = dead_letter(dir, db, &failing);
    assert_eq!(
        d["last_error"], "the command failed (exit status 3): \"x\"",
        "the payload went to standard input, and back out on standard error: {d}"
    );
}

#[test]
fn a_worker_runs_commands_as_handlers_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = ["--db", "w.db"];
    commands_handle_fail_and_fail_for_good(dir.path(), &db);
    a_slow_command_is_killed_and_a_failing_one_retried(dir.path(), &db);
}

#[test]
fn a_worker_runs_commands_as_handlers_on_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pool) = rt.block_on(crate::workers::admin()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let schema = crate::workers::schema();
    let url = crate::workers::pg_url();
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    commands_handle_fail_and_fail_for_good(dir.path(), &db);
    a_slow_command_is_killed_and_a_failing_one_retried(dir.path(), &db);
    rt.block_on(crate::workers::drop_schema(&pool, &schema));
}

#[test]
fn sigterm_lets_a_running_command_finish() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let made = durabus(
        &db,
        &["worker", "--handler", "x.*=true", "--exit-when-idle"],
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let id = publish(dir.path(), &["--db", "w.db"], "job.long", "{}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_durabus"))
        .current_dir(dir.path())
        .args(["--db", "w.db", "worker", "--handler"])
        .arg("job.long=touch started; sleep 0.5; touch finished")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !dir.path().join("started").exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "never started");
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        dir.path().join("finished").exists(),
        "the command was cut short"
    );
    assert_eq!(event_status(dir.path(), &["--db", "w.db"], &id), "done");
}

#[test]
fn a_failure_logs_its_event_as_json_fields() {
    let dir = tempfile::tempdir().unwrap();
    let db = ["--db", "w.db"];
    let first = run(
        dir.path(),
        &db,
        &["worker", "--handler", "x.*=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let id = publish(dir.path(), &db, "job.fails", "{}");
    let o = run(
        dir.path(),
        &db,
        &[
            "--log-format",
            "json",
            "worker",
            "--handler",
            "job.*=exit 1",
            "--max-retries",
            "0",
            "--exit-when-idle",
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let err = stderr(&o);
    let failed: Vec<serde_json::Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .filter(|l: &serde_json::Value| l["fields"]["message"] == "event delivery failed")
        .collect();
    assert_eq!(failed.len(), 1, "{err}");
    assert_eq!(failed[0]["fields"]["event_id"], id.as_str(), "{err}");
    assert_eq!(failed[0]["fields"]["event_type"], "job.fails", "{err}");
    assert!(!failed[0]["fields"]["subscription_id"].is_null(), "{err}");
}

#[test]
fn bad_handlers_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = ["--db", "w.db"];
    for (spec, needle) in [
        ("job.x", "is not PATTERN=COMMAND"),
        ("=true", "has no pattern"),
        ("job.x=  ", "has no command"),
    ] {
        let o = run(dir.path(), &db, &["worker", "--handler", spec]);
        assert_eq!(o.status.code(), Some(2), "{spec}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{spec}: {}", stderr(&o));
    }
    let o = run(dir.path(), &db, &["worker"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--handler"), "{}", stderr(&o));
    for timeout in ["0s", "soon", "-1s"] {
        let o = run(
            dir.path(),
            &db,
            &["worker", "--handler", "a=true", "--timeout", timeout],
        );
        assert_eq!(o.status.code(), Some(2), "{timeout}: {}", stderr(&o));
    }
    let twice = run(
        dir.path(),
        &db,
        &["worker", "--handler", "a.*=true", "--handler", "a.*=false"],
    );
    assert_eq!(twice.status.code(), Some(1), "{}", stderr(&twice));
    assert!(stderr(&twice).contains("given twice"), "{}", stderr(&twice));
    assert!(
        !dir.path().join("w.db").exists(),
        "nothing ran, nothing was made"
    );
}

//! `durabus pause`, `resume` and `pauses` against a running `durabus worker` process, on
//! SQLite and PostgreSQL: the worker holds a paused subscription's events parked and
//! delivers them after the resume.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{json, stderr, stdout};

pub(super) fn run(dir: &Path, db: &[&str], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durabus"))
        .current_dir(dir)
        .args(db)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

pub(super) fn one_line_failure(o: &Output, needle: &str) {
    assert!(!o.status.success(), "{}", stdout(o));
    let err = stderr(o);
    assert!(err.contains(needle), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// Polls `check` every 10 ms for at most 10 s.
pub(super) fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(super) struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// Starts `n` `durabus worker` processes on `db` in `dir` with the one handler `handler`
/// (`PATTERN=COMMAND`); they stop when the returned values drop.
pub(super) fn workers(dir: &Path, db: &[&str], handler: &str, n: usize) -> Vec<Worker> {
    (0..n)
        .map(|_| {
            Worker(
                Command::new(env!("CARGO_BIN_EXE_durabus"))
                    .current_dir(dir)
                    .args(db)
                    .args(["worker", "--handler", handler])
                    .env_remove("RUST_LOG")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect()
}

fn pause_resume_with_a_worker_running(dir: &Path, db: &[&str]) {
    // The worker's first run makes the database and the subscription's row.
    let first = run(
        dir,
        db,
        &["worker", "--handler", "mail.*=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let pause = json(&run(
        dir,
        db,
        &[
            "--json",
            "pause",
            "--subscription",
            "mail.*",
            "--reason",
            "the mail provider is down",
        ],
    ));
    assert_eq!(pause["scope"]["kind"], "subscription");
    let id = pause["id"].as_i64().unwrap().to_string();
    let _worker = workers(dir, db, "mail.*=cat >> sent.txt", 1);
    let o = run(
        dir,
        db,
        &["events", "publish", "mail.sent", r#"{"to":"ada"}"#],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let event = stdout(&o).trim().to_owned();
    eventually("the worker to park the event", || {
        json(&run(dir, db, &["--json", "pauses"]))[0]["parked"] == 1
    });
    assert!(!dir.join("sent.txt").exists(), "the paused handler ran");
    let shown = stdout(&run(dir, db, &["events", "show", &event]));
    assert!(shown.contains(&format!("parked by pause {id}")), "{shown}");
    let table = stdout(&run(dir, db, &["pauses"]));
    assert!(
        table.contains("mail.*") && table.contains("active"),
        "{table}"
    );

    let resumed = run(
        dir,
        db,
        &[
            "resume",
            "--subscription",
            "mail.*",
            "--reason",
            "it is back",
        ],
    );
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    assert!(stdout(&resumed).contains("resumed"), "{}", stdout(&resumed));
    eventually("the parked event to be delivered", || {
        std::fs::read_to_string(dir.join("sent.txt")).is_ok_and(|s| s.contains("ada"))
    });
    let shown = json(&run(dir, db, &["--json", "events", "show", &event]));
    eventually("the event to be done", || {
        json(&run(dir, db, &["--json", "events", "show", &event]))["event"]["status"] == "done"
    });
    assert_eq!(shown["event"]["retry_count"], 0, "{shown}");
    let history = json(&run(dir, db, &["--json", "pauses", "--ended-within", "1h"]));
    assert_eq!(history[0]["ended"]["kind"], "resumed");
    assert_eq!(history[0]["ended"]["reason"], "it is back");

    // What is refused, in one line each, changing nothing.
    one_line_failure(
        &run(
            dir,
            db,
            &["pause", "--subscription", "nobody", "--reason", "x"],
        ),
        "not found",
    );
    one_line_failure(&run(dir, db, &["resume", &id]), "ended already");
    one_line_failure(&run(dir, db, &["resume", "424242"]), "not found");
    one_line_failure(
        &run(
            dir,
            db,
            &[
                "pause",
                "--bus",
                "--reason",
                "x",
                "--until",
                "2001-01-01T00:00:00Z",
            ],
        ),
        "until",
    );
    one_line_failure(
        &run(dir, db, &["pause", "--bus", "--reason", " "]),
        "reason",
    );
    assert_eq!(
        json(&run(dir, db, &["--json", "pauses"])),
        serde_json::json!([])
    );
}

#[test]
fn a_running_worker_obeys_pause_and_resume_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    pause_resume_with_a_worker_running(dir.path(), &["--db", "p.db"]);
}

#[test]
fn a_running_worker_obeys_pause_and_resume_on_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pool) = rt.block_on(crate::workers::admin()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let schema = crate::workers::schema();
    let url = crate::workers::pg_url();
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    pause_resume_with_a_worker_running(dir.path(), &db);
    rt.block_on(crate::workers::drop_schema(&pool, &schema));
}

/// Milliseconds since the epoch on this machine's clock (the one `date` in the handlers reads).
fn epoch_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The handler starts recorded in `ran.txt`: (ms since the epoch, worker process id).
fn starts(dir: &Path) -> Vec<(u128, String)> {
    std::fs::read_to_string(dir.join("ran.txt"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (ms, pid) = l.split_once(' ')?;
            Some((ms.parse().ok()?, pid.to_owned()))
        })
        .collect()
}

#[test]
fn every_worker_process_observes_a_pause_within_a_second_on_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pool) = rt.block_on(crate::workers::admin()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let schema = crate::workers::schema();
    let url = crate::workers::pg_url();
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    let first = run(
        dir,
        &db,
        &["worker", "--handler", "tick=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    // Three worker processes; each handler start is recorded with the worker's process id
    // (the parent of the command's shell).
    let workers = workers(
        dir,
        &db,
        r#"tick=echo "$(($(date +%s%N) / 1000000)) $PPID" >> ran.txt"#,
        3,
    );
    let published = std::cell::Cell::new(0usize);
    let publish = || {
        let o = run(dir, &db, &["events", "publish", "tick", "{}"]);
        assert!(o.status.success(), "{}", stderr(&o));
        published.set(published.get() + 1);
    };
    // Publish until every process has handled events.
    eventually("every worker to handle events", || {
        publish();
        let pids: std::collections::HashSet<String> =
            starts(dir).into_iter().map(|(_, p)| p).collect();
        pids.len() == 3
    });
    let paused = run(
        dir,
        &db,
        &[
            "pause",
            "--subscription",
            "tick",
            "--reason",
            "downstream down",
        ],
    );
    assert!(paused.status.success(), "{}", stderr(&paused));
    let at = epoch_ms();
    // Events keep coming for 1.5 s after the pause.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        publish();
    }
    let late: Vec<(u128, String)> = starts(dir)
        .into_iter()
        .filter(|(ms, _)| *ms > at + 1000)
        .collect();
    assert!(
        late.is_empty(),
        "handlers started more than 1 s after the pause: {late:?}"
    );
    // What was published after it waits, parked, and runs after the resume.
    assert!(starts(dir).len() < published.get(), "nothing was held back");
    let resumed = run(dir, &db, &["resume", "--subscription", "tick"]);
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    eventually("the parked events to run", || {
        starts(dir).len() >= published.get()
    });
    drop(workers);
    rt.block_on(crate::workers::drop_schema(&pool, &schema));
}

#[test]
fn limits_are_set_listed_and_removed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = ["--db", "r.db"];
    let first = run(
        dir,
        &db,
        &["worker", "--handler", "api.*=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let set = json(&run(
        dir,
        &db,
        &[
            "--json",
            "rate-limit",
            "set",
            "api.*",
            "--per",
            "100",
            "--interval",
            "1s",
        ],
    ));
    assert_eq!(
        (set["per"].as_u64(), set["interval_ms"].as_u64()),
        (Some(100), Some(1000))
    );
    let listed = stdout(&run(dir, &db, &["rate-limit", "list"]));
    assert!(
        listed.contains("api.*") && listed.contains("100"),
        "{listed}"
    );
    one_line_failure(
        &run(dir, &db, &["rate-limit", "set", "api.*", "--per", "0"]),
        "per",
    );
    one_line_failure(
        &run(dir, &db, &["rate-limit", "set", "nobody", "--per", "1"]),
        "not found",
    );
    let removed = run(dir, &db, &["rate-limit", "remove", "api.*"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    one_line_failure(
        &run(dir, &db, &["rate-limit", "remove", "api.*"]),
        "not found",
    );
    assert_eq!(
        json(&run(dir, &db, &["--json", "rate-limit", "list"])),
        serde_json::json!([])
    );
}

#[test]
fn three_worker_processes_hold_a_rate_limit_on_postgres() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let Some(pool) = rt.block_on(crate::workers::admin()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let schema = crate::workers::schema();
    let url = crate::workers::pg_url();
    let db = ["--db", url.as_str(), "--schema", schema.as_str()];
    let first = run(
        dir,
        &db,
        &["worker", "--handler", "tick=true", "--exit-when-idle"],
    );
    assert!(first.status.success(), "{}", stderr(&first));
    let set = run(
        dir,
        &db,
        &[
            "rate-limit",
            "set",
            "tick",
            "--per",
            "20",
            "--interval",
            "1s",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    // A backlog well past what the limit lets through in the measured seconds.
    for _ in 0..160 {
        let o = run(dir, &db, &["events", "publish", "tick", "{}"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let workers = workers(
        dir,
        &db,
        r#"tick=echo "$(($(date +%s%N) / 1000000)) $PPID" >> ran.txt"#,
        3,
    );
    // The first burst (20 at once), then 20 per second: 4 seconds after the burst hold 80.
    eventually("the first runs", || !starts(dir).is_empty());
    let first_ms = starts(dir).iter().map(|(ms, _)| *ms).min().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(5600) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let runs = starts(dir);
    let window: Vec<&(u128, String)> = runs
        .iter()
        .filter(|(ms, _)| *ms >= first_ms + 1000 && *ms < first_ms + 5000)
        .collect();
    let pids: std::collections::HashSet<&String> = runs.iter().map(|(_, p)| p).collect();
    eprintln!(
        "rate limit 20/s over 4 s: {} runs by {} processes",
        window.len(),
        pids.len()
    );
    assert!(
        (72..=88).contains(&window.len()),
        "{} runs in 4 s at 20/s (80 ± 10 %); {} in all, by {} processes",
        window.len(),
        runs.len(),
        pids.len()
    );
    drop(workers);
    rt.block_on(crate::workers::drop_schema(&pool, &schema));
}

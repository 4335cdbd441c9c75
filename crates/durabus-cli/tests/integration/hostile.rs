//! Hostile input to the `durabus` binary: SQL and LIKE metacharacters in every filter are
//! taken literally, arguments that are not UTF-8 are refused with a clear message (never a
//! panic), and a database path that is not UTF-8 works like any other.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::process::{Command, Output};

fn durabus<I, S>(db: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Values that would match something, or break the query, if they reached SQL unescaped.
/// (A NUL cannot be passed in a process argument at all.)
const HOSTILE: &[&str] = &[
    "%",
    "_",
    "order.%",
    "order._aid",
    "order.paid%",
    "'",
    "\"",
    "\\",
    "'; DROP TABLE durabus_events; --",
    "' OR '1'='1",
    "%' OR 1=1 --",
    "[a-z]*",
    "order.paid' --",
    "\u{202e}order.paid",
];

fn seeded() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let out = durabus(&db, ["demo"]);
    assert!(out.status.success(), "demo failed: {}", stderr(&out));
    (dir, db)
}

/// The JSON a command printed, or `None` if it refused the input: a failure that says why,
/// with no panic.
fn answered(what: &str, o: &Output) -> Option<serde_json::Value> {
    let err = stderr(o);
    assert!(!err.contains("panicked"), "{what}: {err}");
    if o.status.success() {
        Some(serde_json::from_slice(&o.stdout).unwrap())
    } else {
        assert!(
            err.starts_with("durabus: ") || err.starts_with("error: "),
            "{what}: {err}"
        );
        None
    }
}

#[test]
fn metacharacters_in_every_filter_match_nothing_and_break_nothing() {
    let (_dir, db) = seeded();
    let mut matched_nothing = 0;
    for value in HOSTILE {
        for flag in ["--type", "--subscription", "--group"] {
            let what = format!("dlq list {flag} {value:?}");
            let out = durabus(&db, ["dlq", "list", "--json", flag, value]);
            if let Some(page) = answered(&what, &out) {
                matched_nothing += 1;
                assert_eq!(page["items"].as_array().unwrap().len(), 0, "{what}: {page}");
            }
            // A bulk action's preview selects nothing either.
            let what = format!("dlq retry --preview {flag} {value:?}");
            let out = durabus(&db, ["dlq", "retry", "--preview", "--json", flag, value]);
            if let Some(preview) = answered(&what, &out) {
                assert_eq!(preview["count"], 0, "{what}: {preview}");
            }
        }
        let what = format!("events list --type {value:?}");
        let out = durabus(&db, ["events", "list", "--json", "--type", value]);
        if let Some(events) = answered(&what, &out) {
            assert_eq!(
                events["items"].as_array().map_or(0, Vec::len),
                0,
                "{what}: {events}"
            );
        }
        // Statuses are a closed set: anything else is refused by name, with no panic.
        let out = durabus(&db, ["dlq", "list", "--status", value]);
        assert!(
            !out.status.success(),
            "dlq list --status {value:?} was accepted"
        );
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
    assert!(matched_nothing > 0, "every hostile value was refused");
    // Nothing was dropped or changed on the way.
    let page = json(&durabus(&db, ["dlq", "list", "--json"]));
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let page = json(&durabus(
        &db,
        ["dlq", "list", "--json", "--type", "order.paid"],
    ));
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

#[test]
fn arguments_that_are_not_utf8_are_refused_clearly() {
    let (_dir, db) = seeded();
    let bad = OsString::from_vec(vec![b'o', 0xff, b'r', 0xfe]);
    for args in [
        vec![
            OsString::from("dlq"),
            "list".into(),
            "--type".into(),
            bad.clone(),
        ],
        vec![
            "dlq".into(),
            "list".into(),
            "--subscription".into(),
            bad.clone(),
        ],
        vec!["events".into(), "list".into(), "--type".into(), bad.clone()],
        vec![
            "dlq".into(),
            "resolve".into(),
            "--all".into(),
            "--note".into(),
            bad.clone(),
        ],
        vec!["dlq".into(), "show".into(), bad.clone()],
    ] {
        let out = durabus(&db, &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("UTF-8"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    // Nothing was resolved.
    let page = json(&durabus(
        &db,
        ["dlq", "list", "--json", "--status", "pending"],
    ));
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

#[test]
fn a_database_path_that_is_not_utf8_works() {
    let dir = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9 \xff.db");
    let db = dir.path().join(name);
    let out = durabus(&db, ["demo"]);
    assert!(out.status.success(), "demo failed: {}", stderr(&out));
    assert!(db.exists());
    let page = json(&durabus(&db, ["dlq", "list", "--json"]));
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
}

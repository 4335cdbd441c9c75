//! Bad databases and bad arguments: one-line errors, nothing created.

use super::*;

#[test]
fn bad_databases_give_one_line_errors_and_are_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.db");
    for args in [
        &["dlq", "list"][..],
        &["events", "list"],
        &["dlq", "purge", "--older-than", "1"],
    ] {
        assert_one_line_failure(&durabus(&missing, args), "does not exist");
    }
    assert!(!missing.exists());

    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a database at all, just some words in a file").unwrap();
    assert_one_line_failure(
        &durabus(&text, &["dlq", "list"]),
        "is not a durabus database",
    );
    assert_one_line_failure(
        &durabus(dir.path(), &["events", "list"]),
        "is not a durabus database",
    );
    assert_one_line_failure(&durabus(&text, &["demo"]), "not a durabus database");
}

#[test]
fn bad_arguments_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("x.db");
    assert!(
        durabus(&db, &["demo", "--orders", "1", "--json"])
            .status
            .success()
    );
    let o = durabus(&db, &["dlq", "retry", "not-a-uuid"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid id"));
    let o = durabus(&db, &["events", "list", "--status", "finished"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("status: \"finished\" is not an event status; accepted: scheduled, pending, processing, done, dlq or cancelled"),
        "{}",
        stderr(&o)
    );
    // Publish options out of range: refused before anything is written.
    for (args, says) in [
        (vec!["--delay", "-5s"], "is negative"),
        (vec!["--delay", "5"], "has no unit"),
        (vec!["--priority", "101"], "priority"),
        (vec!["--dedup", "k", "--dedup-window", "0s"], "dedup_window"),
        (vec!["--dedup", "", "--dedup-window", "1h"], "dedup_key"),
        (vec!["--dedup", "k"], "--dedup-window"),
        (vec!["--dedup-window", "1h"], "--dedup"),
    ] {
        let mut all = vec!["events", "publish", "x.y", "{}"];
        all.extend(args);
        let o = durabus(&db, &all);
        assert_ne!(o.status.code(), Some(0), "{all:?}");
        assert!(stderr(&o).contains(says), "{all:?}: {}", stderr(&o));
    }
    assert_one_line_failure(
        &durabus(
            &db,
            &["dlq", "retry", "0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70"],
        ),
        "not found",
    );
    // Options for the other kind of database are refused, not ignored.
    let o = durabus(&db, &["--schema", "other", "events", "list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--schema applies to PostgreSQL"),
        "{}",
        stderr(&o)
    );
    let o = Command::new(env!("CARGO_BIN_EXE_durabus"))
        .args([
            "--db",
            "postgres://u@127.0.0.1:1/x",
            "--table-prefix",
            "x_",
            "stats",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--table-prefix applies to SQLite"),
        "{}",
        stderr(&o)
    );
    // An in-memory database cannot be inspected from another process: refused, not empty.
    for args in [&["dlq", "list"][..], &["demo", "--orders", "1"], &["serve"]] {
        let o = Command::new(env!("CARGO_BIN_EXE_durabus"))
            .args(["--db", ":memory:"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&o).contains("private to the process"),
            "{}",
            stderr(&o)
        );
        assert!(!std::path::Path::new(":memory:").exists());
    }
}

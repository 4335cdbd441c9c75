//! The `durabus` binary, run as a user would.

use std::path::Path;
use std::process::{Command, Output};

fn durabus(db: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn demo_retries_dead_letters_and_the_dlq_commands_operate_on_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let out = durabus(&db, &["demo"]);
    assert!(out.status.success(), "demo failed: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("gateway timeout, will retry"), "{text}");
    assert!(text.contains("delivered after retry  2"), "{text}");
    assert!(text.contains("dead-lettered          1"), "{text}");

    let page = json(&durabus(&db, &["dlq", "list", "--json"]));
    let dead = page["items"].as_array().unwrap();
    assert_eq!(dead.len(), 1);
    assert!(page["next"].is_null(), "one page: {page}");
    assert_eq!(dead[0]["status"], "pending");
    assert_eq!(dead[0]["type"], "order.paid");
    assert_eq!(dead[0]["payload"]["card"], "stolen");
    assert_eq!(dead[0]["subscription"], "demo-payments");
    assert_eq!(dead[0]["error_history"].as_array().unwrap().len(), 1);
    assert_eq!(
        dead[0]["error_history"][0]["errors"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    assert!(
        dead[0]["next_auto_retry_at"].is_string(),
        "auto retry scheduled"
    );
    let id = dead[0]["event_id"].as_str().unwrap().to_owned();
    let group = dead[0]["fingerprint"].as_str().unwrap().to_owned();

    let table = stdout(&durabus(&db, &["dlq", "list"]));
    assert!(table.contains(&id) && table.contains("refused"), "{table}");
    for page in [
        &["dlq", "list", "--limit", "0"][..],
        &["dlq", "list", "--offset", "5"][..],
    ] {
        let text = stdout(&durabus(&db, page));
        assert_eq!(text.trim(), "no dead letters on this page", "{page:?}");
    }
    let shown = stdout(&durabus(&db, &["dlq", "show", &id]));
    assert!(
        shown.contains("round 1 failed") && shown.contains("stolen"),
        "{shown}"
    );

    let done = json(&durabus(
        &db,
        &["events", "list", "--status", "done", "--json"],
    ));
    // Seven application events, and the `system.dead_letter` event announcing the dead letter.
    assert_eq!(done.as_array().unwrap().len(), 8);
    let announced = json(&durabus(
        &db,
        &["events", "list", "--type", "system.dead_letter", "--json"],
    ));
    assert_eq!(announced[0]["payload"]["event_id"], id.as_str());
    let users = json(&durabus(
        &db,
        &["events", "list", "--type", "user.signed_up", "--json"],
    ));
    assert_eq!(users.as_array().unwrap().len(), 1);
    let page = json(&durabus(&db, &["events", "list", "--limit", "2", "--json"]));
    assert_eq!(page.as_array().unwrap().len(), 2);

    let retried = json(&durabus(
        &db,
        &["dlq", "retry", &id, "--actor", "ann", "--json"],
    ));
    assert_eq!(retried["event_id"], id.as_str());
    assert_eq!(retried["dead_letter"]["status"], "retrying");
    assert_eq!(retried["dead_letter"]["manual_retry_count"], 1);
    assert_eq!(retried["dead_letter"]["last_retry_by"], "ann");
    let pending = json(&durabus(
        &db,
        &["events", "list", "--status", "pending", "--json"],
    ));
    assert_eq!(pending[0]["id"], id.as_str());
    assert_eq!(pending[0]["retry_count"], 0);
    assert!(
        json(&durabus(
            &db,
            &["dlq", "list", "--status", "pending", "--json"]
        ))["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Retrying it again while it is being retried: a conflict that says why.
    let again = durabus(&db, &["dlq", "retry", &id]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        stderr(&again).contains("it is retrying"),
        "{}",
        stderr(&again)
    );

    // A second demo run makes a new dead letter, and its bus also delivers the retried event,
    // which fails again (the card is still stolen): three new attempts, a second round in the
    // same record, the first round kept.
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let dead = json(&durabus(&db, &["dlq", "list", "--json"]));
    let dead = dead["items"].as_array().unwrap();
    assert_eq!(dead.len(), 2);
    let again = dead
        .iter()
        .find(|e| e["event_id"] == id.as_str())
        .expect("the retried event died again");
    assert_eq!(again["status"], "pending");
    assert_eq!(again["manual_retry_count"], 1);
    let rounds = again["error_history"].as_array().unwrap();
    assert_eq!(rounds.len(), 2);
    assert_eq!(rounds[1]["retried_by"], "ann");
    assert_eq!(rounds[1]["errors"].as_array().unwrap().len(), 3);
    // Both are one failure: one group of two.
    let groups = json(&durabus(&db, &["dlq", "groups", "--json"]));
    assert_eq!(groups.as_array().unwrap().len(), 1, "{groups}");
    assert_eq!(groups[0]["fingerprint"], group.as_str());
    assert_eq!(groups[0]["count"], 2);
    assert_eq!(groups[0]["open"], 2);
    let purge = json(&durabus(
        &db,
        &["dlq", "purge", "--older-than", "1", "--json"],
    ));
    assert_eq!(purge["purged"], 0, "nothing is a day old");
    let purge = json(&durabus(
        &db,
        &["dlq", "purge", "--older-than", "0", "--json"],
    ));
    assert_eq!(purge["purged"], 2);
    assert!(
        json(&durabus(&db, &["dlq", "list", "--json"]))["items"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        json(&durabus(&db, &["dlq", "groups", "--json"]))
            .as_array()
            .unwrap()
            .is_empty(),
        "a group without records is gone"
    );
}

#[test]
fn demo_json_prints_a_summary() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let s = json(&durabus(&db, &["demo", "--json", "--orders", "3"]));
    assert_eq!(s["published"], 5);
    assert_eq!(s["delivered"], 4);
    assert_eq!(s["delivered_after_retry"], 1);
    assert_eq!(s["dead_lettered"], 1);
    assert_eq!(s["dead_letter_ids"].as_array().unwrap().len(), 1);
    // Order 3 retried once, order 99 twice.
    assert_eq!(s["retry_metrics"]["retries_total"], 3);
    assert_eq!(s["retry_metrics"]["events_dead_lettered_total"], 1);
    assert_eq!(s["retry_metrics"]["success_after_retry_rate"], 0.5);
    let names: Vec<_> = s["breakers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].clone())
        .collect();
    assert_eq!(names, ["demo-audit", "demo-payments", "demo-email"]);
    assert_eq!(s["breakers"][0]["state"], "closed");
}

fn assert_one_line_failure(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

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
    assert!(stderr(&o).contains("unknown status"));
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

#[test]
fn demo_refuses_a_database_with_other_applications_pending_events() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("app.db");
    assert!(
        durabus(&db, &["demo", "--json", "--orders", "1"])
            .status
            .success()
    );
    // Another application's event waits in the same database.
    assert!(enqueue_foreign_event(&db), "could not add a foreign event");
    let o = durabus(&db, &["demo"]);
    assert_one_line_failure(&o, "types the demo does not handle");
    let pending = json(&durabus(
        &db,
        &["events", "list", "--status", "pending", "--json"],
    ));
    assert_eq!(
        pending.as_array().unwrap().len(),
        1,
        "the foreign event is untouched"
    );
    assert_eq!(pending[0]["type"], "invoice.created");
}

#[test]
fn the_demo_takes_its_own_announcements_and_leaves_an_applications_alone() {
    let dir = tempfile::tempdir().unwrap();
    // A demo database whose last run stopped before its dead letter's announcement was
    // delivered: the next demo run delivers it.
    let demo_db = dir.path().join("demo.db");
    assert!(dead_letter_left_announced(&demo_db, "order.paid"));
    assert!(
        durabus(&demo_db, &["demo", "--json", "--orders", "1"])
            .status
            .success()
    );
    let pending = json(&durabus(
        &demo_db,
        &["events", "list", "--status", "pending", "--json"],
    ));
    assert_eq!(pending.as_array().unwrap().len(), 0, "{pending}");
    // An application's database whose only waiting event is the announcement of its own dead
    // letter (its pager has not run yet): the demo must not deliver that for it.
    let app_db = dir.path().join("app.db");
    assert!(dead_letter_left_announced(&app_db, "invoice.created"));
    let o = durabus(&app_db, &["demo"]);
    assert_one_line_failure(&o, "types the demo does not handle");
    let pending = json(&durabus(
        &app_db,
        &["events", "list", "--status", "pending", "--json"],
    ));
    assert_eq!(pending.as_array().unwrap().len(), 1, "{pending}");
    assert_eq!(pending[0]["type"], "system.dead_letter");
}

/// Publishes one `event_type` event whose handler fails at once (no retries) on a bus that is
/// not started: the event is a dead letter and its `system.dead_letter` announcement waits.
fn dead_letter_left_announced(db: &Path, event_type: &str) -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = durabus::EventBus::open(db).await.unwrap();
        bus.subscribe(
            event_type,
            |_e: durabus::Event| async { Err("refused".into()) },
            durabus::SubscribeOptions::default()
                .retry(durabus::RetryOverride::default().max_retries(0)),
        )
        .await
        .unwrap();
        let id = bus.publish(event_type, &1).await.unwrap();
        let dead =
            bus.store().get_event(id).await.unwrap().unwrap().status == durabus::EventStatus::Dlq;
        bus.shutdown().await.unwrap();
        dead
    })
}

/// Adds a pending `invoice.created` event through the library, as another application would.
fn enqueue_foreign_event(db: &Path) -> bool {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = durabus::EventBus::open(db).await.unwrap();
        let ok = bus.enqueue("invoice.created", &1).await.is_ok();
        bus.shutdown().await.unwrap();
        ok
    })
}

#[test]
fn stats_report_what_the_database_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stats.db");
    assert_one_line_failure(&durabus(&db, &["stats"]), "does not exist");
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let s = json(&durabus(&db, &["stats", "--json"]));
    // The demo's 8 events and the `system.dead_letter` event announcing its dead letter.
    assert_eq!(s["total"], 9);
    assert_eq!(s["by_status"]["done"], 8);
    assert_eq!(s["by_status"]["dlq"], 1);
    assert_eq!(s["by_type"]["system.dead_letter"]["done"], 1);
    assert_eq!(s["by_type"]["order.paid"]["dlq"], 1);
    assert_eq!(s["by_type"]["order.paid"]["done"], 6);
    let rate = s["by_type"]["order.paid"]["dlq_rate"].as_f64().unwrap();
    assert!((rate - 1.0 / 7.0).abs() < 1e-9, "{rate}");
    assert_eq!(s["by_type"]["user.signed_up"]["dlq_rate"], 0.0);
    // 6 events never retried (the announcement among them), 2 retried once, the dead letter
    // used 3 attempts.
    assert_eq!(s["retry_counts"]["0"], 6);
    assert_eq!(s["retry_counts"]["1"], 2);
    assert_eq!(s["retry_counts"]["3"], 1);
    let text = stdout(&durabus(&db, &["stats"]));
    assert!(
        text.contains("order.paid") && text.contains("14.3%"),
        "{text}"
    );
}

#[test]
fn history_is_listed_by_time_and_purged_under_a_table_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.db");
    let prefixed = |args: &[&str]| {
        let mut all = vec!["--table-prefix", "shop_bus_"];
        all.extend_from_slice(args);
        durabus(&db, &all)
    };
    assert!(prefixed(&["demo", "--json"]).status.success());
    // The default prefix finds no durabus tables in this file, and says so.
    let wrong = durabus(&db, &["events", "list"]);
    assert_one_line_failure(&wrong, "shop.db is not a durabus database");
    assert!(
        stderr(&wrong).contains("durabus_meta"),
        "{}",
        stderr(&wrong)
    );
    let bad = durabus(&db, &["--table-prefix", "x;y", "events", "list"]);
    assert_one_line_failure(&bad, "table prefix");

    let done = json(&prefixed(&["events", "list", "--status", "done", "--json"]));
    let done = done.as_array().unwrap();
    // Seven of the demo's events and the announcement of its dead letter.
    assert_eq!(done.len(), 8);
    // A time range: everything was created after the epoch and before 2200.
    let since = json(&prefixed(&[
        "events",
        "list",
        "--since",
        "1970-01-02T00:00:00Z",
        "--until",
        "2200-01-01T00:00:00Z",
        "--json",
    ]));
    assert_eq!(since.as_array().unwrap().len(), 9);
    let future = json(&prefixed(&[
        "events",
        "list",
        "--since",
        "2200-01-01T00:00:00Z",
        "--json",
    ]));
    assert!(future.as_array().unwrap().is_empty());
    let bad_time = prefixed(&["events", "list", "--since", "yesterday"]);
    assert_eq!(bad_time.status.code(), Some(2), "{}", stderr(&bad_time));

    let kept = json(&prefixed(&[
        "events",
        "purge",
        "--older-than",
        "1",
        "--json",
    ]));
    assert_eq!(kept["purged"], 0, "nothing completed a day ago");
    let purged = json(&prefixed(&[
        "events",
        "purge",
        "--older-than",
        "0",
        "--json",
    ]));
    assert_eq!(purged["purged"], 8);
    let left = json(&prefixed(&["events", "list", "--json"]));
    let left = left.as_array().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["status"], "dlq", "dead letters are not history");
    let text = stdout(&prefixed(&["events", "purge", "--older-than", "0"]));
    assert!(text.contains("purged 0 completed event(s)"), "{text}");
}

#[test]
fn payload_snapshots_are_listed_redacted_and_deleted_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("payloads.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let bus = durabus::EventBus::builder()
            .sqlite(&db)
            .payload_snapshots(true)
            .build()
            .await
            .unwrap();
        let id = bus
            .enqueue(
                "order.paid",
                &serde_json::json!({"card": "4111111111111111", "total": 42}),
            )
            .await
            .unwrap();
        bus.shutdown().await.unwrap();
        id.to_string()
    });
    let list = json(&durabus(&db, &["payloads", "list", &id, "--json"]));
    assert_eq!(list[0]["stage"], "published");
    assert_eq!(list[0]["payload"]["card"], "4111111111111111");
    assert!(list[0]["size_compressed"].as_u64().unwrap() > 0);
    // Operators stop seeing the card number once it is configured, everywhere they read.
    let set = json(&durabus(
        &db,
        &[
            "payload-config",
            "set",
            "order.paid",
            "--redact",
            "$.card",
            "--retention-days",
            "30",
            "--actor",
            "ann",
            "--json",
        ],
    ));
    assert_eq!(set["updated_by"], "ann");
    assert_eq!(set["retention_days"], 30);
    let got = json(&durabus(
        &db,
        &["payloads", "get", &id, "published", "--json"],
    ));
    assert_eq!(got["payload"]["card"], "[redacted]");
    assert_eq!(got["payload"]["total"], 42);
    let events = json(&durabus(&db, &["events", "list", "--json"]));
    assert_eq!(events[0]["payload"]["card"], "[redacted]");
    let table = stdout(&durabus(&db, &["payload-config", "list"]));
    assert!(
        table.contains("order.paid") && table.contains("$.card"),
        "{table}"
    );
    // Bad input: one line, nothing changed.
    let negative = durabus(
        &db,
        &[
            "payload-config",
            "set",
            "order.paid",
            "--retention-days",
            "-1",
        ],
    );
    assert_one_line_failure(&negative, "retention");
    let no_reason = durabus(&db, &["payloads", "delete", &id]);
    assert_eq!(no_reason.status.code(), Some(2), "--reason is required");
    // Soft delete: gone, with who, when and why.
    let deleted = json(&durabus(
        &db,
        &[
            "payloads",
            "delete",
            &id,
            "--reason",
            "customer asked",
            "--json",
        ],
    ));
    assert_eq!(deleted["deleted"], 1);
    let after = json(&durabus(&db, &["payloads", "get", &id, "--json"]));
    assert!(after["payload"].is_null());
    assert_eq!(after["deleted"]["reason"], "customer asked");
    let text = stdout(&durabus(&db, &["payloads", "get", &id]));
    assert!(
        text.contains("deleted") && text.contains("customer asked"),
        "{text}"
    );
    let missing = durabus(&db, &["payloads", "get", &id, "agent_request"]);
    assert_one_line_failure(&missing, "not found");
}

/// Adds `n` pending `bulk.item` events through the library.
fn enqueue_many(db: &Path, n: u64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = durabus::EventBus::open(db).await.unwrap();
        let events = (0..n)
            .map(|i| durabus::NewEvent::new("bulk.item", &i).unwrap())
            .collect();
        bus.enqueue_batch(events).await.unwrap();
        bus.shutdown().await.unwrap();
    })
}

#[test]
fn a_replay_is_previewed_dry_run_and_run_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("replay.db");
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let select = ["replay", "start", "--all", "--type", "order.*"];
    let with = |extra: &[&str]| -> Vec<String> {
        select
            .iter()
            .chain(extra)
            .map(|s| (*s).to_owned())
            .collect()
    };
    let run = |args: Vec<String>| {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        durabus(&db, &refs)
    };

    // Preview: the demo's 7 order.paid events, oldest first; nothing changes.
    let preview = json(&run(with(&["--preview", "--json"])));
    assert_eq!(preview["count"], 7);
    assert_eq!(preview["by_type"]["order.paid"], 7);
    assert_eq!(preview["samples"].as_array().unwrap().len(), 7);
    let text = stdout(&run(with(&["--preview"])));
    assert!(text.contains("7 event(s) selected"), "{text}");
    // Dry run: the whole walk, nothing changed.
    let dry = json(&run(with(&["--dry-run", "--json"])));
    assert_eq!(dry["count"], 7);
    let stats = json(&durabus(&db, &["stats", "--json"]));
    assert_eq!(stats["by_type"]["order.paid"]["pending"], 0);
    assert!(
        json(&durabus(&db, &["replay", "list", "--json"]))
            .as_array()
            .unwrap()
            .is_empty()
    );

    // The replay: 7 new pending order.paid events, the operation completed.
    let done = json(&run(with(&["--yes", "--json"])));
    assert_eq!(done["kind"], "replay");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["processed"], 7);
    let id = done["id"].as_str().unwrap().to_owned();
    let stats = json(&durabus(&db, &["stats", "--json"]));
    assert_eq!(stats["by_type"]["order.paid"]["pending"], 7);
    assert_eq!(
        stats["by_type"]["order.paid"]["done"], 6,
        "originals untouched"
    );
    assert_eq!(stats["by_type"]["system.replay.started"]["pending"], 1);
    assert_eq!(stats["by_type"]["system.replay.completed"]["pending"], 1);
    let status = json(&durabus(&db, &["replay", "status", &id, "--json"]));
    assert_eq!(
        (status["status"].as_str(), status["processed"].as_u64()),
        (Some("completed"), Some(7))
    );
    let text = stdout(&durabus(&db, &["replay", "status", &id]));
    assert!(text.contains("completed"), "{text}");
    let list = json(&durabus(&db, &["replay", "list", "--json"]));
    assert_eq!(list.as_array().unwrap().len(), 1);

    // Above 1,000 events, without a terminal to ask on: refused without --yes, nothing made.
    enqueue_many(&db, 1_001);
    let bulk = ["replay", "start", "--all", "--type", "bulk.*"];
    let refused = durabus(&db, &bulk);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("--yes"), "{}", stderr(&refused));
    assert_eq!(
        json(&durabus(&db, &["replay", "list", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Submitted detached, then cancelled before any runner took it.
    let mut detached = bulk.to_vec();
    detached.extend(["--yes", "--detach", "--json"]);
    let op = json(&durabus(&db, &detached));
    assert_eq!(
        (op["status"].as_str(), op["total"].as_u64()),
        (Some("pending"), Some(1_001))
    );
    let id = op["id"].as_str().unwrap();
    let cancelled = json(&durabus(&db, &["replay", "cancel", id, "--json"]));
    assert_eq!(cancelled["status"], "cancelled");
    let text = stdout(&durabus(&db, &["replay", "list", "--status", "cancelled"]));
    assert!(text.contains(id), "{text}");

    // Bad requests: one line each.
    assert_one_line_failure(
        &durabus(&db, &["replay", "start", "--type", "order.*"]),
        "say all",
    );
    assert_one_line_failure(&run(with(&["--rate", "0", "--yes"])), "rate");
    assert_one_line_failure(&durabus(&db, &["replay", "status", "nope"]), "not found");
}

/// The samples of an exposition: `name{labels}` → value.
fn samples(text: &str) -> std::collections::HashMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').unwrap();
            (name.to_owned(), value.parse::<f64>().unwrap())
        })
        .collect()
}

#[test]
fn metrics_print_the_databases_gauges() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("metrics.db");
    assert_one_line_failure(&durabus(&db, &["metrics"]), "does not exist");
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let out = durabus(&db, &["metrics"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = samples(&stdout(&out));
    assert_eq!(m["durabus_dead_letters{status=\"pending\"}"], 1.0);
    assert_eq!(m["durabus_dead_letters{status=\"retrying\"}"], 0.0);
    assert_eq!(m["durabus_events{status=\"pending\"}"], 0.0);
    assert_eq!(m["durabus_oldest_due_event_age_seconds"], 0.0);
    assert!(m["durabus_oldest_pending_dead_letter_age_seconds"] >= 0.0);
    assert!(m.contains_key("durabus_sqlite_wal_bytes"));
    // Gauges only: a CLI process has counted nothing worth reporting.
    assert!(!m.keys().any(|k| k.contains("_total")), "{m:?}");
    let other = samples(&stdout(&durabus(&db, &["metrics", "--prefix", "shop_"])));
    assert_eq!(other["shop_dead_letters{status=\"pending\"}"], 1.0);
    assert_one_line_failure(&durabus(&db, &["metrics", "--prefix", "1-bad"]), "prefix");
}

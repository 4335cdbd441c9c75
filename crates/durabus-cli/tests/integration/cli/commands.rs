//! Statistics, history, payload snapshots, replays and metrics from the CLI.

use super::*;

#[test]
fn stats_report_what_the_database_holds() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("stats.db");
    assert_one_line_failure(&durabus(&db, &["stats"]), "does not exist");
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let s = json(&durabus(&db, &["stats", "--json"]));
    // The demo's 12 events (its reminder among them, delivered once due, and three shipment
    // steps under an ordering key), the `system.dead_letter` event announcing its dead letter
    // and the `system.failure_group.new` event announcing its failure group (a first).
    assert_eq!(s["total"], 14);
    assert_eq!(s["by_status"]["done"], 13);
    assert_eq!(s["by_type"]["order.shipment"]["done"], 3);
    assert_eq!(s["by_type"]["order.reminder"]["done"], 1);
    assert_eq!(s["by_status"]["dlq"], 1);
    assert_eq!(s["by_type"]["system.dead_letter"]["done"], 1);
    assert_eq!(s["by_type"]["system.failure_group.new"]["done"], 1);
    assert_eq!(s["by_type"]["order.paid"]["dlq"], 1);
    assert_eq!(s["by_type"]["order.paid"]["done"], 6);
    let rate = s["by_type"]["order.paid"]["dlq_rate"].as_f64().unwrap();
    assert!((rate - 1.0 / 7.0).abs() < 1e-9, "{rate}");
    assert_eq!(s["by_type"]["user.signed_up"]["dlq_rate"], 0.0);
    // 11 events never retried (the two announcements, the reminder and the shipment steps
    // among them), 2 retried once, the dead letter used 3 attempts.
    assert_eq!(s["retry_counts"]["0"], 11);
    assert_eq!(s["retry_counts"]["1"], 2);
    assert_eq!(s["retry_counts"]["3"], 1);
    let text = stdout(&durabus(&db, &["stats"]));
    assert!(
        text.contains("order.paid") && text.contains("14.3%"),
        "{text}"
    );
    assert!(
        text.starts_with(&format!(
            "as of       {}",
            s["computed_at"].as_str().unwrap()
        )),
        "the snapshot's time comes first: {text}"
    );
    // The snapshot is kept: a new event shows once it is refreshed (by the job, or --fresh).
    assert!(
        durabus(&db, &["events", "publish", "order.paid", "{}"])
            .status
            .success()
    );
    assert_eq!(json(&durabus(&db, &["stats", "--json"]))["total"], 14);
    let fresh = json(&durabus(&db, &["stats", "--fresh", "--json"]));
    assert_eq!(fresh["total"], 15);
    assert_eq!(fresh["by_type"]["order.paid"]["pending"], 1);
    assert_eq!(json(&durabus(&db, &["stats", "--json"]))["total"], 15);
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
    // Eleven of the demo's events (its reminder and its shipment steps among them) and the
    // announcements of its dead letter and failure group.
    assert_eq!(done.len(), 13);
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
    assert_eq!(since.as_array().unwrap().len(), 14);
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
    assert_eq!(purged["purged"], 13);
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
    // Setting one field changes only that field: the redaction rule stays.
    let days = json(&durabus(
        &db,
        &[
            "payload-config",
            "set",
            "order.paid",
            "--retention-days",
            "7",
            "--json",
        ],
    ));
    assert_eq!(days["retention_days"], 7);
    assert_eq!(days["redact"], serde_json::json!(["$.card"]), "{days}");
    assert_eq!(days["stages"], serde_json::json!(["*"]), "{days}");
    let got = json(&durabus(
        &db,
        &["payloads", "get", &id, "published", "--json"],
    ));
    assert_eq!(got["payload"]["card"], "[redacted]", "still redacted");
    // Dropping a rule is explicit, and a rule the type does not have is refused.
    let typo = durabus(
        &db,
        &[
            "payload-config",
            "set",
            "order.paid",
            "--no-redact",
            "$.cardd",
        ],
    );
    assert_one_line_failure(&typo, "no redaction rule");
    let dropped = json(&durabus(
        &db,
        &[
            "payload-config",
            "set",
            "order.paid",
            "--no-redact",
            "$.card",
            "--redact",
            "$.card.number",
            "--json",
        ],
    ));
    assert_eq!(
        dropped["redact"],
        serde_json::json!(["$.card.number"]),
        "{dropped}"
    );
    assert_eq!(dropped["retention_days"], 7);
    let nothing = durabus(&db, &["payload-config", "set", "order.paid"]);
    assert_one_line_failure(&nothing, "nothing to change");
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

#[test]
fn a_replay_is_previewed_dry_run_and_run_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("replay.db");
    assert!(durabus(&db, &["demo", "--json"]).status.success());
    let select = ["replay", "start", "--all", "--type", "order.paid"];
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
    let stats = json(&durabus(&db, &["stats", "--fresh", "--json"]));
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
    let stats = json(&durabus(&db, &["stats", "--fresh", "--json"]));
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
        "accepted: a start time (from), event ids, or all",
    );
    assert_one_line_failure(&run(with(&["--rate", "0", "--yes"])), "rate");
    assert_one_line_failure(&durabus(&db, &["replay", "status", "nope"]), "not found");
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

#[test]
fn events_are_published_and_shown_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("publish.db");
    enqueue_many(&db, 1);
    let inline = durabus(&db, &["events", "publish", "order.placed", r#"{"id":1}"#]);
    assert!(inline.status.success(), "{}", stderr(&inline));
    let id = stdout(&inline).trim().to_owned();
    assert_eq!(id.len(), 36, "prints the id: {id}");
    let file = dir.path().join("payload.json");
    std::fs::write(&file, r#"{"id":2,"note":"from a file"}"#).unwrap();
    let from_file = json(&durabus(
        &db,
        &[
            "events",
            "publish",
            "order.placed",
            &format!("@{}", file.display()),
            "--json",
        ],
    ));
    assert_eq!(from_file["status"], "pending");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_durabus"))
        .arg("--db")
        .arg(&db)
        .args(["events", "publish", "order.placed", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(br#"{"id":3}"#).unwrap();
    }
    let piped = child.wait_with_output().unwrap();
    assert!(piped.status.success());
    let piped_id = stdout(&piped).trim().to_owned();

    let shown = json(&durabus(&db, &["events", "show", &piped_id, "--json"]));
    assert_eq!(shown["event"]["type"], "order.placed");
    assert_eq!(shown["event"]["status"], "pending");
    assert_eq!(shown["event"]["payload"]["id"], 3);
    assert!(shown["snapshots"].as_array().unwrap().is_empty());
    let text = stdout(&durabus(&db, &["events", "show", &id]));
    assert!(text.contains("type           order.placed"), "{text}");
    assert!(text.contains(r#"payload        {"id":1}"#), "{text}");
    let from_file_id = from_file["id"].as_str().unwrap();
    let text = stdout(&durabus(&db, &["events", "show", from_file_id]));
    assert!(text.contains("from a file"), "{text}");

    // Bad input: one line, nothing stored.
    let listed = |db: &std::path::Path| {
        json(&durabus(db, &["events", "list", "--json"]))
            .as_array()
            .unwrap()
            .len()
    };
    let before = listed(&db);
    assert_one_line_failure(
        &durabus(&db, &["events", "publish", "order.placed", "not json"]),
        "not JSON",
    );
    assert_one_line_failure(
        &durabus(&db, &["events", "publish", "system.mine", "{}"]),
        "reserved",
    );
    assert_one_line_failure(
        &durabus(
            &db,
            &[
                "events",
                "publish",
                "order.placed",
                "@/nonexistent/file.json",
            ],
        ),
        "reading the payload",
    );
    assert_eq!(listed(&db), before);
    assert_one_line_failure(
        &durabus(
            &db,
            &["events", "show", "0190a5b2-7c1e-7d3a-9f1e-2b3c4d5e6f70"],
        ),
        "not found",
    );
}

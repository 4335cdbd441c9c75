//! The demo, and the dead-letter commands on what it leaves; a database holding an application's own events.

use super::*;

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
    assert!(shown.contains("open           waiting"), "{shown}");
    assert!(
        !shown.contains("resolved"),
        "a pending record is not resolved: {shown}"
    );

    let done = json(&durabus(
        &db,
        &["events", "list", "--status", "done", "--json"],
    ));
    // Eleven application events (the reminder and three shipment steps among them), the
    // `system.dead_letter` event announcing the dead letter and the `system.failure_group.new`
    // event announcing its group.
    assert_eq!(done.as_array().unwrap().len(), 13);
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
    // First seen just now: new, both dead letters in the last of its 24 hours.
    assert_eq!(groups[0]["new"], true, "{groups}");
    assert_eq!(groups[0]["hourly"][23], 2, "{groups}");
    let table = stdout(&durabus(&db, &["dlq", "groups"]));
    assert!(
        table.contains("NEW") && table.contains("LAST 24H") && table.contains(" new "),
        "{table}"
    );
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
    // A user, three orders, a refused card, a reminder scheduled for later and three shipment
    // steps under an ordering key.
    assert_eq!(s["published"], 9);
    assert_eq!(s["scheduled"], 1);
    assert_eq!(
        s["delivered"], 8,
        "the reminder too, once due, and the shipment steps"
    );
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
    // An application's database whose only waiting events are the announcements of its own
    // dead letter and its failure group (its pager has not run yet): the demo must not deliver
    // them for it.
    let app_db = dir.path().join("app.db");
    assert!(dead_letter_left_announced(&app_db, "invoice.created"));
    let o = durabus(&app_db, &["demo"]);
    assert_one_line_failure(&o, "types the demo does not handle");
    let pending = json(&durabus(
        &app_db,
        &["events", "list", "--status", "pending", "--json"],
    ));
    let mut types: Vec<&str> = pending
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    types.sort_unstable();
    assert_eq!(
        types,
        ["system.dead_letter", "system.failure_group.new"],
        "{pending}"
    );
}

#[test]
fn dlq_show_words_each_status_its_own_way() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("show.db");
    assert!(durabus(&db, &["demo"]).status.success());
    let page = json(&durabus(&db, &["dlq", "list", "--json"]));
    let id = page["items"][0]["event_id"].as_str().unwrap().to_owned();
    let abandoned = durabus(&db, &["dlq", "abandon", &id, "--note", "card is stolen"]);
    assert!(abandoned.status.success(), "{}", stderr(&abandoned));
    let shown = stdout(&durabus(&db, &["dlq", "show", &id]));
    assert!(shown.contains("abandoned      "), "{shown}");
    assert!(shown.contains("note           card is stolen"), "{shown}");
    assert!(
        !shown.contains("resolved"),
        "abandoned is not resolved: {shown}"
    );
    let resolved = durabus(&db, &["dlq", "resolve", &id, "--note", "refunded by hand"]);
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    let shown = stdout(&durabus(&db, &["dlq", "show", &id]));
    assert!(shown.contains("resolved       "), "{shown}");
    assert!(shown.contains("note           refunded by hand"), "{shown}");
    assert!(!shown.contains("abandoned"), "{shown}");
}

#[test]
fn a_retry_from_the_cli_says_what_delivers_it_and_can_be_called_off() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("retry.db");
    assert!(durabus(&db, &["demo"]).status.success());
    let page = json(&durabus(&db, &["dlq", "list", "--json"]));
    let id = page["items"][0]["event_id"].as_str().unwrap().to_owned();
    let retried = durabus(&db, &["dlq", "retry", &id]);
    assert!(retried.status.success(), "{}", stderr(&retried));
    let text = stdout(&retried);
    assert!(
        text.contains("a running worker of the application delivers it"),
        "{text}"
    );
    // No worker runs: the retry waits, and resolving calls it off.
    let resolved = durabus(&db, &["dlq", "resolve", &id, "--note", "refunded by hand"]);
    assert!(resolved.status.success(), "{}", stderr(&resolved));
    let shown = json(&durabus(&db, &["dlq", "show", &id, "--json"]));
    assert_eq!(shown["status"], "resolved", "{shown}");
    let event = json(&durabus(&db, &["events", "show", &id, "--json"]));
    assert_eq!(
        event["event"]["status"], "dlq",
        "back in the dead-letter queue: {event}"
    );
}

//! `durabus periodic` (list, pause, resume and remove what an application registered) and
//! `events publish --dedup`.

use super::*;

/// Registers `name` (every 5 minutes, in Paris) through the library, as an application does.
fn register(db: &Path, name: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = durabus::EventBus::open(db).await.unwrap();
        let p = durabus::Periodic::new(name, "*/5 * * * *", "report.due", &serde_json::json!({}))
            .unwrap()
            .timezone("Europe/Paris");
        bus.periodic(p).await.unwrap();
        bus.shutdown().await.unwrap();
    });
}

#[test]
fn periodic_events_are_listed_paused_resumed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    assert_one_line_failure(&durabus(&db, &["periodic", "list"]), "does not exist");
    assert!(
        enqueue_foreign_event(&db),
        "the application opens the database"
    );
    let empty = durabus(&db, &["periodic", "list"]);
    assert!(
        stdout(&empty).contains("no periodic events"),
        "{}",
        stderr(&empty)
    );
    register(&db, "five-minutes");
    let listed = json(&durabus(&db, &["periodic", "list", "--json"]));
    assert_eq!(listed[0]["name"], "five-minutes");
    assert_eq!(listed[0]["timezone"], "Europe/Paris");
    assert_eq!(listed[0]["paused"], false);
    assert!(listed[0]["next_tick"].is_string(), "{listed}");
    let text = stdout(&durabus(&db, &["periodic", "list"]));
    assert!(
        text.contains("five-minutes") && text.contains("*/5 * * * *"),
        "{text}"
    );

    let paused = json(&durabus(
        &db,
        &["periodic", "pause", "five-minutes", "--json"],
    ));
    assert_eq!(paused["paused"], true);
    assert!(paused["next_tick"].is_null());
    let resumed = stdout(&durabus(&db, &["periodic", "resume", "five-minutes"]));
    assert!(resumed.contains("running; next tick"), "{resumed}");

    assert_one_line_failure(&durabus(&db, &["periodic", "pause", "nope"]), "not found");
    assert_one_line_failure(&durabus(&db, &["periodic", "pause", "bad name"]), "name");
    let removed = durabus(&db, &["periodic", "remove", "five-minutes"]);
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert_eq!(
        json(&durabus(&db, &["periodic", "list", "--json"])),
        serde_json::json!([])
    );
    assert_one_line_failure(
        &durabus(&db, &["periodic", "remove", "five-minutes"]),
        "not found",
    );
}

#[test]
fn a_dedup_key_answers_the_first_id_within_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    assert!(
        enqueue_foreign_event(&db),
        "the application opens the database"
    );
    let keyed = [
        "events",
        "publish",
        "digest.due",
        "{}",
        "--dedup",
        "d:7",
        "--dedup-window",
        "1h",
    ];
    let first = stdout(&durabus(&db, &keyed)).trim().to_owned();
    assert_eq!(first.len(), 36, "{first}");
    let mut again = keyed.to_vec();
    again.push("--json");
    let again = json(&durabus(&db, &again));
    assert_eq!(again["id"], first.as_str());
    assert_eq!(again["duplicate"], true);
    assert!(again["status"].is_null(), "nothing was stored: {again}");
    let listed = json(&durabus(
        &db,
        &["events", "list", "--type", "digest.due", "--json"],
    ));
    assert_eq!(listed.as_array().unwrap().len(), 1);
}

//! The `durabus` binary, run as a user would.

mod arguments;
mod commands;
mod concurrency;
mod demo;
mod pauses;
mod pipes;
mod scheduling;
mod worker;

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

fn assert_one_line_failure(o: &Output, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(o));
    let err = stderr(o);
    assert_eq!(err.trim().lines().count(), 1, "one line expected: {err}");
    assert!(err.contains(needle), "{err}");
    assert!(!err.contains("panicked"), "{err}");
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

//! Crash test: a child process publishes and handles events and is killed with SIGKILL at
//! random points, mid-dispatch; after a restart every acknowledged event must end `done` or
//! `dlq`. Runs without the test harness so the same binary can act as the child.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::{Event, EventBus, EventId, EventStatus, SubscribeOptions};

const CHILD_ENV: &str = "DURABUS_CRASH_CHILD_DB";

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        child(&path);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        println!("crash_kill9_loses_no_acknowledged_event: test");
        return;
    }
    let started = Instant::now();
    parent();
    println!(
        "test crash_kill9_loses_no_acknowledged_event ... ok ({:.1}s)",
        started.elapsed().as_secs_f64()
    );
    println!("crash: 1 passed, 0 failed");
}

/// The child: handles events (one kind blocks forever) and acknowledges each id on stdout.
fn child(path: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = EventBus::builder()
            .sqlite(path)
            .poll_interval(Duration::from_millis(10))
            .build()
            .await
            .unwrap();
        bus.subscribe(
            "crash.*",
            |e: Event| async move {
                if e.event_type == "crash.block" {
                    println!("HANDLING {}", e.id);
                    std::io::stdout().flush().ok();
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(Duration::from_micros(fastrand::u64(0..500))).await;
                Ok(())
            },
            SubscribeOptions::default().name("crash-handler"),
        )
        .await
        .unwrap();
        bus.start().await.unwrap();
        let blocker = bus.enqueue("crash.block", &0).await.unwrap();
        println!("ACK {blocker}");
        let mut i = 0u64;
        loop {
            i += 1;
            let id = if i.is_multiple_of(3) {
                bus.publish("crash.pub", &i).await.unwrap()
            } else {
                bus.enqueue("crash.enq", &i).await.unwrap()
            };
            println!("ACK {id}");
            std::io::stdout().flush().ok();
        }
    });
}

fn run_child_and_kill(path: &std::path::Path, acked: &mut HashSet<EventId>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let kill_after = 20 + fastrand::usize(0..400);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut handling = false;
    let mut acks = 0usize;
    while !(handling && acks >= kill_after) {
        assert!(Instant::now() < deadline, "child made no progress");
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => {
                if let Some(id) = line.strip_prefix("ACK ") {
                    acked.insert(id.parse().unwrap());
                    acks += 1;
                } else if line.starts_with("HANDLING ") {
                    handling = true;
                }
            }
            Err(_) => panic!("child stopped talking"),
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // Acks already written before the kill count too.
    while let Ok(line) = rx.recv_timeout(Duration::from_millis(100)) {
        if let Some(id) = line.strip_prefix("ACK ") {
            acked.insert(id.parse().unwrap());
        }
    }
}

fn parent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let mut acked = HashSet::new();
    for _ in 0..3 {
        run_child_and_kill(&path, &mut acked);
    }
    assert!(
        acked.len() > 60,
        "too few events acknowledged: {}",
        acked.len()
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let bus = EventBus::builder()
            .sqlite(&path)
            .poll_interval(Duration::from_millis(10))
            .build()
            .await
            .unwrap();
        let seen = Arc::new(std::sync::Mutex::new(0usize));
        let s = seen.clone();
        bus.subscribe(
            "crash.*",
            move |_e: Event| {
                let s = s.clone();
                async move {
                    *s.lock().unwrap() += 1;
                    Ok(())
                }
            },
            SubscribeOptions::default().name("crash-handler"),
        )
        .await
        .unwrap();
        let recovered = bus.start().await.unwrap();
        assert!(
            recovered >= 1,
            "the blocked event was processing at the kill"
        );
        let store = bus.store();
        let deadline = Instant::now() + Duration::from_secs(60);
        for id in &acked {
            loop {
                let e = store
                    .get_event(*id)
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("acknowledged event {id} was lost"));
                if matches!(e.status, EventStatus::Done | EventStatus::Dlq) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "event {id} stuck in {}",
                    e.status
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        bus.shutdown().await.unwrap();
    });
}

//! kill -9 loops on SQLite: one child publishing (`publish`, `enqueue`, batches, the outbox)
//! and handling at a steady rate, killed with `SIGKILL` right after it starts, while it opens
//! and recovers, or while it runs, then started again; `PRAGMA integrity_check` after every
//! kill; a final drain with faults off; the checker over it all. And the same without faults:
//! no loss and no duplicate.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, Signal};
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::{Row, Settings};
use crate::target::Target;
use crate::view;

/// When in a life the kill comes.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// 0–5 ms after the process started: before or while the bus opens.
    AtStart,
    /// Right after the store opened, while recovery runs.
    InRecovery,
    /// After 10–300 ms of publishing and handling.
    Running,
}

/// The kill loop.
pub fn kill_loop(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let cycles = s.cycles(25, 200);
    let target = Target::Sqlite(s.dir.join("sqlite-kill.db"));
    let deliveries = s.dir.join("sqlite-kill.deliveries");
    let spec = Spec {
        target: &target,
        role: Role::Both,
        deliveries: &deliveries,
        args: vec!["--publishers".into(), PUBLISHERS.to_string()],
        env: Vec::new(),
        netns: None,
    };
    let mut ledger = Ledger::default();
    let mut killed = HashMap::new();
    let mut violations = Vec::new();
    let mut moments = [0u64; 3];
    let mut recovered = 0;
    for life in 0..cycles as u32 {
        let mut child = Child::start(&spec, life)?;
        let moment = match fastrand::u32(0..100) {
            0..15 => Moment::AtStart,
            15..30 => Moment::InRecovery,
            _ => Moment::Running,
        };
        match moment {
            Moment::AtStart => {
                std::thread::sleep(Duration::from_micros(fastrand::u64(0..5000)));
                moments[0] += 1;
            }
            Moment::InRecovery => {
                child.pump_until(&mut ledger, Duration::from_secs(30), |s| {
                    matches!(s, Signal::Opened)
                })?;
                std::thread::sleep(Duration::from_micros(fastrand::u64(0..3000)));
                moments[1] += 1;
            }
            Moment::Running => {
                let up = child.pump_until(&mut ledger, Duration::from_secs(30), |s| {
                    matches!(s, Signal::Started { .. })
                })?;
                if !up {
                    violations.push(format!("life {life} did not start within 30 s"));
                }
                child.pump_for(&mut ledger, Duration::from_millis(fastrand::u64(10..300)))?;
                moments[2] += 1;
            }
        }
        recovered += child
            .signals
            .iter()
            .map(|s| match s {
                Signal::Started { recovered } => *recovered,
                _ => 0,
            })
            .sum::<u64>();
        let end = child.kill(&mut ledger)?;
        if end != End::Killed {
            violations.push(format!(
                "life {life} ended by itself ({end:?}) before its kill"
            ));
        }
        killed.insert(life, view::processing(&target)?);
        if let Target::Sqlite(path) = &target
            && path.exists()
        {
            let verdict = view::integrity(path)?;
            if verdict != "ok" {
                violations.push(format!("integrity check after life {life}: {verdict}"));
            }
        }
    }
    let kills_took = started.elapsed();
    let drained = drain(
        &target,
        &deliveries,
        cycles as u32,
        &mut ledger,
        &mut violations,
    )?;
    let drain_took = started.elapsed() - kills_took;
    let mut row = finish(
        "sqlite kill -9",
        &target,
        &deliveries,
        ledger,
        killed,
        true,
        violations,
    )?;
    row.cycles = cycles;
    row.faults = cycles;
    row.notes += &format!(
        "; kills: {} at start, {} in recovery, {} running; {recovered} recovered; integrity_check ok after each; kills {:.1} s, drain {:.1} s{}",
        moments[0],
        moments[1],
        moments[2],
        kills_took.as_secs_f64(),
        drain_took.as_secs_f64(),
        if drained { "" } else { "; drain FAILED" }
    );
    row.took = started.elapsed();
    Ok(row)
}

/// The same child, never killed: publishes `events`, drains, exits. No loss, no duplicate.
pub fn no_faults(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let events = s.cycles(20_000, 200_000);
    let target = Target::Sqlite(s.dir.join("sqlite-clean.db"));
    let deliveries = s.dir.join("sqlite-clean.deliveries");
    let spec = Spec {
        target: &target,
        role: Role::Both,
        deliveries: &deliveries,
        args: vec![
            "--publishers".into(),
            PUBLISHERS.to_string(),
            "--pause-us".into(),
            "0".into(),
            "--limit".into(),
            events.to_string(),
        ],
        env: Vec::new(),
        netns: None,
    };
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let child = Child::start(&spec, 0)?;
    let end = child.wait(&mut ledger, Duration::from_secs(600))?;
    if end != End::Exited(0) {
        violations.push(format!("the child ended {end:?}"));
    }
    let mut row = finish(
        "sqlite, no faults",
        &target,
        &deliveries,
        ledger,
        HashMap::new(),
        false,
        violations,
    )?;
    row.cycles = 1;
    row.notes += &format!("; {events} publishes (a batch of 5 is one)");
    row.took = started.elapsed();
    Ok(row)
}

//! Handler faults: handlers that panic, hang past their timeout, block their thread (briefly,
//! and past their timeout), and a poison event whose handler aborts the whole process. The
//! process is restarted after each abort (and killed now and then); the poison event must reach
//! the dead-letter queue after at most `max_retries + 1` crashes, and every other promise hold.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::check::Kind;
use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, read_deliveries};
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::{Row, Settings};
use crate::target::Target;
use crate::view;

/// The suite's retry policy allows this many attempts (`max_retries + 1`).
const ATTEMPTS: usize = 3;

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let lives = s.cycles(10, 60);
    let target = Target::Sqlite(s.dir.join("handlers.db"));
    let deliveries = s.dir.join("handlers.deliveries");
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut killed = HashMap::new();
    let (mut aborts, mut kills) = (0u64, 0u64);
    for life in 0..lives as u32 {
        let mut args = vec![
            "--publishers".into(),
            PUBLISHERS.to_string(),
            "--mix".into(),
            "handlers".into(),
        ];
        if life == 0 {
            args.push("--poison".into());
        }
        let spec = Spec {
            target: &target,
            role: Role::Both,
            deliveries: &deliveries,
            args,
            env: Vec::new(),
            netns: None,
        };
        let mut child = Child::start(&spec, life)?;
        child.pump_for(&mut ledger, Duration::from_millis(fastrand::u64(300..1500)))?;
        match child.kill(&mut ledger)? {
            End::Aborted => aborts += 1,
            End::Killed => kills += 1,
            End::Exited(code) => violations.push(format!("life {life} exited with {code}")),
        }
        killed.insert(life, view::processing(&target)?);
    }
    drain(
        &target,
        &deliveries,
        lives as u32,
        &mut ledger,
        &mut violations,
    )?;
    // The poison event: dead-lettered, after at most `max_retries + 1` runs (each a crash).
    let poison: Vec<_> = ledger
        .intended
        .iter()
        .filter(|(_, k)| **k == Kind::Poison)
        .map(|(id, _)| *id)
        .collect();
    let runs = read_deliveries(&deliveries)?
        .iter()
        .filter(|d| poison.contains(&d.id))
        .count();
    if poison.len() != 1 {
        violations.push(format!("{} poison events announced, not 1", poison.len()));
    }
    if runs == 0 || runs > ATTEMPTS {
        violations.push(format!(
            "the poison event ran {runs} times: expected 1 to {ATTEMPTS} (max_retries + 1)"
        ));
    }
    let mut row = finish(
        "sqlite handler faults",
        &target,
        &deliveries,
        ledger,
        killed,
        true,
        violations,
    )?;
    row.cycles = lives;
    row.faults = aborts + kills;
    row.notes += &format!(
        "; the poison event crashed the process {runs} times, then was dead-lettered; {aborts} aborts, {kills} kills; handlers that panic, hang, block the thread 20 ms and 300 ms (timeout 200 ms)"
    );
    row.took = started.elapsed();
    Ok(row)
}

//! What every scenario ends with: a drain with faults off, then the checker over the ledger,
//! the delivery log and the store.

use std::collections::{HashMap, HashSet};

use durabus::EventId;
use std::time::Duration;

use crate::check::{self, History};
use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, read_deliveries};
use crate::scenario::Row;
use crate::target::Target;
use crate::view;

/// Publishing tasks per publishing child.
pub const PUBLISHERS: usize = 4;

/// Starts a drain child and waits for it: true if it drained and exited cleanly.
pub fn drain(
    target: &Target,
    deliveries: &std::path::Path,
    life: u32,
    ledger: &mut Ledger,
    violations: &mut Vec<String>,
) -> anyhow::Result<bool> {
    let spec = Spec {
        target,
        role: Role::Drain,
        deliveries,
        args: Vec::new(),
        env: Vec::new(),
        netns: None,
    };
    let child = Child::start(&spec, life)?;
    let end = child.wait(ledger, Duration::from_secs(600))?;
    if end != End::Exited(0) {
        violations.push(format!("the drain ended {end:?}"));
        return Ok(false);
    }
    Ok(true)
}

/// Reads the store and the delivery log and runs the checker.
pub fn finish(
    name: &str,
    target: &Target,
    deliveries: &std::path::Path,
    ledger: Ledger,
    killed: HashMap<u32, HashSet<EventId>>,
    faults: bool,
    mut violations: Vec<String>,
) -> anyhow::Result<Row> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let stored = rt.block_on(view::stored(target))?;
    if let Target::Sqlite(path) = target {
        let verdict = view::integrity(path)?;
        if verdict != "ok" {
            violations.push(format!("final integrity check: {verdict}"));
        }
    }
    let history = History {
        intended: ledger.intended,
        acked: ledger.acked,
        deliveries: read_deliveries(deliveries)?,
        stored,
        killed,
    };
    let report = check::check(&history, faults);
    violations.extend(report.violations.iter().cloned());
    Ok(Row {
        scenario: name.to_owned(),
        acknowledged: report.acknowledged,
        lost: report.lost,
        duplicates: report.duplicates,
        notes: format!(
            "{} done, {} dead-lettered ({} by crashes)",
            report.done, report.dead, report.crash_exhausted
        ),
        violations,
        ..Row::default()
    })
}

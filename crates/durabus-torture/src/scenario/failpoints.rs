//! Crash points: each fail point of the library (see `durabus::fault::POINTS`) armed in turn,
//! with a probability per hit, in a child that publishes, handles, dead-letters and
//! bulk-retries dead letters; the child aborts (`SIGABRT`) when the point fires, or is killed
//! after a few seconds if it did not. Then a drain with faults off and the checker. On SQLite
//! (with `integrity_check` after every life) and on PostgreSQL.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, Signal};
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::{Row, Settings};
use crate::target::Target;
use crate::view;

/// The probability of an abort at each hit of a point: points on every write fire rarely,
/// points on rare paths often, so each fires within a life or two.
fn probability(point: &str) -> f64 {
    match point {
        "insert.before_commit" | "publish.before_reply" => 0.01,
        "handler.before_record" => 0.02,
        "retry.schedule" => 0.02,
        "dlq.move" => 0.05,
        _ => 0.5,
    }
}

/// The scenario on SQLite.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let target = Target::Sqlite(s.dir.join("failpoints.db"));
    on(s, &target, "sqlite fail points")
}

/// The scenario on PostgreSQL.
pub fn postgres(s: &Settings) -> anyhow::Result<Row> {
    let (_schema, target) = crate::scenario::pg_kill::Schema::new(s, "failpoints")?;
    on(s, &target, "postgres fail points")
}

fn on(s: &Settings, target: &Target, name: &str) -> anyhow::Result<Row> {
    let started = Instant::now();
    let per_point = s.cycles(4, 30);
    let deliveries = s
        .dir
        .join(format!("failpoints-{}.deliveries", fastrand::u32(..)));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut killed = HashMap::new();
    let mut fired: Vec<(&str, u64)> = Vec::new();
    let mut life = 0u32;
    for (point, _) in durabus::fault::POINTS {
        let mut n = 0;
        for _ in 0..per_point {
            let spec = Spec {
                target,
                role: Role::Both,
                deliveries: &deliveries,
                args: vec![
                    "--publishers".into(),
                    PUBLISHERS.to_string(),
                    "--bulk-every-ms".into(),
                    "200".into(),
                ],
                env: vec![(
                    durabus::fault::ENV.to_owned(),
                    format!("{point}={}", probability(point)),
                )],
                netns: None,
            };
            let mut child = Child::start(&spec, life)?;
            // Up to 3 s for the point to fire; the child aborts itself when it does.
            child.pump_until(&mut ledger, Duration::from_secs(3), |s| {
                matches!(s, Signal::Drained)
            })?;
            match child.kill(&mut ledger)? {
                End::Aborted => n += 1,
                End::Killed => {}
                End::Exited(code) => {
                    violations.push(format!("life {life} ({point}) exited with {code}"))
                }
            }
            killed.insert(life, view::processing(target)?);
            if let Target::Sqlite(path) = target {
                let verdict = view::integrity(path)?;
                if verdict != "ok" {
                    violations.push(format!(
                        "integrity check after life {life} ({point}): {verdict}"
                    ));
                }
            }
            life += 1;
        }
        if n == 0 {
            violations.push(format!(
                "fail point {point} never fired in {per_point} lives"
            ));
        }
        fired.push((point, n));
    }
    drain(target, &deliveries, life, &mut ledger, &mut violations)?;
    let mut row = finish(name, target, &deliveries, ledger, killed, true, violations)?;
    row.cycles = u64::from(life);
    row.faults = fired.iter().map(|(_, n)| n).sum();
    row.notes += &format!(
        "; aborts per point: {}",
        fired
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    row.took = started.elapsed();
    Ok(row)
}

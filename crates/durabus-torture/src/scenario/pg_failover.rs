//! PostgreSQL failover: a primary and a streaming standby of its own (see `cluster`), the bus
//! given both in one URL (`host1,host2` with `target_session_attrs=read-write`). Under load
//! (3 workers and a publisher) the primary is killed the way a host dies and, half a second
//! later, the standby is promoted, as a cluster manager would. Expected, with synchronous
//! replication: the bus moves to the new primary by itself, every acknowledged event is
//! there, nothing runs twice beyond what was in flight at the failover, and publishing
//! resumes within a stated time.
//!
//! With asynchronous replication the same run measures what is not guaranteed: acknowledged
//! events (and completions) the standby had not received are lost. `pg-failover-async-lag`
//! stops the standby's WAL receiver for a second before the kill and kills it with the
//! primary, so the standby misses that second of acknowledged writes: the checker's self-test.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::child::Role;
use crate::ledger::Ledger;
use crate::scenario::cluster::{Cluster, Replication};
use crate::scenario::common::{drain, finish};
use crate::scenario::pg_kill::{WORKERS, pump_all, spec, up};
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// How long after the kill the standby is promoted (a cluster manager's detection).
const PROMOTE_AFTER: Duration = Duration::from_millis(500);

/// How long the self-test holds the standby's WAL receiver before the kill.
const LAG: Duration = Duration::from_secs(1);

/// Events acknowledged after the promotion that show publishing resumed.
const RESUMED_AFTER: usize = 50;

/// Which run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Synchronous replication: nothing acknowledged may be lost.
    Synchronous,
    /// Asynchronous replication: the loss is measured, not failed.
    Asynchronous,
    /// Asynchronous, the standby held back before the kill: passes if a loss is caught.
    Lagging,
}

/// Synchronous replication: the promise.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    failover(s, Mode::Synchronous)
}

/// Asynchronous replication: the measurement.
pub fn asynchronous(s: &Settings) -> anyhow::Result<Row> {
    failover(s, Mode::Asynchronous)
}

/// The self-test.
pub fn lagging(s: &Settings) -> anyhow::Result<Row> {
    failover(s, Mode::Lagging)
}

/// What one failover measured.
struct Cycle {
    /// From the kill to publishing resumed.
    resumed: Option<Duration>,
    /// From the promotion to publishing resumed.
    after_promotion: Option<Duration>,
    /// Publishes refused between the kill and the resumption.
    refused: usize,
    /// Events a handler had run whose claim the standby did not have.
    claims_lost: usize,
}

fn failover(s: &Settings, mode: Mode) -> anyhow::Result<Row> {
    let started = Instant::now();
    let name = match mode {
        Mode::Synchronous => "postgres, failover (synchronous standby)",
        Mode::Asynchronous => "postgres, failover (asynchronous standby)",
        Mode::Lagging => "self-test: failover to a lagging asynchronous standby",
    };
    let replication = match mode {
        Mode::Synchronous => Replication::Synchronous,
        Mode::Asynchronous | Mode::Lagging => Replication::Asynchronous,
    };
    let cycles = s.cycles(1, 3);
    let mut total = Row {
        scenario: name.into(),
        ..Row::default()
    };
    let mut notes = Vec::new();
    let mut resumed = Duration::ZERO;
    for cycle in 0..cycles {
        let cluster = match Cluster::new(replication, s.keep)? {
            Ok(c) => c,
            Err(why) => {
                total.notes = format!("NOT RUN ({why})");
                total.took = started.elapsed();
                return Ok(total);
            }
        };
        let (row, c) = one(s, &cluster, mode, cycle)?;
        total.acknowledged += row.acknowledged;
        total.lost += row.lost;
        total.duplicates += row.duplicates;
        total.violations.extend(row.violations);
        total.cycles += 1;
        total.faults += 1;
        if let Some(t) = c.resumed {
            resumed = resumed.max(t);
        }
        notes.push(format!(
            "failover {cycle}: {}; publishing resumed {} after the kill ({} after the promotion), {} publishes refused meanwhile, {} events run whose claim the standby lacked",
            row.notes,
            c.resumed
                .map_or("—".to_owned(), |t| format!("{:.2} s", t.as_secs_f64())),
            c.after_promotion
                .map_or("—".to_owned(), |t| format!("{:.2} s", t.as_secs_f64())),
            c.refused,
            c.claims_lost
        ));
    }
    total.recovered = Some(resumed);
    total.notes = notes.join("; ");
    total.notes += &format!(
        "; {WORKERS} workers + 1 publisher on a two-server URL, primary killed (SIGKILL to every process of it), standby promoted {} ms later",
        PROMOTE_AFTER.as_millis()
    );
    match mode {
        Mode::Synchronous => {}
        Mode::Asynchronous => {
            // Not a promise: what asynchronous replication loses is the figure.
            let (loss, other): (Vec<String>, Vec<String>) =
                total.violations.drain(..).partition(|v| {
                    v.starts_with("acknowledged event ")
                        || v.contains("handled again")
                        || v.starts_with("… and ")
                });
            total.violations = other;
            total.notes += &format!(
                "; asynchronous, measured not judged: {} acknowledged events lost, {} runs again ({} lines of the checker set aside)",
                total.lost,
                total.duplicates,
                loss.len()
            );
        }
        Mode::Lagging => {
            total.violations.clear();
            if total.lost == 0 {
                total.violations.push(
                    "the checker found no loss though the standby was a second behind when the primary died: it cannot see a lost acknowledgement".into(),
                );
            } else {
                total.notes += &format!(
                    "; self-test: the standby's WAL receiver stopped {} ms before the kill and killed with the primary; the checker caught {} acknowledged events lost",
                    LAG.as_millis(),
                    total.lost
                );
                total.lost = 0;
            }
        }
    }
    total.took = started.elapsed();
    Ok(total)
}

/// One failover on a fresh pair.
fn one(s: &Settings, cluster: &Cluster, mode: Mode, cycle: u64) -> anyhow::Result<(Row, Cycle)> {
    let target = Target::Postgres {
        url: cluster.url(),
        schema: "torture_failover".into(),
    };
    let deliveries = s.dir.join(format!(
        "pg-failover-{cycle}-{}.deliveries",
        fastrand::u32(..)
    ));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut in_flight: HashMap<u32, HashSet<durabus::EventId>> = HashMap::new();
    let mut life = 0;
    let worker = spec(&target, Role::Worker, &deliveries);
    let publisher = spec(&target, Role::Publisher, &deliveries);
    let mut children = vec![up(&publisher, &mut life, &mut ledger, &mut violations)?];
    for _ in 0..WORKERS {
        children.push(up(&worker, &mut life, &mut ledger, &mut violations)?);
    }
    let load = if s.long { 20 } else { 3 };
    pump_all(&mut children, &mut ledger, Duration::from_secs(load))?;
    // What runs across the failover may run again (a lease that could not be renewed).
    let mut held = crate::view::processing(&target)?;
    if mode == Mode::Lagging {
        cluster.signal_wal_receiver("STOP")?;
        pump_all(&mut children, &mut ledger, LAG)?;
    }
    let refused_before = refused(&children);
    cluster.kill_primary()?;
    let killed_at = Instant::now();
    if mode == Mode::Lagging {
        cluster.signal_wal_receiver("KILL")?;
    }
    pump_all(&mut children, &mut ledger, PROMOTE_AFTER)?;
    // Everything in flight when the primary died: what the standby has `processing` (no
    // worker can claim or finish anything there before it is promoted), and what a handler
    // ran that the standby has unfinished. A claim commits without waiting for its flush
    // (nor, so, for the standby): a claim of the last moments may be missing there, its
    // event still pending, and the outcome the worker then failed to write is lost with the
    // primary; the event runs again after the promotion (at least once).
    cluster.settle_standby()?;
    let standby = Target::Postgres {
        url: cluster.standby_url(),
        schema: "torture_failover".into(),
    };
    let processing = crate::view::processing(&standby)?;
    let ran = ran_ok(&deliveries)?;
    let unclaimed: HashSet<durabus::EventId> = crate::view::unfinished(&standby)?
        .into_iter()
        .filter(|id| ran.contains(id) && !processing.contains(id))
        .collect();
    let claims_lost = unclaimed.len();
    held.extend(processing);
    held.extend(unclaimed);
    cluster.promote()?;
    let promoted_at = Instant::now();
    let acked_at_promotion = ledger.acked.len();
    let mut done = None;
    while promoted_at.elapsed() < Duration::from_secs(60) {
        pump_all(&mut children, &mut ledger, Duration::from_millis(20))?;
        if ledger.acked.len() >= acked_at_promotion + RESUMED_AFTER {
            done = Some(Instant::now());
            break;
        }
    }
    let c = Cycle {
        resumed: done.map(|t| t - killed_at),
        after_promotion: done.map(|t| t - promoted_at),
        refused: refused(&children) - refused_before,
        claims_lost,
    };
    if c.resumed.is_none() {
        violations.push("publishing did not resume within 60 s of the promotion".into());
    }
    held.extend(crate::view::processing(&target)?);
    pump_all(&mut children, &mut ledger, Duration::from_secs(load))?;
    for child in children {
        let (who, pid) = (child.life, child.pid());
        child.kill(&mut ledger)?;
        let entry = in_flight.entry(who).or_default();
        entry.extend(held.iter().copied());
        entry.extend(crate::view::held_by_pid(&target, pid)?);
    }
    let drained = drain(&target, &deliveries, life, &mut ledger, &mut violations)?;
    let mut row = finish(
        "failover",
        &target,
        &deliveries,
        ledger,
        in_flight,
        true,
        violations,
    )?;
    if !drained {
        row.notes += ", drain FAILED";
    }
    Ok((row, c))
}

/// Publishes refused so far, by every child.
fn refused(children: &[crate::fleet::Child]) -> usize {
    children
        .iter()
        .flat_map(|c| &c.signals)
        .filter(|s| matches!(s, crate::ledger::Signal::Refused(_)))
        .count()
}

/// The events a handler has run successfully so far, from the delivery log's complete lines
/// (the children are still writing it).
fn ran_ok(deliveries: &std::path::Path) -> anyhow::Result<HashSet<durabus::EventId>> {
    let text = match std::fs::read_to_string(deliveries) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashSet::new()),
        Err(e) => return Err(e.into()),
    };
    let complete = text.rsplit_once('\n').map_or("", |(done, _)| done);
    Ok(complete
        .lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            let (_life, id, ok) = (parts.next()?, parts.next()?, parts.next()?);
            (ok == "ok").then(|| id.parse().ok()).flatten()
        })
        .collect())
}

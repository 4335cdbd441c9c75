//! Handlers outliving their lease on PostgreSQL: three workers whose handlers take a while and
//! a publisher; now and then a worker is frozen (`SIGSTOP`) for longer than its lease, so the
//! others take its events over, then thawed (`SIGCONT`): its handlers finish after their lease
//! and its late outcomes must be refused (fencing). The stalled worker's events may run twice,
//! nothing else may, and nothing acknowledged may be lost.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child::Role;
use crate::fleet::Child;
use crate::ledger::Ledger;
use crate::scenario::common::{drain, finish};
use crate::scenario::pg_kill::{LEASE_MS, Schema, WORKERS, pump_all, spec, up};
use crate::scenario::{Row, Settings};

/// How long a handler of a succeeding event takes, in milliseconds.
const HANDLER_MS: &str = "40";

/// Sends `signal` (`STOP` or `CONT`) to `child`.
fn signal(child: &Child, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &child.pid().to_string()])
        .status()
        .context("running kill")?;
    anyhow::ensure!(status.success(), "kill -{signal} failed: {status}");
    Ok(())
}

/// The running fleet, the ledger, and what each stalled worker held.
struct Fleet<'a> {
    children: &'a mut Vec<Child>,
    ledger: &'a mut Ledger,
    stalled: &'a mut HashMap<u32, HashSet<durabus::EventId>>,
    target: &'a crate::target::Target,
}

impl Fleet<'_> {
    /// Sends `signal` to child `victim`, lets 200 ms pass (the others running), then records
    /// the events held `processing` as in flight for that worker.
    fn signal_and_record(&mut self, victim: usize, what: &str) -> anyhow::Result<()> {
        signal(&self.children[victim], what)?;
        let life = self.children[victim].life;
        if std::env::var_os("TORTURE_VERBOSE").is_some() {
            let now = durabus::Timestamp::now().as_millis();
            eprintln!("SIG{what} to life {life} at {now}");
        }
        pump_all(
            &mut self.children[..],
            self.ledger,
            Duration::from_millis(200),
        )?;
        let held = crate::view::processing(self.target)?;
        self.stalled.entry(life).or_default().extend(held);
        Ok(())
    }
}

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let stalls = s.cycles(6, 40);
    let (_schema, target) = Schema::new(s, "stall")?;
    let deliveries = s
        .dir
        .join(format!("pg-stall-{}.deliveries", fastrand::u32(..)));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut stalled: HashMap<u32, HashSet<durabus::EventId>> = HashMap::new();
    let mut life = 0;
    let mut worker = spec(&target, Role::Worker, &deliveries);
    worker
        .args
        .extend(["--handler-ms".into(), HANDLER_MS.into()]);
    let publisher = spec(&target, Role::Publisher, &deliveries);
    let mut children = vec![up(&publisher, &mut life, &mut ledger, &mut violations)?];
    for _ in 0..WORKERS {
        children.push(up(&worker, &mut life, &mut ledger, &mut violations)?);
    }
    let lease = Duration::from_millis(LEASE_MS.parse()?);
    for _ in 0..stalls {
        pump_all(
            &mut children,
            &mut ledger,
            Duration::from_millis(fastrand::u64(200..600)),
        )?;
        let victim = fastrand::usize(1..children.len());
        // What the frozen worker holds stays `processing` until its lease runs out: that is
        // what may run twice. A statement it sent just before it froze (a claim) may still be
        // running on the server, so `signal_and_record` looks a moment later; its leases have
        // at least two thirds of their time left (renewed every third), so none has been taken
        // over yet.
        let mut fleet = Fleet {
            children: &mut children,
            ledger: &mut ledger,
            stalled: &mut stalled,
            target: &target,
        };
        fleet.signal_and_record(victim, "STOP")?;
        // Frozen for longer than a lease: the others take its events over meanwhile.
        let freeze = lease + Duration::from_millis(fastrand::u64(100..1000));
        pump_all(&mut fleet.children[..], fleet.ledger, freeze)?;
        // A claim the worker had started before it froze (waiting for a connection, say) runs
        // after the thaw with the time it took before the freeze (unless it waited a quarter
        // of the lease, when the store counts the lease from when it runs): such events were
        // in flight across the fault too.
        fleet.signal_and_record(victim, "CONT")?;
    }
    // Let the thawed workers finish their late runs, then stop everyone and drain.
    pump_all(&mut children, &mut ledger, Duration::from_millis(500))?;
    for child in children {
        let who = child.life;
        child.kill(&mut ledger)?;
        stalled
            .entry(who)
            .or_default()
            .extend(crate::view::processing(&target)?);
    }
    let drained = drain(&target, &deliveries, life, &mut ledger, &mut violations)?;
    let mut row = finish(
        "postgres, handlers outliving their lease",
        &target,
        &deliveries,
        ledger,
        stalled,
        true,
        violations,
    )?;
    row.cycles = stalls;
    row.faults = stalls;
    row.notes += &format!(
        "; {WORKERS} workers + 1 publisher, lease {LEASE_MS} ms, handlers {HANDLER_MS} ms; each stall freezes a worker 1.3–2.2 s{}",
        if drained { "" } else { "; drain FAILED" }
    );
    row.took = started.elapsed();
    Ok(row)
}

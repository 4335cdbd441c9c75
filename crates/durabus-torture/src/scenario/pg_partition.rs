//! A network partition on PostgreSQL: three worker processes, each on a host of its own (a
//! network namespace, see [`super::netns`]), reach the server over a link; a publisher runs
//! beside the server. The links are degraded (latency, stalls) and everything must go on;
//! then one worker's link is cut for three leases while its handlers run: its leases run
//! out, the others take its events over, its late outcomes are refused (fencing, counted
//! from its log), and when the link returns it goes on by itself. Nothing lost; only what
//! the cut-off worker held may run twice. Needs root (namespaces); without it NOT RUN.

use std::collections::{HashMap, HashSet};
use std::net::ToSocketAddrs;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child::Role;
use crate::fleet::Child;
use crate::ledger::{Ledger, read_deliveries};
use crate::scenario::common::{drain, finish};
use crate::scenario::netns::Host;
use crate::scenario::pg_kill::{LEASE_MS, Schema, WORKERS, pump_all, spec, up};
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// How long a handler of a succeeding event takes, in milliseconds.
const HANDLER_MS: &str = "30";

/// Latency the degraded links add, each way.
const DELAY_MS: u64 = 20;

/// Of every thousand chunks relayed on a degraded link, how many stall 200 ms.
const STALLS_PER_MILLE: u64 = 20;

/// How long a cut lasts at least: three leases.
const CUT: Duration = Duration::from_millis(3_000);

/// How long the others may take to take over every event the cut-off worker held.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(30);

/// Successful runs of `life` in the delivery log so far.
fn runs_of(deliveries: &std::path::Path, life: u32) -> anyhow::Result<usize> {
    Ok(read_deliveries(deliveries)?
        .iter()
        .filter(|d| d.life == life)
        .count())
}

/// Pumps `children` until `done` holds or `limit` passes; returns how long it took.
fn until(
    children: &mut [Child],
    ledger: &mut Ledger,
    limit: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<Option<Duration>> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done()? {
            return Ok(Some(start.elapsed()));
        }
        pump_all(children, ledger, Duration::from_millis(20))?;
    }
    Ok(None)
}

/// Says `what` happened now, with `TORTURE_VERBOSE` set.
fn verbose(what: &str) {
    if std::env::var_os("TORTURE_VERBOSE").is_some() {
        eprintln!("{} {what}", durabus::Timestamp::now().as_millis());
    }
}

/// Pumps `children` for `time`, adding what each of `pids` (life, process id) holds to
/// `in_flight` every 50 ms: what a worker holds while its link misbehaves may run twice.
fn watch(
    children: &mut [Child],
    ledger: &mut Ledger,
    target: &Target,
    pids: &[(u32, u32)],
    in_flight: &mut HashMap<u32, HashSet<durabus::EventId>>,
    time: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while start.elapsed() < time {
        for (life, pid) in pids {
            in_flight
                .entry(*life)
                .or_default()
                .extend(crate::view::held_by_pid(target, *pid)?);
        }
        pump_all(children, ledger, Duration::from_millis(50))?;
    }
    Ok(())
}

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    partition(s, false)
}

/// The broken variant: the workers run on pools of their own, whose sessions lack the
/// server-side limits for a vanished client, so a cut-off worker's open transaction keeps
/// its events locked from the others (who skip locked rows) for as long as the server keeps
/// the dead connection. Passes only if the checker reports it.
pub fn own_pools(s: &Settings) -> anyhow::Result<Row> {
    let mut row = partition(s, true)?;
    let caught = row
        .violations
        .iter()
        .filter(|v| v.contains("not all taken over"))
        .count();
    if caught == 0 {
        row.violations.insert(
            0,
            "self-test: with the workers on their own pools, every cut-off worker's events were still taken over: the scenario cannot tell".into(),
        );
    } else {
        row.notes += &format!(
            "; self-test: caught in {caught} of {} cuts (events left locked by the cut-off worker's open transaction)",
            row.cycles
        );
        row.violations.clear();
    }
    Ok(row)
}

fn partition(s: &Settings, own_pools: bool) -> anyhow::Result<Row> {
    let started = Instant::now();
    let name = if own_pools {
        "postgres, network partition, workers on their own pools (self-test)"
    } else {
        "postgres, network partition"
    };
    let url = s.pg_url.clone().context("no PostgreSQL URL")?;
    let parsed = url::Url::parse(&url).context("the PostgreSQL URL")?;
    let server = (
        parsed.host_str().context("a host in the PostgreSQL URL")?,
        parsed.port().unwrap_or(5432),
    )
        .to_socket_addrs()?
        .next()
        .context("resolving the PostgreSQL host")?;
    let tag = fastrand::u16(..);
    let mut hosts = Vec::new();
    for n in 0..WORKERS {
        match Host::new(tag, u8::try_from(n)?, server) {
            Ok(h) => hosts.push(h),
            Err(e) => {
                return Ok(Row {
                    scenario: name.into(),
                    notes: format!("NOT RUN (network namespaces need root: {e:#})"),
                    took: started.elapsed(),
                    ..Row::default()
                });
            }
        }
    }
    // The self-test cuts until it is caught, at most 6 times.
    let cuts = if own_pools { 6 } else { s.cycles(2, 10) };
    // The self-test's takeovers are not coming: it waits less.
    let takeover_limit = if own_pools {
        Duration::from_secs(8)
    } else {
        TAKEOVER_LIMIT
    };
    let (_schema, target) = Schema::new(s, "part")?;
    let Target::Postgres { schema, .. } = &target else {
        anyhow::bail!("a PostgreSQL target");
    };
    let deliveries = s
        .dir
        .join(format!("pg-partition-{}.deliveries", fastrand::u32(..)));
    // Each worker reaches the server through its host's relay.
    let remote: Vec<Target> = hosts
        .iter()
        .map(|h| {
            let mut u = parsed.clone();
            u.set_host(Some(&h.relay.ip().to_string()))
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            u.set_port(Some(h.relay.port()))
                .map_err(|()| anyhow::anyhow!("no port in this URL"))?;
            Ok(Target::Postgres {
                url: u.to_string(),
                schema: schema.clone(),
            })
        })
        .collect::<anyhow::Result<_>>()?;
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let mut in_flight: HashMap<u32, HashSet<durabus::EventId>> = HashMap::new();
    let mut life = 0;
    let publisher = spec(&target, Role::Publisher, &deliveries);
    let mut children = vec![up(&publisher, &mut life, &mut ledger, &mut violations)?];
    let workers: Vec<_> = hosts
        .iter()
        .zip(&remote)
        .map(|(h, t)| {
            let mut w = spec(t, Role::Worker, &deliveries);
            w.args.extend(["--handler-ms".into(), HANDLER_MS.into()]);
            w.netns = Some(h.ns.clone());
            if own_pools {
                w.args.push("--own-pool".into());
            }
            w
        })
        .collect();
    for w in &workers {
        children.push(up(w, &mut life, &mut ledger, &mut violations)?);
    }
    pump_all(&mut children, &mut ledger, Duration::from_secs(2))?;

    // Degraded links: slower, everything goes on.
    verbose("links degraded");
    for h in &hosts {
        h.degrade.delay_ms.store(DELAY_MS, Ordering::Relaxed);
        h.degrade
            .stall_per_mille
            .store(STALLS_PER_MILLE, Ordering::Relaxed);
    }
    let worker_lives: Vec<u32> = children[1..].iter().map(|c| c.life).collect();
    let before: Vec<usize> = worker_lives
        .iter()
        .map(|l| runs_of(&deliveries, *l))
        .collect::<anyhow::Result<_>>()?;
    let acked = ledger.acked.len();
    // A renewal held up by stalls may come after its lease ran out: what each worker holds
    // while its link is degraded may run twice (at least once).
    let pids: Vec<(u32, u32)> = children[1..].iter().map(|c| (c.life, c.pid())).collect();
    watch(
        &mut children,
        &mut ledger,
        &target,
        &pids,
        &mut in_flight,
        Duration::from_secs(4),
    )?;
    for (l, b) in worker_lives.iter().zip(&before) {
        let after = runs_of(&deliveries, *l)?;
        if after <= *b {
            violations.push(format!(
                "worker life {l} handled nothing over a link with {DELAY_MS} ms latency and stalls"
            ));
        }
    }
    if ledger.acked.len() <= acked {
        violations.push("nothing was published while the links were degraded".into());
    }
    notes.push(format!(
        "degraded links ({DELAY_MS} ms each way, {STALLS_PER_MILLE}‰ of chunks stalled 200 ms): {} more handled in 4 s",
        worker_lives
            .iter()
            .zip(&before)
            .map(|(l, b)| Ok(runs_of(&deliveries, *l)? - b))
            .sum::<anyhow::Result<usize>>()?
    ));
    verbose("links restored");
    for h in &hosts {
        h.degrade.delay_ms.store(0, Ordering::Relaxed);
        h.degrade.stall_per_mille.store(0, Ordering::Relaxed);
    }

    // Cuts: one worker's link down for three leases while it runs handlers.
    let mut recovered = Duration::ZERO;
    let mut fenced_total = 0;
    let mut cuts_made = 0;
    for cut in 0..cuts {
        pump_all(&mut children, &mut ledger, Duration::from_millis(500))?;
        let victim = 1 + cut as usize % WORKERS;
        let (who, pid) = (children[victim].life, children[victim].pid());
        let fenced_before = children[victim].fenced.load(Ordering::Relaxed);
        let host = &hosts[victim - 1];
        // Slow before it is cut: each of its transactions takes several round trips, so the
        // cut finds it inside one (whose row locks the server keeps until it ends the session).
        host.degrade.delay_ms.store(DELAY_MS, Ordering::Relaxed);
        pump_all(&mut children, &mut ledger, Duration::from_millis(300))?;
        // What it holds at any moment of the cut may run twice: a claim it sent as the link
        // went down leases events to it that it never hears of.
        let mut held = crate::view::held_by_pid(&target, pid)?;
        host.link(false)?;
        verbose(&format!("cut {cut}: life {who} cut off"));
        let cut_at = Instant::now();
        held.extend(crate::view::held_by_pid(&target, pid)?);
        let held_at_cut = held.len();
        // The others take its events over once its leases have run out (a worker may hold
        // many: claimed ahead, and finished but not yet recorded over the slow link). The link
        // stays down for at least three leases, and until they are all taken over.
        let taken = until(&mut children, &mut ledger, takeover_limit, || {
            let now_held = crate::view::held_by_pid(&target, pid)?;
            let empty = now_held.is_empty();
            held.extend(now_held);
            Ok(empty)
        })?;
        if let Some(left) = CUT.checked_sub(cut_at.elapsed()) {
            pump_all(&mut children, &mut ledger, left)?;
        }
        match taken {
            Some(t) => recovered = recovered.max(t),
            None => violations.push(format!(
                "cut {cut}: the cut-off worker's {held_at_cut} events were not all taken over within {} s (leases {LEASE_MS} ms)",
                takeover_limit.as_secs()
            )),
        }
        held.extend(crate::view::held_by_pid(&target, pid)?);
        host.degrade.delay_ms.store(0, Ordering::Relaxed);
        host.link(true)?;
        verbose(&format!("cut {cut}: life {who} back"));
        // It goes on by itself: handles events again.
        let runs = runs_of(&deliveries, who)?;
        let back = until(&mut children, &mut ledger, Duration::from_secs(30), || {
            held.extend(crate::view::held_by_pid(&target, pid)?);
            Ok(runs_of(&deliveries, who)? > runs)
        })?;
        in_flight.entry(who).or_default().extend(held);
        // Its connections come back one by one (TCP retransmits after a back-off of its own):
        // meanwhile a renewal may still be late.
        watch(
            &mut children,
            &mut ledger,
            &target,
            &[(who, pid)],
            &mut in_flight,
            Duration::from_secs(3),
        )?;
        let fenced = children[victim].fenced.load(Ordering::Relaxed) - fenced_before;
        fenced_total += fenced;
        if back.is_none() {
            violations.push(format!(
                "cut {cut}: worker life {who} handled nothing within 30 s of its link returning"
            ));
        }
        if own_pools && taken.is_none() {
            cuts_made = cut + 1;
            notes.push(format!(
                "cut {cut}: life {who}'s {held_at_cut} events not taken over"
            ));
            break;
        }
        cuts_made = cut + 1;
        notes.push(format!(
            "cut {cut}: life {who} cut off holding {held_at_cut} events, taken over in {}, {fenced} late outcomes refused, handling again {} after the link returned",
            taken.map_or("—".into(), |t| format!("{:.1} s", t.as_secs_f64())),
            back.map_or("—".into(), |t| format!("{:.1} s", t.as_secs_f64()))
        ));
    }
    if fenced_total == 0 && !own_pools {
        violations
            .push("no late outcome of a cut-off worker was refused (fencing) in any cut".into());
    }
    for child in children {
        let (who, pid) = (child.life, child.pid());
        child.kill(&mut ledger)?;
        in_flight
            .entry(who)
            .or_default()
            .extend(crate::view::held_by_pid(&target, pid)?);
    }
    let drained = drain(&target, &deliveries, life, &mut ledger, &mut violations)?;
    let mut row = finish(
        name,
        &target,
        &deliveries,
        ledger,
        in_flight,
        true,
        violations,
    )?;
    row.cycles = cuts_made;
    row.faults = cuts_made + 1;
    row.recovered = Some(recovered);
    for n in notes {
        row.notes += &format!("; {n}");
    }
    row.notes += &format!(
        "; {WORKERS} workers in network namespaces + 1 publisher, lease {LEASE_MS} ms, handlers {HANDLER_MS} ms, cuts of at least {} s (until every held event was taken over){}",
        CUT.as_secs(),
        if drained { "" } else { "; drain FAILED" }
    );
    row.took = started.elapsed();
    drop(hosts);
    Ok(row)
}

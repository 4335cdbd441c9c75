//! kill -9 loops on PostgreSQL: three worker processes and a publisher on one schema, leases
//! of one second; random SIGKILLs of workers and of the publisher, each restarted; then a drain
//! and the checker. And the same without faults, where no event may be handled twice. The
//! long form adds a restart of the PostgreSQL server mid-run (`pg-restart`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, Signal};
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// Worker processes.
pub(crate) const WORKERS: usize = 3;
/// Lease of a worker on the events it claimed, in milliseconds.
pub(crate) const LEASE_MS: &str = "1000";

/// A fresh schema on `url`, dropped when this is dropped (unless kept).
pub(crate) struct Schema {
    url: String,
    name: String,
    keep: bool,
}

impl Schema {
    pub(crate) fn new(s: &Settings, what: &str) -> anyhow::Result<(Schema, Target)> {
        let url = s.pg_url.clone().context("no PostgreSQL URL")?;
        let name = format!("torture_{what}_{:08x}", fastrand::u32(..));
        let target = Target::Postgres {
            url: url.clone(),
            schema: name.clone(),
        };
        Ok((
            Schema {
                url,
                name,
                keep: s.keep,
            },
            target,
        ))
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        let (url, name) = (self.url.clone(), self.name.clone());
        let drop = async move {
            let pool = durabus::sqlx::PgPool::connect(&url).await?;
            durabus::sqlx::raw_sql(durabus::sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {name} CASCADE"
            )))
            .execute(&pool)
            .await?;
            pool.close().await;
            anyhow::Ok(())
        };
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            let _ = rt.block_on(drop);
        }
    }
}

pub(crate) fn spec<'a>(
    target: &'a Target,
    role: Role,
    deliveries: &'a std::path::Path,
) -> Spec<'a> {
    Spec {
        target,
        role,
        deliveries,
        args: vec![
            "--lease-ms".into(),
            LEASE_MS.into(),
            "--publishers".into(),
            PUBLISHERS.to_string(),
        ],
        env: Vec::new(),
        netns: None,
    }
}

/// Starts `spec` as the next life and waits for it to be up.
pub(crate) fn up(
    spec: &Spec<'_>,
    life: &mut u32,
    ledger: &mut Ledger,
    violations: &mut Vec<String>,
) -> anyhow::Result<Child> {
    let mut child = Child::start(spec, *life)?;
    *life += 1;
    let started = child.pump_until(ledger, Duration::from_secs(30), |s| {
        matches!(s, Signal::Started { .. })
    })?;
    if !started {
        violations.push(format!("life {} did not start within 30 s", child.life));
    }
    Ok(child)
}

/// Reads every child's output for about `time`.
pub(crate) fn pump_all(
    children: &mut [Child],
    ledger: &mut Ledger,
    time: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        for c in children.iter_mut() {
            c.pump_for(ledger, Duration::from_millis(5))?;
        }
    }
    Ok(())
}

/// The kill loop; with `restart_server`, PostgreSQL itself is restarted halfway.
fn kill_loop(s: &Settings, restart_server: bool) -> anyhow::Result<Row> {
    let started = Instant::now();
    let kills = s.cycles(15, 150);
    let (_schema, target) = Schema::new(s, "kill")?;
    let deliveries = s
        .dir
        .join(format!("pg-kill-{}.deliveries", fastrand::u32(..)));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut killed = HashMap::new();
    let mut life = 0;
    let worker = spec(&target, Role::Worker, &deliveries);
    let publisher = spec(&target, Role::Publisher, &deliveries);
    // Index 0 is the publisher, the rest are workers.
    let mut children = vec![up(&publisher, &mut life, &mut ledger, &mut violations)?];
    for _ in 0..WORKERS {
        children.push(up(&worker, &mut life, &mut ledger, &mut violations)?);
    }
    let (mut publisher_kills, mut restarts) = (0, 0);
    for k in 0..kills {
        pump_all(
            &mut children,
            &mut ledger,
            Duration::from_millis(fastrand::u64(100..400)),
        )?;
        if restart_server && k == kills / 2 {
            restart_postgres()?;
            restarts += 1;
        }
        let victim = fastrand::usize(..children.len());
        let child = children.remove(victim);
        let who = child.life;
        if child.kill(&mut ledger)? != End::Killed {
            violations.push(format!("life {who} ended by itself before its kill"));
        }
        killed.insert(who, crate::view::processing(&target)?);
        let again = if victim == 0 {
            publisher_kills += 1;
            &publisher
        } else {
            &worker
        };
        children.insert(victim, up(again, &mut life, &mut ledger, &mut violations)?);
    }
    // Faults off: everyone stops (the publisher and the workers are killed: their leases
    // expire), and one clean process drains.
    for child in children {
        let who = child.life;
        child.kill(&mut ledger)?;
        killed.insert(who, crate::view::processing(&target)?);
    }
    let drained = drain(&target, &deliveries, life, &mut ledger, &mut violations)?;
    let name = if restart_server {
        "postgres kill -9 + server restart"
    } else {
        "postgres kill -9"
    };
    let mut row = finish(name, &target, &deliveries, ledger, killed, true, violations)?;
    row.cycles = kills;
    row.faults = kills + restarts;
    row.notes += &format!(
        "; {WORKERS} workers + 1 publisher, lease {LEASE_MS} ms; {publisher_kills} publisher kills, {} worker kills{}{}",
        kills - publisher_kills,
        if restarts > 0 {
            ", 1 server restart"
        } else {
            ""
        },
        if drained { "" } else { "; drain FAILED" }
    );
    row.took = started.elapsed();
    Ok(row)
}

/// The kill loop.
pub fn kills(s: &Settings) -> anyhow::Result<Row> {
    kill_loop(s, false)
}

/// The kill loop with a restart of the PostgreSQL server halfway (the long form; it disturbs
/// everything else using the server, so it runs alone).
pub fn server_restart(s: &Settings) -> anyhow::Result<Row> {
    kill_loop(s, true)
}

/// `pg_ctlcluster <version> main restart`, then waits until the server answers again.
fn restart_postgres() -> anyhow::Result<()> {
    let version = std::fs::read_dir("/etc/postgresql")
        .context("PostgreSQL's clusters (/etc/postgresql)")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .next()
        .context("no PostgreSQL cluster")?;
    let status = std::process::Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .status()
        .context("running pg_ctlcluster")?;
    anyhow::ensure!(status.success(), "pg_ctlcluster restart failed: {status}");
    Ok(())
}

/// Three workers and a publisher, never killed: every event handled exactly once.
pub fn no_faults(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let publishes = s.cycles(10_000, 100_000);
    let (_schema, target) = Schema::new(s, "clean")?;
    let deliveries = s
        .dir
        .join(format!("pg-clean-{}.deliveries", fastrand::u32(..)));
    let done_flag = s
        .dir
        .join(format!("pg-clean-{}.published", fastrand::u32(..)));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut drain_spec = spec(&target, Role::Drain, &deliveries);
    drain_spec
        .args
        .extend(["--wait-file".into(), done_flag.display().to_string()]);
    let mut workers = Vec::new();
    for life in 0..WORKERS as u32 {
        workers.push(Child::start(&drain_spec, life)?);
    }
    let mut publisher_spec = spec(&target, Role::Publisher, &deliveries);
    publisher_spec.args.extend([
        "--pause-us".into(),
        "0".into(),
        "--limit".into(),
        publishes.to_string(),
    ]);
    let publisher = Child::start(&publisher_spec, WORKERS as u32)?;
    let end = publisher.wait(&mut ledger, Duration::from_secs(600))?;
    if end != End::Exited(0) {
        violations.push(format!("the publisher ended {end:?}"));
    }
    std::fs::write(&done_flag, b"")?;
    for w in workers {
        let who = w.life;
        let end = w.wait(&mut ledger, Duration::from_secs(600))?;
        if end != End::Exited(0) {
            violations.push(format!("worker life {who} ended {end:?}"));
        }
    }
    let mut row = finish(
        "postgres, no faults",
        &target,
        &deliveries,
        ledger,
        HashMap::new(),
        false,
        violations,
    )?;
    row.cycles = 1;
    row.notes += &format!("; {WORKERS} workers + 1 publisher, {publishes} publishes");
    row.took = started.elapsed();
    Ok(row)
}

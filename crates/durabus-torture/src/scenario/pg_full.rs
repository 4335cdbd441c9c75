//! A full database volume on PostgreSQL: durabus's tables live in a tablespace on a small
//! tmpfs; under load (3 workers and a publisher) the volume is filled with a file, so the
//! server cannot extend the tables (`No space left on device`), then the file is removed.
//! Expected: publishes fail with a clear error and nothing unstored is acknowledged; workers
//! back off instead of spinning (their CPU time while full is measured); when space returns
//! everything resumes by itself; nothing acknowledged is lost. Needs root (the mount) and a
//! superuser connection (the tablespace); without them it says NOT RUN.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child::Role;
use crate::fleet::Child;
use crate::ledger::{Ledger, Signal};
use crate::scenario::common::{drain, finish};
use crate::scenario::pg_kill::{Schema, WORKERS, pump_all, spec, up};
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// The volume's size.
const VOLUME: &str = "48m";

/// How long the volume stays full.
const FULL_FOR: Duration = Duration::from_secs(4);

/// A worker spinning on errors would use a core; one backing off uses a fraction of one.
const MAX_CPU_WHILE_FULL: f64 = 0.5;

/// The mounted volume and its tablespace, removed when dropped.
struct Volume {
    dir: PathBuf,
    url: String,
    tablespace: String,
}

impl Volume {
    /// Mounts a tmpfs for PostgreSQL's user and makes it a tablespace; `None` (with why) when
    /// this process may not.
    fn new(url: &str) -> anyhow::Result<Result<Volume, String>> {
        let uid = Command::new("id").args(["-u", "postgres"]).output()?;
        if !uid.status.success() {
            return Ok(Err("no postgres user on this host".into()));
        }
        let uid = String::from_utf8_lossy(&uid.stdout).trim().to_owned();
        let name = format!("torture_full_{:08x}", fastrand::u32(..));
        // Under /tmp, not the suite's private directory: the server must reach it.
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir)?;
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={VOLUME},mode=0700,uid={uid},gid={uid}"),
                "tmpfs",
            ])
            .arg(&dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            let _ = std::fs::remove_dir(&dir);
            return Ok(Err("mounting a tmpfs needs root".into()));
        }
        let volume = Volume {
            dir,
            url: url.to_owned(),
            tablespace: name,
        };
        let made = volume.sql(&format!(
            "CREATE TABLESPACE {} LOCATION '{}'",
            volume.tablespace,
            volume.dir.display()
        ));
        if let Err(e) = made {
            return Ok(Err(format!(
                "creating a tablespace needs a superuser: {e:#}"
            )));
        }
        Ok(Ok(volume))
    }

    fn sql(&self, sql: &str) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let pool = durabus::sqlx::PgPool::connect(&self.url).await?;
            durabus::sqlx::raw_sql(durabus::sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(&pool)
                .await?;
            pool.close().await;
            anyhow::Ok(())
        })
    }

    /// Creates the bus's tables in `schema`, in this tablespace.
    fn create_tables(&self, schema: &str) -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let tablespace = self.tablespace.clone();
        rt.block_on(async {
            let options: durabus::sqlx::postgres::PgConnectOptions = self.url.parse()?;
            let pool = durabus::sqlx::postgres::PgPoolOptions::new()
                .max_connections(2)
                .connect_with(options.options([("default_tablespace", tablespace)]))
                .await?;
            let store = durabus::PgStore::from_pool(
                pool.clone(),
                durabus::PgOptions {
                    schema: schema.to_owned(),
                    listen: false,
                    ..durabus::PgOptions::default()
                },
            )
            .await?;
            durabus::StoreLifecycle::close(&store).await?;
            pool.close().await;
            anyhow::Ok(())
        })
    }

    /// Fills the volume with a file; returns its path.
    fn fill(&self) -> anyhow::Result<PathBuf> {
        let filler = self.dir.join("filler");
        let mut f = std::fs::File::create(&filler)?;
        let block = vec![0u8; 64 * 1024];
        while f.write_all(&block).is_ok() {}
        Ok(filler)
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        // The schema is dropped first (its guard was made later, so it drops earlier).
        let _ = self.sql(&format!("DROP TABLESPACE IF EXISTS {}", self.tablespace));
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// CPU time (user + system) of process `pid` so far.
fn cpu(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11).context("utime")?.parse::<u64>()?
        + fields.get(12).context("stime")?.parse::<u64>()?;
    // The kernel's USER_HZ is 100 on Linux.
    Ok(Duration::from_millis(ticks * 10))
}

/// Refusals a child reported so far.
fn refused(child: &Child) -> usize {
    child
        .signals
        .iter()
        .filter(|s| matches!(s, Signal::Refused(_)))
        .count()
}

/// Pumps `children` for `time`, adding the events stored as `processing` to `held` every
/// 50 ms (at least once).
fn watch(
    children: &mut [Child],
    ledger: &mut Ledger,
    target: &Target,
    held: &mut HashSet<durabus::EventId>,
    time: Duration,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        held.extend(crate::view::processing(target)?);
        if start.elapsed() >= time {
            return Ok(());
        }
        pump_all(children, ledger, Duration::from_millis(50).min(time))?;
    }
}

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let url = s.pg_url.clone().context("no PostgreSQL URL")?;
    let volume = match Volume::new(&url)? {
        Ok(v) => v,
        Err(why) => {
            return Ok(Row {
                scenario: "postgres, database volume full".into(),
                notes: format!("NOT RUN ({why})"),
                took: started.elapsed(),
                ..Row::default()
            });
        }
    };
    let (_schema, target) = Schema::new(s, "full")?;
    let Target::Postgres { schema, .. } = &target else {
        anyhow::bail!("a PostgreSQL target");
    };
    volume.create_tables(schema)?;
    let cycles = s.cycles(2, 10);
    let deliveries = s
        .dir
        .join(format!("pg-full-{}.deliveries", fastrand::u32(..)));
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let mut in_flight: HashMap<u32, HashSet<durabus::EventId>> = HashMap::new();
    let mut life = 0;
    let worker = spec(&target, Role::Worker, &deliveries);
    let publisher = spec(&target, Role::Publisher, &deliveries);
    let mut children = vec![up(&publisher, &mut life, &mut ledger, &mut violations)?];
    for _ in 0..WORKERS {
        children.push(up(&worker, &mut life, &mut ledger, &mut violations)?);
    }
    let mut recovered = Duration::ZERO;
    for cycle in 0..cycles {
        pump_all(&mut children, &mut ledger, Duration::from_secs(2))?;
        // Full: publishes must fail, and no worker may spin.
        let refused_before = refused(&children[0]);
        let acked_before = ledger.acked.len();
        let filler = volume.fill()?;
        let cpu_before: Vec<Duration> = children[1..]
            .iter()
            .map(|c| cpu(c.pid()))
            .collect::<anyhow::Result<_>>()?;
        let full_at = Instant::now();
        // What runs across the fault may run again (a lease the heartbeat could not renew).
        // An event claimed while the volume is full and taken over once its lease ran out
        // can come and go between two looks, so the look is taken every 50 ms; after space
        // returns, until publishing resumes, only events claimed before then count (what is
        // claimed afterwards runs under leases that can be renewed).
        let mut held = HashSet::new();
        watch(&mut children, &mut ledger, &target, &mut held, FULL_FOR)?;
        let full_for = full_at.elapsed();
        let busiest = children[1..]
            .iter()
            .zip(&cpu_before)
            .map(|(c, before)| Ok(cpu(c.pid())?.saturating_sub(*before)))
            .collect::<anyhow::Result<Vec<Duration>>>()?
            .into_iter()
            .max()
            .unwrap_or_default();
        let share = busiest.as_secs_f64() / full_for.as_secs_f64();
        let refused_full = refused(&children[0]) - refused_before;
        // Acknowledged while full: written before the volume filled up (pages with room).
        let acked_full = ledger.acked.len() - acked_before;
        std::fs::remove_file(&filler)?;
        let freed_at = Instant::now();
        let freed_ms = durabus::Timestamp::now().as_millis();
        let acked_freed = ledger.acked.len();
        let mut resumed = None;
        while freed_at.elapsed() < Duration::from_secs(30) {
            held.extend(crate::view::processing_since_before(&target, freed_ms)?);
            pump_all(&mut children, &mut ledger, Duration::from_millis(50))?;
            if ledger.acked.len() > acked_freed + 100 {
                resumed = Some(freed_at.elapsed());
                break;
            }
        }
        for c in &children {
            in_flight
                .entry(c.life)
                .or_default()
                .extend(held.iter().copied());
        }
        if refused_full == 0 {
            violations.push(format!(
                "cycle {cycle}: no publish failed while the volume was full"
            ));
        }
        if share > MAX_CPU_WHILE_FULL {
            violations.push(format!(
                "cycle {cycle}: a worker used {:.0} % of a core while the volume was full: it spins instead of backing off",
                share * 100.0
            ));
        }
        match resumed {
            Some(t) => recovered = recovered.max(t),
            None => violations.push(format!(
                "cycle {cycle}: publishing did not resume within 30 s of space returning"
            )),
        }
        notes.push(format!(
            "cycle {cycle}: {refused_full} publishes refused and {acked_full} acknowledged in {:.1} s full, busiest worker {:.0} % of a core; resumed in {}",
            full_for.as_secs_f64(),
            share * 100.0,
            resumed.map_or("—".to_owned(), |t| format!("{:.2} s", t.as_secs_f64()))
        ));
        if let Some(reason) = children[0].signals.iter().rev().find_map(|s| match s {
            Signal::Refused(r) => Some(r.clone()),
            _ => None,
        }) && cycle == 0
        {
            notes.push(format!(
                "the error: {}",
                reason.chars().take(100).collect::<String>()
            ));
        }
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
        "postgres, database volume full",
        &target,
        &deliveries,
        ledger,
        in_flight,
        true,
        violations,
    )?;
    row.cycles = cycles;
    row.faults = cycles;
    row.recovered = Some(recovered);
    for n in notes {
        row.notes += &format!("; {n}");
    }
    row.notes += &format!(
        "; {WORKERS} workers + 1 publisher, tables in a tablespace on a {VOLUME} tmpfs{}",
        if drained { "" } else { "; drain FAILED" }
    );
    row.took = started.elapsed();
    Ok(row)
}

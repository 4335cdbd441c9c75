//! Soak: one process on each store under mixed load for two minutes (an hour in the long
//! form): publishing at a steady rate on every path (1 in 10 events always failing, so
//! retries and dead letters run), a bulk retry every 5 s of the dead letters of the last 12 s, and every 2 s
//! the operators' work (a replay of the last 5 s, a metrics scrape, the admin API's reads).
//! Its memory, open files, connections (PostgreSQL), write-ahead log and queue depth are
//! sampled (every 2 s; every 10 s in the long form) and must stay bounded once warmed up.
//! The samples go to `soak-<store>.csv` and a plot to `soak-<store>.svg` in the work directory.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::Ledger;
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::pg_kill::Schema;
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// One sample.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    t: f64,
    acked: usize,
    rss_mb: f64,
    fds: f64,
    connections: f64,
    wal_mb: f64,
    depth: f64,
}

/// The curves: name, colour, value.
type Series = (&'static str, &'static str, fn(&Sample) -> f64);

const SERIES: [Series; 6] = [
    ("acknowledged", "#1f77b4", |s| s.acked as f64),
    ("RSS MB", "#d62728", |s| s.rss_mb),
    ("open files", "#2ca02c", |s| s.fds),
    ("connections", "#8c564b", |s| s.connections),
    ("WAL MB", "#9467bd", |s| s.wal_mb),
    ("queue depth", "#ff7f0e", |s| s.depth),
];

fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn fds(pid: u32) -> Option<f64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as f64)
}

/// What the store says: connections, WAL (MB) and queue depth.
fn store_side(target: &Target, rt: &tokio::runtime::Runtime) -> anyhow::Result<(f64, f64, f64)> {
    match target {
        Target::Sqlite(path) => {
            use durabus::rusqlite::{Connection, OpenFlags};
            let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
            conn.busy_timeout(Duration::from_secs(10))?;
            let depth: i64 = conn.query_row(
                "SELECT count(*) FROM durabus_events WHERE status IN ('pending', 'scheduled', 'processing')",
                [],
                |r| r.get(0),
            )?;
            let wal = path.with_extension("db-wal");
            let wal_mb = std::fs::metadata(wal).map_or(0.0, |m| m.len() as f64 / 1e6);
            Ok((0.0, wal_mb, depth as f64))
        }
        Target::Postgres { url, schema } => rt.block_on(async {
            let pool = durabus::sqlx::PgPool::connect(url).await?;
            let (connections,): (i64,) = durabus::sqlx::query_as(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1",
            )
            .bind(format!("durabus {schema} %"))
            .fetch_one(&pool)
            .await?;
            let (wal,): (i64,) =
                durabus::sqlx::query_as("SELECT coalesce(sum(size), 0)::int8 FROM pg_ls_waldir()")
                    .fetch_one(&pool)
                    .await?;
            let (depth,): (i64,) = durabus::sqlx::query_as(durabus::sqlx::AssertSqlSafe(format!(
                "SELECT count(*) FROM {schema}.events WHERE status IN ('pending', 'scheduled', 'processing')"
            )))
            .fetch_one(&pool)
            .await?;
            pool.close().await;
            Ok((connections as f64, wal as f64 / 1e6, depth as f64))
        }),
    }
}

/// SQLite's soak.
pub fn sqlite(s: &Settings) -> anyhow::Result<Row> {
    let target = Target::Sqlite(s.dir.join("soak.db"));
    soak(s, "sqlite", &target, s.cycles(120, 3600), 0)
}

/// PostgreSQL's soak.
pub fn postgres(s: &Settings) -> anyhow::Result<Row> {
    let (_schema, target) = Schema::new(s, "soak")?;
    soak(s, "postgres", &target, s.cycles(120, 3600), 0)
}

/// A leak the self-test's process makes: a debug build's soak process holds 20–80 MB, and the
/// judge allows the second half 1.25 × the second quarter's peak + 16 MB.
const LEAK_KIB_PER_S: usize = 4 * 1024;

/// The soak's self-test: a minute of the SQLite soak whose process keeps 4 MiB more every
/// second; passes only if the judge reports memory that kept growing.
pub fn leak(s: &Settings) -> anyhow::Result<Row> {
    let target = Target::Sqlite(s.dir.join("soak-leak.db"));
    let mut row = soak(s, "sqlite-leak", &target, 60, LEAK_KIB_PER_S)?;
    row.scenario = "self-test: soak of a leaking process".into();
    let (caught, other): (Vec<String>, Vec<String>) = row
        .violations
        .drain(..)
        .partition(|v| v.starts_with("RSS (MB) kept growing"));
    row.violations = other;
    match caught.first() {
        Some(v) => row.notes += &format!("; self-test: the judge caught the leak ({v})"),
        None => row.violations.push(format!(
            "the judge did not catch a process keeping {} MiB more every second",
            LEAK_KIB_PER_S / 1024
        )),
    }
    Ok(row)
}

fn soak(
    s: &Settings,
    store: &str,
    target: &Target,
    seconds: u64,
    leak_kib_per_s: usize,
) -> anyhow::Result<Row> {
    let started = Instant::now();
    let every = Duration::from_secs(if seconds >= 600 { 10 } else { 2 });
    let deliveries = s.dir.join(format!("soak-{store}.deliveries"));
    let spec = Spec {
        target,
        role: Role::Both,
        deliveries: &deliveries,
        args: vec![
            "--publishers".into(),
            PUBLISHERS.to_string(),
            "--pause-us".into(),
            // At most 400 publishes a second (about 300 with the waits for commits): a load a
            // debug build (what CI runs) sustains on either store, so a growing queue means a
            // leak, not a saturated process.
            "10000".into(),
            "--bulk-every-ms".into(),
            "5000".into(),
            "--bulk-window-ms".into(),
            "12000".into(),
            "--extras-every-ms".into(),
            "2000".into(),
            "--leak-kib-per-s".into(),
            leak_kib_per_s.to_string(),
        ],
        env: Vec::new(),
        netns: None,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut child = Child::start(&spec, 0)?;
    let pid = child.pid();
    let mut samples: Vec<Sample> = Vec::new();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(seconds) {
        child.pump_for(&mut ledger, every)?;
        let (Some(rss_mb), Some(fds)) = (rss_mb(pid), fds(pid)) else {
            violations.push(format!(
                "the process ended after {:.0} s",
                t0.elapsed().as_secs_f64()
            ));
            break;
        };
        let (connections, wal_mb, depth) = store_side(target, &rt)?;
        samples.push(Sample {
            t: t0.elapsed().as_secs_f64(),
            acked: ledger.acked.len(),
            rss_mb,
            fds,
            connections,
            wal_mb,
            depth,
        });
    }
    let took = t0.elapsed().as_secs_f64();
    let mut killed = HashMap::new();
    if child.kill(&mut ledger)? != End::Killed {
        violations.push("the soaked process ended by itself".into());
    }
    killed.insert(0, crate::view::processing(target)?);
    let drained = drain(target, &deliveries, 1, &mut ledger, &mut violations)?;
    write_samples(s, store, &samples)?;
    let mut row = finish(
        &format!("{store} soak"),
        target,
        &deliveries,
        ledger,
        killed,
        true,
        violations,
    )?;
    judge(&mut row, &samples, store);
    row.notes += &format!(
        "; {:.0} ev/s acknowledged for {:.0} s, bulk retries every 5 s, replays, scrapes and reads every 2 s; sampled every {} s{}",
        row.acknowledged as f64 / took,
        took,
        every.as_secs(),
        if drained { "" } else { "; drain FAILED" }
    );
    row.cycles = 1;
    row.took = started.elapsed();
    Ok(row)
}

/// Bounded: after the first quarter (warm-up), nothing keeps growing.
fn judge(row: &mut Row, samples: &[Sample], store: &str) {
    if samples.len() < 8 {
        row.violations.push(format!(
            "too few samples ({}) to judge the curves",
            samples.len()
        ));
        return;
    }
    let (n, quarter, half) = (samples.len(), samples.len() / 4, samples.len() / 2);
    let peak = |from: usize, to: usize, f: fn(&Sample) -> f64| {
        samples[from..to].iter().map(f).fold(0.0, f64::max)
    };
    let mut check = |what: &str, f: fn(&Sample) -> f64, slack: f64, factor: f64| {
        let (early, late) = (peak(quarter, half, f), peak(half, n, f));
        if late > early * factor + slack {
            row.violations.push(format!(
                "{what} kept growing: {early:.0} at most in the second quarter, {late:.0} in the second half"
            ));
        }
        (early, late)
    };
    let rss = check("RSS (MB)", |s| s.rss_mb, 16.0, 1.25);
    let files = check("open files", |s| s.fds, 8.0, 1.0);
    let conns = check("connections", |s| s.connections, 2.0, 1.0);
    let depth = check("queue depth", |s| s.depth, 2_000.0, 2.0);
    let wal = peak(0, n, |s| s.wal_mb);
    let wal_limit = if store.starts_with("sqlite") {
        256.0
    } else {
        2_048.0
    };
    if wal > wal_limit {
        row.violations
            .push(format!("the write-ahead log grew to {wal:.0} MB"));
    }
    row.notes += &format!(
        "; second quarter / second half peaks: RSS {:.0} / {:.0} MB, open files {:.0} / {:.0}, connections {:.0} / {:.0}, queue depth {:.0} / {:.0}; WAL ≤ {wal:.0} MB",
        rss.0, rss.1, files.0, files.1, conns.0, conns.1, depth.0, depth.1
    );
}

/// `soak-<store>.csv` and `soak-<store>.svg` in the work directory.
fn write_samples(s: &Settings, store: &str, samples: &[Sample]) -> anyhow::Result<()> {
    let mut csv =
        String::from("seconds,acknowledged,rss_mb,open_files,connections,wal_mb,queue_depth\n");
    for x in samples {
        writeln!(
            csv,
            "{:.1},{},{:.1},{},{},{:.1},{}",
            x.t, x.acked, x.rss_mb, x.fds, x.connections, x.wal_mb, x.depth
        )?;
    }
    std::fs::write(s.dir.join(format!("soak-{store}.csv")), csv)?;
    std::fs::write(s.dir.join(format!("soak-{store}.svg")), svg(store, samples))?;
    Ok(())
}

/// The curves against time, each scaled to its own maximum (given in its label).
fn svg(store: &str, samples: &[Sample]) -> String {
    let (w, h, pad) = (760.0, 320.0, 40.0);
    let tmax = samples.last().map_or(1.0, |s| s.t).max(1e-9);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{pad}\" y=\"14\">{store} soak: each curve scaled to its maximum</text>\n"
    );
    for (i, (name, color, get)) in SERIES.iter().enumerate() {
        let max = samples.iter().map(get).fold(0.0, f64::max).max(1e-9);
        let points: Vec<String> = samples
            .iter()
            .map(|s| {
                let x = pad + (w - 2.0 * pad) * s.t / tmax;
                let y = h - pad - (h - 2.0 * pad - 20.0) * get(s) / max;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n<text x=\"{}\" y=\"30\" fill=\"{color}\">{name} (max {max:.0})</text>",
            points.join(" "),
            pad + i as f64 * 120.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{pad}\" y=\"{}\">0 s</text><text x=\"{}\" y=\"{}\">{tmax:.0} s</text>\n</svg>",
        h - 12.0,
        w - pad - 30.0,
        h - 12.0
    );
    out
}

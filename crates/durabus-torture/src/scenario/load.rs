//! Sustained load: one SQLite process publishing batches of 100 as fast as it can (1 in 10
//! events failing, so retries and dead letters run too) and handling them, until the target
//! count is published and everything drained. Its RSS, open file descriptors and WAL size are
//! sampled every 250 ms and must stay bounded; the samples go to `load.csv` and a plot to
//! `load.svg` in the work directory. No faults: no loss and no duplicate.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::Ledger;
use crate::scenario::common::finish;
use crate::scenario::{Row, Settings};
use crate::target::Target;

/// One sample.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: f64,
    acked: usize,
    rss_mb: f64,
    fds: usize,
    wal_mb: f64,
}

fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let events = s.cycles(100_000, 1_000_000);
    let batch = 100u64;
    let path = s.dir.join("load.db");
    let wal = s.dir.join("load.db-wal");
    let target = Target::Sqlite(path);
    let deliveries = s.dir.join("load.deliveries");
    let spec = Spec {
        target: &target,
        role: Role::Both,
        deliveries: &deliveries,
        args: vec![
            "--publishers".into(),
            "4".into(),
            "--pause-us".into(),
            "0".into(),
            "--batch".into(),
            batch.to_string(),
            "--limit".into(),
            events.div_ceil(batch).to_string(),
        ],
        env: Vec::new(),
        netns: None,
    };
    let mut ledger = Ledger::default();
    let mut violations = Vec::new();
    let mut child = Child::start(&spec, 0)?;
    let pid = child.pid();
    let mut samples = Vec::new();
    let t0 = Instant::now();
    let end = loop {
        child.pump_for(&mut ledger, Duration::from_millis(250))?;
        let (Some(rss_mb), Some(fds)) = (rss_mb(pid), fds(pid)) else {
            break child.wait(&mut ledger, Duration::from_secs(60))?;
        };
        samples.push(Sample {
            t: t0.elapsed().as_secs_f64(),
            acked: ledger.acked.len(),
            rss_mb,
            fds,
            wal_mb: std::fs::metadata(&wal).map_or(0.0, |m| m.len() as f64 / 1e6),
        });
        if t0.elapsed() > Duration::from_secs(3600) {
            violations.push("the load did not finish within an hour".into());
            break child.kill(&mut ledger)?;
        }
    };
    if end != End::Exited(0) {
        violations.push(format!("the loaded process ended {end:?}"));
    }
    let took = t0.elapsed().as_secs_f64();
    write_samples(s, &samples)?;
    let mut row = finish(
        "sqlite sustained load",
        &target,
        &deliveries,
        ledger,
        HashMap::new(),
        false,
        violations,
    )?;
    // Bounded: after the first quarter (warm-up), nothing keeps growing.
    let quarter = samples.len() / 4;
    let peak = |from: usize, to: usize, f: fn(&Sample) -> f64| {
        samples[from..to].iter().map(f).fold(0.0, f64::max)
    };
    if samples.len() >= 8 {
        let (n, half) = (samples.len(), samples.len() / 2);
        let (rss1, rss2) = (
            peak(quarter, half, |s| s.rss_mb),
            peak(half, n, |s| s.rss_mb),
        );
        let (fd1, fd2) = (
            peak(quarter, half, |s| s.fds as f64),
            peak(half, n, |s| s.fds as f64),
        );
        let wal = peak(0, n, |s| s.wal_mb);
        if rss2 > rss1 * 1.25 + 16.0 {
            row.violations.push(format!(
                "RSS kept growing: {rss1:.0} MB peak in the second quarter, {rss2:.0} MB in the second half"
            ));
        }
        if fd2 > fd1 + 8.0 {
            row.violations
                .push(format!("open files kept growing: {fd1} then {fd2}"));
        }
        if wal > 256.0 {
            row.violations.push(format!("the WAL grew to {wal:.0} MB"));
        }
        row.notes += &format!(
            "; {events} events in batches of {batch}, {:.0} ev/s published and handled; RSS peak {:.0} MB (second quarter {rss1:.0}, second half {rss2:.0}); open files ≤ {:.0}; WAL ≤ {wal:.0} MB",
            row.acknowledged as f64 / took,
            peak(0, n, |s| s.rss_mb),
            peak(0, n, |s| s.fds as f64),
        );
    } else {
        row.violations.push(format!(
            "too few samples ({}) to judge the curves",
            samples.len()
        ));
    }
    row.cycles = 1;
    row.took = started.elapsed();
    Ok(row)
}

/// `load.csv` and `load.svg` in the work directory.
fn write_samples(s: &Settings, samples: &[Sample]) -> anyhow::Result<()> {
    let mut csv = String::from("seconds,acknowledged,rss_mb,open_fds,wal_mb\n");
    for x in samples {
        writeln!(
            csv,
            "{:.2},{},{:.1},{},{:.1}",
            x.t, x.acked, x.rss_mb, x.fds, x.wal_mb
        )?;
    }
    std::fs::write(s.dir.join("load.csv"), csv)?;
    std::fs::write(s.dir.join("load.svg"), svg(samples))?;
    Ok(())
}

/// A plot of the four curves against time, each scaled to its own maximum.
fn svg(samples: &[Sample]) -> String {
    let (w, h, pad) = (720.0, 300.0, 40.0);
    let tmax = samples.last().map_or(1.0, |s| s.t).max(1e-9);
    type Get = fn(&Sample) -> f64;
    let series: [(&str, &str, Get); 4] = [
        ("acknowledged events", "#1f77b4", |s| s.acked as f64),
        ("RSS (MB)", "#d62728", |s| s.rss_mb),
        ("open files", "#2ca02c", |s| s.fds as f64),
        ("WAL (MB)", "#9467bd", |s| s.wal_mb),
    ];
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, (name, color, get)) in series.iter().enumerate() {
        let max = samples.iter().map(get).fold(0.0, f64::max).max(1e-9);
        let points: Vec<String> = samples
            .iter()
            .map(|s| {
                let x = pad + (w - 2.0 * pad) * s.t / tmax;
                let y = h - pad - (h - 2.0 * pad) * get(s) / max;
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>\n<text x=\"{}\" y=\"16\" fill=\"{color}\">{name} (max {max:.0})</text>",
            points.join(" "),
            pad + i as f64 * 170.0
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

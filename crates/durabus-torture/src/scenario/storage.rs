//! Storage faults on SQLite: another process holding the write lock briefly (no error) and for
//! longer than the bus waits (clear errors, no acknowledgement, recovery without a restart); a
//! full disk (a small tmpfs filled up: errors, no acknowledgement, no crash, recovery once space
//! is freed); a read-only database opened by a user who may not write it, and a corrupted file
//! (both refused at start with a clear message, the file left as it was).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::child::Role;
use crate::fleet::{Child, End, Spec};
use crate::ledger::{Ledger, Signal};
use crate::scenario::common::{PUBLISHERS, drain, finish};
use crate::scenario::{Row, Settings};
use crate::target::Target;
use crate::view;

/// Counts of a child's signals since it started.
fn counts(child: &Child) -> (usize, usize) {
    let refused = child
        .signals
        .iter()
        .filter(|s| matches!(s, Signal::Refused(_)))
        .count();
    (refused, child.signals.len())
}

/// Holds SQLite's write lock on `path` for `time`, from this (another) process.
fn hold_write_lock(
    path: &Path,
    time: Duration,
    taken: std::sync::mpsc::Sender<()>,
) -> anyhow::Result<()> {
    let conn = durabus::rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let _ = taken.send(());
    std::thread::sleep(time);
    conn.execute_batch("COMMIT")?;
    Ok(())
}

/// The scenario.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let mut faults = 0;
    // The database lives on a small tmpfs, so the disk can be filled.
    let mount = s.dir.join("small-disk");
    std::fs::create_dir_all(&mount)?;
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"])
        .arg(&mount)
        .status()
        .map(|st| st.success())
        .unwrap_or(false);
    if !mounted {
        notes.push("disk full NOT RUN (mounting a tmpfs needs root)".to_owned());
    }
    let result = ledgered(s, &mount, mounted, &mut violations, &mut notes, &mut faults);
    if mounted {
        let _ = Command::new("umount").arg(&mount).status();
    }
    let mut row = result?;
    faults += refused_at_start(s, &mut violations, &mut notes)?;
    row.scenario = "sqlite storage faults".into();
    row.faults = faults;
    row.cycles = faults;
    row.notes += &format!("; {}", notes.join("; "));
    row.violations.extend(violations);
    row.took = started.elapsed();
    Ok(row)
}

/// The lock and disk-full cases, under the ledger and the checker.
fn ledgered(
    s: &Settings,
    dir: &Path,
    mounted: bool,
    violations: &mut Vec<String>,
    notes: &mut Vec<String>,
    faults: &mut u64,
) -> anyhow::Result<Row> {
    let path = dir.join("storage.db");
    let target = Target::Sqlite(path.clone());
    let deliveries = s.dir.join("storage.deliveries");
    let spec = Spec {
        target: &target,
        role: Role::Both,
        deliveries: &deliveries,
        args: vec![
            "--publishers".into(),
            PUBLISHERS.to_string(),
            "--lock-timeout-ms".into(),
            "1000".into(),
        ],
        env: Vec::new(),
        netns: None,
    };
    let mut ledger = Ledger::default();
    let mut killed = HashMap::new();
    let mut child = Child::start(&spec, 0)?;
    child.pump_until(&mut ledger, Duration::from_secs(30), |s| {
        matches!(s, Signal::Started { .. })
    })?;
    child.pump_for(&mut ledger, Duration::from_millis(300))?;

    // A short hold (300 ms, under the bus's 1 s wait): no publish fails.
    let before = counts(&child);
    let (taken, _) = std::sync::mpsc::channel();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || hold_write_lock(&path, Duration::from_millis(300), taken))
    };
    child.pump_for(&mut ledger, Duration::from_millis(600))?;
    holder
        .join()
        .map_err(|_| anyhow::anyhow!("lock holder panicked"))??;
    let after = counts(&child);
    *faults += 1;
    if after.0 != before.0 {
        violations.push(format!(
            "{} publishes failed while another process held the write lock for 300 ms",
            after.0 - before.0
        ));
    }

    // A long hold (3 s, over the bus's 1 s wait): publishes fail clearly, then recover.
    let (taken, lock_taken) = std::sync::mpsc::channel();
    let holder = {
        let path = path.clone();
        std::thread::spawn(move || hold_write_lock(&path, Duration::from_secs(3), taken))
    };
    // The 3 s count from when the holder has the lock: it may wait for the bus's writer first.
    let asked = Instant::now();
    while lock_taken.try_recv().is_err() && asked.elapsed() < Duration::from_secs(10) {
        child.pump_for(&mut ledger, Duration::from_millis(10))?;
    }
    child.pump_for(&mut ledger, Duration::from_millis(3200))?;
    holder
        .join()
        .map_err(|_| anyhow::anyhow!("lock holder panicked"))??;
    // A refusal of a publish that waited during the hold can reach the parent just after it.
    child.pump_for(&mut ledger, Duration::from_millis(300))?;
    let held = counts(&child);
    let acks_before = ledger.acked.len();
    child.pump_for(&mut ledger, Duration::from_millis(1000))?;
    *faults += 1;
    let errors: Vec<String> = child
        .signals
        .iter()
        .filter_map(|s| match s {
            Signal::Refused(m) => Some(m.clone()),
            _ => None,
        })
        .collect();
    if held.0 == after.0 {
        violations.push("no publish failed while the write lock was held for 3 s".into());
    } else {
        notes.push(format!(
            "lock held 3 s: {} publishes refused ({:?})",
            held.0 - after.0,
            errors
                .last()
                .map(|e| e.chars().take(80).collect::<String>())
        ));
    }
    if ledger.acked.len() == acks_before {
        violations.push("publishing did not resume after the write lock was released".into());
    }

    // A full disk.
    if mounted {
        let refused_before = counts(&child).0;
        let filler = dir.join("filler");
        {
            let mut f = std::fs::File::create(&filler)?;
            let block = vec![0u8; 64 * 1024];
            while f.write_all(&block).is_ok() {}
        }
        child.pump_for(&mut ledger, Duration::from_millis(1500))?;
        let refused_full = counts(&child).0 - refused_before;
        std::fs::remove_file(&filler)?;
        let acks_before = ledger.acked.len();
        child.pump_for(&mut ledger, Duration::from_millis(1500))?;
        *faults += 1;
        if refused_full == 0 {
            violations.push("no publish failed while the disk was full".into());
        }
        if ledger.acked.len() == acks_before {
            violations.push("publishing did not resume after space was freed".into());
        }
        notes.push(format!(
            "disk full: {refused_full} publishes refused, then resumed"
        ));
    }
    match child.kill(&mut ledger)? {
        End::Killed => {}
        other => violations.push(format!("the child did not survive the faults: {other:?}")),
    }
    killed.insert(0, view::processing(&target)?);
    drain(&target, &deliveries, 1, &mut ledger, violations)?;
    finish(
        "sqlite storage faults",
        &target,
        &deliveries,
        ledger,
        killed,
        true,
        Vec::new(),
    )
}

/// Starts a draining child on `path` (as `uid` if given); returns whether it succeeded and its
/// standard error.
fn start_on(
    exe: &Path,
    path: &Path,
    uid: Option<u32>,
    deliveries: &Path,
) -> anyhow::Result<(bool, String)> {
    let mut cmd = Command::new(exe);
    cmd.arg("child")
        .arg("--target")
        .arg(Target::Sqlite(path.to_owned()).arg())
        .args(["--role", "drain", "--life", "0"])
        .arg("--deliveries")
        .arg(deliveries)
        // The error as a user sees it, without a backtrace.
        .env("RUST_BACKTRACE", "0");
    if let Some(uid) = uid {
        use std::os::unix::process::CommandExt;
        cmd.uid(uid).gid(uid);
    }
    let out = cmd.output().context("starting a child")?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    ))
}

/// The read-only and corrupted files: refused at start, left as they were.
fn refused_at_start(
    s: &Settings,
    violations: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> anyhow::Result<u64> {
    let _ = s;
    // Outside the (private) work directory, with this program copied in: the other user must
    // reach both.
    let dir = std::env::temp_dir().join(format!("durabus-torture-{:08x}", fastrand::u32(..)));
    std::fs::create_dir_all(&dir)?;
    let result = refused_in(&dir, violations, notes);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn refused_in(
    dir: &Path,
    violations: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> anyhow::Result<u64> {
    use std::os::unix::fs::PermissionsExt;
    let mut faults = 0;
    let exe = dir.join("durabus-torture");
    std::fs::copy(std::env::current_exe()?, &exe)?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let deliveries = dir.join("deliveries");
    // A database the bus made, with an event in it.
    let path = dir.join("ro.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let bus = Target::Sqlite(path.clone()).reader().await?;
        bus.enqueue("torture.ok", &1).await?;
        bus.shutdown().await?;
        anyhow::Ok(())
    })?;

    // Read-only for a user who may not write it (root may write anything).
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false);
    if is_root {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444))?;
        let before = std::fs::read(&path)?;
        let (ok, err) = start_on(&exe, &path, Some(65534), &deliveries)?;
        faults += 1;
        if ok {
            violations.push("a bus started on a database its user may not write".into());
        } else {
            notes.push(format!("read-only file: {}", summary(&err, dir)));
        }
        if std::fs::read(&path)? != before {
            violations.push("the read-only database file changed".into());
        }
    } else {
        notes.push("read-only file NOT RUN (needs root to switch users)".into());
    }

    // A corrupted file: the header overwritten.
    let bad = dir.join("corrupt.db");
    let mut bytes = std::fs::read(&path)?;
    bytes[..16].copy_from_slice(b"not a database!!");
    std::fs::write(&bad, &bytes)?;
    let (ok, err) = start_on(&exe, &bad, None, &deliveries)?;
    faults += 1;
    if ok {
        violations.push("a bus started on a corrupted database file".into());
    } else {
        notes.push(format!("corrupted file: {}", summary(&err, dir)));
    }
    if std::fs::read(&bad)? != bytes {
        violations.push("the corrupted database file was changed".into());
    }
    Ok(faults)
}

/// The error's first line and its deepest cause, without the work directory.
fn summary(s: &str, dir: &Path) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    let last = s.lines().last().unwrap_or("").trim();
    let text = if first == last {
        first.to_owned()
    } else {
        format!("{first} … {last}")
    };
    text.replace(&format!("{}/", dir.display()), "")
        .chars()
        .take(160)
        .collect::<String>()
        .replace('|', "/")
}

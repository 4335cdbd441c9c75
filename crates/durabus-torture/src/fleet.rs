//! Child processes as the parent sees them: started with a role, their output read into the
//! ledger as it comes, killed with `SIGKILL` at the moment a scenario picks.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::child::Role;
use crate::ledger::{Ledger, Signal};
use crate::target::Target;

/// How a child's life ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The parent killed it with `SIGKILL`.
    Killed,
    /// It aborted itself (a fail point fired, or a handler aborted the process).
    Aborted,
    /// It exited with this code.
    Exited(i32),
}

/// One running child.
pub struct Child {
    proc: std::process::Child,
    lines: Receiver<String>,
    /// Its life number.
    pub life: u32,
    /// Signals seen so far.
    pub signals: Vec<Signal>,
    /// Outcomes its store refused because another worker had taken the event's lease over
    /// (counted from its log on standard error).
    pub fenced: Arc<AtomicU64>,
}

/// What the PostgreSQL store logs when it refuses a late outcome (fencing).
const FENCED: &str = "no longer holds the event's lease";

/// What to start.
#[derive(Debug, Clone)]
pub struct Spec<'a> {
    /// The store.
    pub target: &'a Target,
    /// Its role.
    pub role: Role,
    /// The delivery log.
    pub deliveries: &'a Path,
    /// Extra command-line arguments of the child.
    pub args: Vec<String>,
    /// Extra environment variables (fail points).
    pub env: Vec<(String, String)>,
    /// The network namespace to run it in (`ip netns exec`), if any.
    pub netns: Option<String>,
}

/// Fail points armed in every child of this run (the checker's self-test), unless a
/// scenario arms its own.
static ARMED_IN_EVERY_CHILD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Arms `spec` (a [`durabus::fault::ENV`] value) in every child started from now on.
pub fn arm_in_every_child(spec: &str) {
    let _ = ARMED_IN_EVERY_CHILD.set(spec.to_owned());
}

impl Child {
    /// Starts `spec` as life `life`.
    pub fn start(spec: &Spec<'_>, life: u32) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding this program")?;
        let role = match spec.role {
            Role::Both => "both",
            Role::Publisher => "publisher",
            Role::Worker => "worker",
            Role::Drain => "drain",
        };
        let mut cmd = match &spec.netns {
            // `ip netns exec` enters the namespace and executes the program: same process.
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.arg("child")
            .args(["--target", &spec.target.arg(), "--role", role])
            .arg("--deliveries")
            .arg(spec.deliveries)
            .args(["--life", &life.to_string()])
            .args(&spec.args)
            .env_remove(durabus::fault::ENV)
            .envs(ARMED_IN_EVERY_CHILD.get().map(|a| (durabus::fault::ENV, a)))
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut proc = cmd.spawn().context("starting a child")?;
        let stdout = proc.stdout.take().context("child stdout")?;
        let stderr = proc.stderr.take().context("child stderr")?;
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Standard error: kept quiet unless asked for (fail points announce themselves there).
        let fenced = Arc::new(AtomicU64::new(0));
        let counted = fenced.clone();
        std::thread::spawn(move || {
            let verbose = std::env::var_os("TORTURE_VERBOSE").is_some();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains(FENCED) {
                    counted.fetch_add(1, Ordering::Relaxed);
                }
                if verbose {
                    eprintln!("[life {life}] {line}");
                }
            }
        });
        Ok(Child {
            proc,
            lines,
            life,
            signals: Vec::new(),
            fenced,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.proc.id()
    }

    /// Reads output into `ledger` until `until` is seen, the child ends, or `timeout` passes.
    /// Returns whether `until` was seen.
    pub fn pump_until(
        &mut self,
        ledger: &mut Ledger,
        timeout: Duration,
        until: impl Fn(&Signal) -> bool,
    ) -> anyhow::Result<bool> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(sig) = ledger.take(&line)? {
                        let hit = until(&sig);
                        self.signals.push(sig);
                        if hit {
                            return Ok(true);
                        }
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Ok(false),
                Err(RecvTimeoutError::Disconnected) => return Ok(false),
            }
        }
    }

    /// Reads whatever output is there into `ledger`, for at most `time`.
    pub fn pump_for(&mut self, ledger: &mut Ledger, time: Duration) -> anyhow::Result<()> {
        self.pump_until(ledger, time, |_| false).map(drop)
    }

    /// Kills the child with `SIGKILL` (if it still runs), waits for it, and reads the rest of
    /// its output: every acknowledgement it printed before it died counts.
    pub fn kill(mut self, ledger: &mut Ledger) -> anyhow::Result<End> {
        let end = match self.proc.try_wait()? {
            Some(status) => end_of(status),
            None => {
                self.proc.kill()?;
                let status = self.proc.wait()?;
                match end_of(status) {
                    End::Exited(_) | End::Aborted => end_of(status),
                    End::Killed => End::Killed,
                }
            }
        };
        self.finish(ledger)?;
        Ok(end)
    }

    /// Waits (at most `timeout`) for the child to end by itself, reading its output.
    pub fn wait(mut self, ledger: &mut Ledger, timeout: Duration) -> anyhow::Result<End> {
        let deadline = Instant::now() + timeout;
        loop {
            self.pump_for(ledger, Duration::from_millis(50))?;
            if let Some(status) = self.proc.try_wait()? {
                self.finish(ledger)?;
                return Ok(end_of(status));
            }
            if Instant::now() > deadline {
                let _ = self.proc.kill();
                bail!("life {} did not end within {timeout:?}", self.life);
            }
        }
    }

    fn finish(&mut self, ledger: &mut Ledger) -> anyhow::Result<()> {
        // The pipe closes when the process is gone: read to its end.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            if let Some(sig) = ledger.take(&line)? {
                self.signals.push(sig);
            }
        }
        Ok(())
    }
}

/// A scenario that fails half-way leaves no child running behind it.
impl Drop for Child {
    fn drop(&mut self) {
        if matches!(self.proc.try_wait(), Ok(None)) {
            let _ = self.proc.kill();
            let _ = self.proc.wait();
        }
    }
}

fn end_of(status: std::process::ExitStatus) -> End {
    match (status.code(), status.signal()) {
        (Some(code), _) => End::Exited(code),
        (None, Some(6)) => End::Aborted,
        _ => End::Killed,
    }
}

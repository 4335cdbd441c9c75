//! `durabus worker`: a worker process whose handlers are commands, for teams whose handlers
//! are scripts or programs in another language, and for operators who want a worker without
//! writing one.
//!
//! Each `--handler PATTERN=COMMAND` subscribes a handler (named after its pattern, so several
//! worker processes on one PostgreSQL database share the subscription) that runs COMMAND with
//! `sh -c` for each event whose type matches PATTERN: the payload JSON on its standard input,
//! the event in its environment (`DURABUS_EVENT_ID`, `DURABUS_EVENT_TYPE`, `DURABUS_ATTEMPT`,
//! `DURABUS_SUBSCRIPTION`, `DURABUS_METADATA` as a JSON object, and `TRACEPARENT` /
//! `TRACESTATE` when the event carries a trace context). Its standard output goes to the
//! worker's. Exit status 0 handles the event; 65 (`EX_DATAERR`) fails it for good (dead-lettered
//! at once, never retried); any other status, a signal or the timeout fails the attempt, which
//! is retried as the retry policy says, with the end of the command's standard error as the
//! attempt's error. SIGTERM or Ctrl-C: no new event starts, running commands finish (within
//! their timeout), the store closes.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use durabus::{Event, RetryOverride, SubscribeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The exit status that fails an event for good (`EX_DATAERR` of `sysexits.h`).
pub const PERMANENT_EXIT: i32 = 65;

/// The most of a command's standard error kept as the attempt's error.
const ERROR_TAIL: usize = 2048;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A handler: events whose type matches PATTERN (a glob such as `order.*`) run COMMAND
    /// with `sh -c`, the payload JSON on its standard input. Repeat for more.
    #[arg(long = "handler", value_name = "PATTERN=COMMAND", required = true, value_parser = parse_handler)]
    handlers: Vec<Handler>,
    /// Longest a command may run for one event; then it is killed and the attempt fails.
    #[arg(long, default_value = "60s", value_parser = parse_timeout)]
    timeout: Duration,
    /// Retries before an event is dead-lettered (the bus's default policy when not given).
    #[arg(long)]
    max_retries: Option<u32>,
    /// Events handled at once, all handlers together.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    concurrency: u16,
    /// Exit once no event is pending or being delivered (events scheduled for later are left
    /// for the next run): for a batch run from cron or a job scheduler.
    #[arg(long)]
    exit_when_idle: bool,
}

/// One `--handler`.
#[derive(Debug, Clone)]
pub struct Handler {
    pattern: String,
    command: String,
}

fn parse_handler(text: &str) -> Result<Handler, String> {
    let (pattern, command) = text.split_once('=').ok_or_else(|| {
        format!("{text:?} is not PATTERN=COMMAND (for example 'order.*=./handle.sh')")
    })?;
    let pattern = pattern.trim();
    if pattern.is_empty() {
        return Err(format!("{text:?} has no pattern before '='"));
    }
    if command.trim().is_empty() {
        return Err(format!("{text:?} has no command after '='"));
    }
    Ok(Handler {
        pattern: pattern.to_owned(),
        command: command.to_owned(),
    })
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    match durabus::options::parse_delay("timeout", text) {
        Ok(d) if d.is_zero() => Err("the timeout must be above 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn run(db: &crate::cmd::Db, args: Args) -> anyhow::Result<()> {
    let mut patterns: Vec<&str> = args.handlers.iter().map(|h| h.pattern.as_str()).collect();
    patterns.sort_unstable();
    if let Some(w) = patterns.windows(2).find(|w| w[0] == w[1]) {
        anyhow::bail!("--handler: the pattern {:?} is given twice", w[0]);
    }
    let bus = db
        .builder()
        .concurrency(usize::from(args.concurrency))
        .build()
        .await
        .with_context(|| format!("cannot open {}", db.display()))?;
    for handler in &args.handlers {
        let mut options = SubscribeOptions::default()
            .name(handler.pattern.clone())
            // The bus's own timeout drops the run, which kills the command (`kill_on_drop`).
            .timeout(args.timeout);
        if let Some(n) = args.max_retries {
            options = options.retry(RetryOverride::default().max_retries(n));
        }
        let command = handler.command.clone();
        let subscription = handler.pattern.clone();
        bus.subscribe(
            &handler.pattern,
            move |event: Event| run_command(command.clone(), subscription.clone(), event),
            options,
        )
        .await
        .with_context(|| format!("--handler {}", handler.pattern))?;
    }
    bus.start().await?;
    outln!(
        "durabus worker on {}: {} handler(s), {} at once",
        db.display(),
        args.handlers.len(),
        args.concurrency
    );
    tracing::info!(target: "durabus_cli", handlers = args.handlers.len(), "worker started");
    let stopped = tokio::select! {
        () = crate::cmd::serve::stop_signal() => "signal",
        r = idle(&bus), if args.exit_when_idle => { r?; "idle" }
    };
    let closed = bus.shutdown().await;
    tracing::info!(target: "durabus_cli", reason = stopped, "worker stopped");
    closed?;
    Ok(())
}

/// Returns once nothing is pending or being delivered (read every 100 ms).
async fn idle(bus: &durabus::EventBus) -> anyhow::Result<()> {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let g = bus.store().gauges(bus.clock().now()).await?;
        if g.pending == 0 && g.processing == 0 {
            return Ok(());
        }
    }
}

/// One handler run: the command for `event`.
async fn run_command(
    command: String,
    subscription: String,
    event: Event,
) -> durabus::HandlerResult {
    let metadata = serde_json::to_string(&event.metadata)?;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg("-c")
        .arg(&command)
        .env("DURABUS_EVENT_ID", event.id.to_string())
        .env("DURABUS_EVENT_TYPE", &event.event_type)
        .env("DURABUS_ATTEMPT", event.attempt().to_string())
        .env("DURABUS_SUBSCRIPTION", &subscription)
        .env("DURABUS_METADATA", metadata)
        .stdin(Stdio::piped())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // Its own process group, so that what it starts (a pipeline, a `sleep`) ends with it.
    #[cfg(unix)]
    cmd.process_group(0);
    for (key, var) in [("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE")] {
        if let Some(v) = event.metadata.get(key) {
            cmd.env(var, v);
        }
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run sh -c {command:?}: {e}"))?;
    // Killed when the run ends, or is dropped at its timeout or at shutdown.
    let mut group = Group(child.id());
    let mut stdin = child
        .stdin
        .take()
        .ok_or("the command's standard input is missing")?;
    let mut stderr = child
        .stderr
        .take()
        .ok_or("the command's standard error is missing")?;
    let payload = event.payload.clone();
    // Written beside the reads: a command that does not read its input must not block on a
    // full error pipe meanwhile (a broken pipe is the command's choice, not a failure).
    let write = async move {
        let _ = stdin.write_all(payload.as_bytes()).await;
        drop(stdin);
    };
    let read = async move {
        let mut tail = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stderr.read(&mut buf).await {
                Ok(0) | Err(_) => return tail,
                Ok(n) => {
                    tail.extend_from_slice(&buf[..n]);
                    let excess = tail.len().saturating_sub(ERROR_TAIL);
                    tail.drain(..excess);
                }
            }
        }
    };
    let waited = async {
        let ((), status) = tokio::join!(write, child.wait());
        // The command is done: what it left running goes too, which ends its error output.
        group.kill();
        status
    };
    let (status, tail) = tokio::join!(waited, read);
    let status = status?;
    if status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&tail).trim().to_owned();
    let how = match status.code() {
        Some(code) => format!("exit status {code}"),
        None => "killed by a signal".to_owned(),
    };
    let error = if said.is_empty() {
        format!("the command failed ({how})")
    } else {
        format!("the command failed ({how}): {said}")
    };
    if status.code() == Some(PERMANENT_EXIT) {
        return durabus::handler::permanent(error);
    }
    Err(error.into())
}

/// A command's process group (its leader's pid), killed when dropped.
struct Group(Option<u32>);

impl Group {
    /// Kills the group once (its pid may be another's after that).
    fn kill(&mut self) {
        let leader = self.0.take();
        #[cfg(not(unix))]
        let _ = leader;
        #[cfg(unix)]
        if let Some(pid) = leader
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // Already gone is fine.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

//! `durabus bench-worker` (hidden): one worker process of the PostgreSQL benchmark and of the
//! multi-process tests. It delivers `bench.*` events with a no-op (or slow, or randomly
//! failing) handler, writes one report line per handler call (`<event id> <publish-to-handler
//! µs or -> <start µs> <end µs> <payload key or -> <payload n or -> <ok|err>`), prints `ready`
//! once started, and shuts down when its standard input closes.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use durabus::{Event, PgOptions, SubscribeOptions};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Where to write the report (one line per handler call).
    #[arg(long)]
    report: PathBuf,
    /// The lease (abandonment timeout), in ms.
    #[arg(long, default_value_t = 300_000)]
    lease_ms: u64,
    /// How long each handler call takes, in ms.
    #[arg(long, default_value_t = 0)]
    handler_ms: u64,
    /// Write each report line at once (for tests that kill the worker).
    #[arg(long)]
    sync_report: bool,
    /// Events delivered at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Percent of handler calls that fail (at random).
    #[arg(long, default_value_t = 0)]
    fail_percent: u32,
    /// The wait before each retry, in ms (the retry policy's base and cap); unset: the default
    /// policy.
    #[arg(long)]
    retry_ms: Option<u64>,
    /// Retries before an event is dead-lettered (with --retry-ms).
    #[arg(long, default_value_t = 3)]
    max_retries: u32,
}

/// Microseconds since the Unix epoch.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

pub async fn run(db: &crate::cmd::Db, args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(db.is_postgres(), "bench-worker needs a postgres:// --db");
    let options = PgOptions {
        lease: Duration::from_millis(args.lease_ms),
        ..db.pg_options()
    };
    let mut builder = durabus::EventBus::builder()
        .postgres_with(&db.target, options)
        .concurrency(args.concurrency);
    if let Some(ms) = args.retry_ms {
        builder = builder.retry_policy(durabus::RetryPolicy {
            max_retries: args.max_retries,
            base_delay: Duration::from_millis(ms),
            max_delay: Duration::from_millis(ms),
            backoff_multiplier: 1.0,
        });
    }
    let bus = builder
        .build()
        .await
        .with_context(|| format!("cannot open {}", db.display()))?;
    let file = std::fs::File::create(&args.report)
        .with_context(|| format!("cannot write {}", args.report.display()))?;
    let out = Arc::new(Mutex::new(std::io::BufWriter::new(file)));
    let sink = out.clone();
    let (pause, sync) = (Duration::from_millis(args.handler_ms), args.sync_report);
    let fail_percent = args.fail_percent;
    bus.subscribe(
        "bench.*",
        move |e: Event| {
            let start = now_us();
            let payload = e.payload_value();
            let latency = payload
                .get("sent_us")
                .and_then(serde_json::Value::as_u64)
                .map(|sent| start.saturating_sub(sent));
            let key = payload
                .get("key")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("-")
                .to_owned();
            let n = payload
                .get("n")
                .and_then(serde_json::Value::as_u64)
                .map_or("-".to_owned(), |n| n.to_string());
            let sink = sink.clone();
            async move {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                } else if key != "-" {
                    // Long enough for a second call of the key to overlap if one were let in.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let fail = fail_percent > 0 && fastrand::u32(0..100) < fail_percent;
                let mut w = sink.lock().map_err(|_| "report writer poisoned")?;
                let latency = latency.map_or("-".to_owned(), |us| us.to_string());
                let outcome = if fail { "err" } else { "ok" };
                writeln!(
                    w,
                    "{} {latency} {start} {} {key} {n} {outcome}",
                    e.id,
                    now_us()
                )?;
                if sync {
                    w.flush()?;
                }
                if fail {
                    return Err("a chosen failure".into());
                }
                Ok(())
            }
        },
        SubscribeOptions::default().name("bench-worker"),
    )
    .await?;
    bus.start().await?;
    outln!("ready");
    std::io::stdout().flush()?;
    // Run until the parent closes our standard input.
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await?;
    bus.shutdown().await?;
    out.lock()
        .map_err(|_| anyhow::anyhow!("report writer poisoned"))?
        .flush()?;
    Ok(())
}

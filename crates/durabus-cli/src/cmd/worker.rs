//! `durabus bench-worker` (hidden): one worker process of the PostgreSQL benchmark and of the
//! multi-process tests. It delivers `bench.*` events with a no-op (or slow) handler, writes one
//! report line per handler call (`<event id> <publish-to-handler µs or ->`), prints `ready`
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
    let bus = durabus::EventBus::builder()
        .postgres_with(&db.target, options)
        .concurrency(args.concurrency)
        .build()
        .await
        .with_context(|| format!("cannot open {}", db.display()))?;
    let file = std::fs::File::create(&args.report)
        .with_context(|| format!("cannot write {}", args.report.display()))?;
    let out = Arc::new(Mutex::new(std::io::BufWriter::new(file)));
    let sink = out.clone();
    let (pause, sync) = (Duration::from_millis(args.handler_ms), args.sync_report);
    bus.subscribe(
        "bench.*",
        move |e: Event| {
            let latency = e
                .payload_value()
                .get("sent_us")
                .and_then(serde_json::Value::as_u64)
                .map(|sent| now_us().saturating_sub(sent));
            let sink = sink.clone();
            async move {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                let mut w = sink.lock().map_err(|_| "report writer poisoned")?;
                match latency {
                    Some(us) => writeln!(w, "{} {us}", e.id)?,
                    None => writeln!(w, "{} -", e.id)?,
                }
                if sync {
                    w.flush()?;
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

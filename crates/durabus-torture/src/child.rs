//! The child process: publishes at a steady rate and handles events until it is killed, or
//! drains the store and exits. Everything it promises goes to standard output (the ledger's
//! protocol); everything its handlers do goes to the delivery log.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use durabus::{Event, EventBus, NewEvent, SubscribeOptions};

use crate::check::Kind;
use crate::ledger::DeliveryLog;
use crate::target::Target;

/// What a child does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Publishes and handles (one process, SQLite's usual shape).
    Both,
    /// Publishes only.
    Publisher,
    /// Handles only.
    Worker,
    /// Handles until nothing is pending or processing, shuts down cleanly and exits.
    Drain,
}

/// A child's settings (its command line).
#[derive(Debug, Clone, clap::Args)]
pub struct ChildArgs {
    /// The store: `sqlite:<path>` or `pg:<schema>@<url>`.
    #[arg(long)]
    pub target: String,
    /// What to do.
    #[arg(long, value_enum)]
    pub role: Role,
    /// The delivery log.
    #[arg(long)]
    pub deliveries: PathBuf,
    /// This process's life number (one per start).
    #[arg(long)]
    pub life: u32,
    /// Publishing tasks.
    #[arg(long, default_value_t = 4)]
    pub publishers: usize,
    /// Pause of each publishing task between publishes, in microseconds.
    #[arg(long, default_value_t = 1000)]
    pub pause_us: u64,
    /// One event in this many always fails (and ends dead-lettered).
    #[arg(long, default_value_t = 10)]
    pub fail_every: u64,
    /// Event kinds: `basic` (succeeding and always-failing ones) or `handlers` (also
    /// panicking, hanging, thread-blocking and too-slow handlers).
    #[arg(long, default_value = "basic")]
    pub mix: String,
    /// Publish one poison event (its handler aborts the process) before anything else.
    #[arg(long)]
    pub poison: bool,
    /// SQLite: how long a write waits for the write lock before it fails, in milliseconds: the
    /// bus's writes, and the outbox's own connection (which otherwise waits up to 10 s).
    #[arg(long)]
    pub lock_timeout_ms: Option<u64>,
    /// Publish only batches of this many events (0: mix every way of publishing).
    #[arg(long, default_value_t = 0)]
    pub batch: usize,
    /// PostgreSQL lease, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub lease_ms: u64,
    /// Stop publishing after this many publishes (0: never).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,
    /// Submits a bulk retry of the pending dead letters this often, in milliseconds (0: never).
    #[arg(long, default_value_t = 0)]
    pub bulk_every_ms: u64,
    /// Handlers of events meant to succeed take this long (awaiting, not blocking), so that a
    /// frozen process is caught in the middle of its handlers.
    #[arg(long, default_value_t = 0)]
    pub handler_ms: u64,
    /// A draining child does not finish before this file exists (the parent creates it once
    /// every publisher is done).
    #[arg(long)]
    pub wait_file: Option<PathBuf>,
    /// Read this host's clock as it is, uncorrected (a bus on PostgreSQL reads the server's
    /// clock by default): the clock-skew scenario's broken variant, which the checker must
    /// catch.
    #[arg(long)]
    pub host_clock: bool,
    /// PostgreSQL: run on a pool of the application's own (`postgres_pool`, plain `sqlx`
    /// settings) instead of the store's: the partition scenario's broken variant, whose
    /// sessions lack the server-side limits for a client that vanishes.
    #[arg(long)]
    pub own_pool: bool,
    /// The soak's operator work, this often in milliseconds (0: never): a replay of the last
    /// 5 s to a handler that does nothing (the delivery log is left alone), a metrics scrape,
    /// and the reads the admin API makes (dead letters, history, failure groups).
    #[arg(long, default_value_t = 0)]
    pub extras_every_ms: u64,
    /// The bulk retries take only dead letters that died within this many milliseconds (0:
    /// every pending one): a long run retries each a bounded number of times.
    #[arg(long, default_value_t = 0)]
    pub bulk_window_ms: u64,
    /// The soak's broken variant: keep this many more KiB of memory every second (0: none), a
    /// leak the soak's judge must catch.
    #[arg(long, default_value_t = 0)]
    pub leak_kib_per_s: usize,
}

/// Every handler's time limit.
const HANDLER_TIMEOUT: Duration = Duration::from_millis(200);

/// What the handler of `kind` does with an event. Every run is logged before it ends (a
/// hanging or aborting run as a failure, logged before it hangs or aborts).
async fn handle(
    kind: Kind,
    id: durabus::EventId,
    log: &DeliveryLog,
    work: Duration,
) -> durabus::HandlerResult {
    match kind {
        Kind::Ok => {
            if !work.is_zero() {
                tokio::time::sleep(work).await;
            }
            log.record(id, true);
            Ok(())
        }
        Kind::Fail => {
            log.record(id, false);
            Err("this event always fails".into())
        }
        Kind::Panic => {
            log.record(id, false);
            panic!("this handler always panics");
        }
        Kind::Hang => {
            log.record(id, false);
            std::future::pending().await
        }
        Kind::Block | Kind::Slow => {
            // Deliberately blocking the runtime's thread, as a careless handler would.
            let ms = if kind == Kind::Block { 20 } else { 300 };
            std::thread::sleep(Duration::from_millis(ms));
            log.record(id, true);
            Ok(())
        }
        Kind::Poison => {
            log.record(id, false);
            eprintln!("poison event {id}: aborting the process");
            std::process::abort()
        }
    }
}

/// Prints one protocol line. Rust's standard output is line-buffered: the line is in the
/// pipe when this returns, so the parent sees it even if the process dies right after.
fn say(line: std::fmt::Arguments<'_>) {
    println!("{line}");
}

/// Runs a child to its end (or its kill).
pub fn run(args: ChildArgs) -> anyhow::Result<()> {
    // The store's warnings (a late outcome refused, a lease not renewed) go to standard
    // error, where the parent counts the refusals.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::new("durabus::store=warn"))
        .with_ansi(false)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(main(args))
}

async fn main(args: ChildArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target)?;
    let delivers = args.role != Role::Publisher;
    let mut builder = target.builder_with(
        Duration::from_millis(args.lease_ms),
        args.lock_timeout_ms.map(Duration::from_millis),
    );
    if args.host_clock {
        builder = builder.clock(Arc::new(durabus::SystemClock));
    }
    if args.own_pool
        && let Target::Postgres { url, schema } = &target
    {
        let pool = durabus::sqlx::postgres::PgPoolOptions::new()
            .max_connections(6)
            .connect(url)
            .await
            .context("connecting the application's pool")?;
        builder = builder.postgres_pool(
            pool,
            durabus::PgOptions {
                schema: schema.clone(),
                lease: Duration::from_millis(args.lease_ms),
                ..durabus::PgOptions::default()
            },
        );
    }
    let bus = builder
        .deliver(delivers)
        // Background errors go to standard error, which the parent shows with
        // TORTURE_VERBOSE set.
        .on_error(|e| {
            eprintln!(
                "bus error ({:?}, retrying: {}): {:#}",
                e.source, e.retrying, e.error
            )
        })
        .build()
        .await
        .context("opening the bus")?;
    say(format_args!("O"));
    if delivers {
        let log = Arc::new(DeliveryLog::open(&args.deliveries, args.life)?);
        // One subscription per kind: a failing kind's breaker and retries are its own.
        let work = Duration::from_millis(args.handler_ms);
        for kind in Kind::ALL {
            let log = log.clone();
            bus.subscribe(
                kind.event_type(),
                move |e: Event| {
                    let log = log.clone();
                    async move { handle(kind, e.id, &log, work).await }
                },
                SubscribeOptions::default()
                    .name(kind.event_type())
                    .timeout(HANDLER_TIMEOUT),
            )
            .await?;
        }
    }
    let recovered = bus.start().await.context("starting the bus")?;
    say(format_args!("S {recovered}"));
    if args.bulk_every_ms > 0 {
        let (bus, every) = (bus.clone(), Duration::from_millis(args.bulk_every_ms));
        let window = Duration::from_millis(args.bulk_window_ms);
        tokio::spawn(async move {
            let mut request = durabus::BulkRequest {
                filter: durabus::DeadLetterFilter {
                    status: vec![durabus::DeadLetterStatus::Pending],
                    ..durabus::DeadLetterFilter::default()
                },
                action: durabus::Action::Retry,
                all: false,
            };
            let actor = durabus::Actor::new("torture", durabus::ActorKind::Library);
            loop {
                tokio::time::sleep(every).await;
                if !window.is_zero() {
                    request.filter.created_from = Some(bus.clock().now().minus(window));
                }
                if let Err(e) = bus.dead_letters().submit(&request, &actor).await {
                    eprintln!("bulk retry not submitted: {e}");
                }
            }
        });
    }
    if args.extras_every_ms > 0 {
        tokio::spawn(operator_work(
            bus.clone(),
            Duration::from_millis(args.extras_every_ms),
        ));
    }
    if args.leak_kib_per_s > 0 {
        let kib = args.leak_kib_per_s;
        tokio::spawn(async move {
            let mut kept = Vec::new();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                // Written, so the pages count in the resident set.
                kept.push(vec![1u8; kib * 1024]);
            }
        });
    }
    match args.role {
        Role::Both | Role::Publisher => publish(&bus, &target, &args).await,
        Role::Worker => std::future::pending().await,
        Role::Drain => drain(&bus, args.wait_file.as_deref()).await,
    }
}

/// How the n-th publish of a task is made.
#[derive(Debug, Clone, Copy)]
enum Method {
    Publish,
    Enqueue,
    Batch,
    Outbox,
}

async fn publish(bus: &EventBus, target: &Target, args: &ChildArgs) -> anyhow::Result<()> {
    if args.poison {
        let event = NewEvent::new(
            Kind::Poison.event_type(),
            &serde_json::json!({"poison": true}),
        )?;
        let id = event.id;
        say(format_args!("I {} {id}", Kind::Poison.event_type()));
        bus.enqueue_event(event).await?;
        say(format_args!("A {id}"));
    }
    anyhow::ensure!(
        matches!(args.mix.as_str(), "basic" | "handlers"),
        "unknown mix {:?}",
        args.mix
    );
    let counter = Arc::new(AtomicU64::new(0));
    // The application's own pool, for outbox writes in its own transactions; with several
    // servers (the failover scenario), the store's, which follows the primary.
    let pool = match target {
        Target::Postgres { url, .. } if url.contains(',') => match bus.store().backend() {
            durabus::Backend::Postgres(store) => Some(store.pool().clone()),
            _ => None,
        },
        Target::Postgres { url, .. } => Some(
            durabus::sqlx::postgres::PgPoolOptions::new()
                .max_connections(args.publishers as u32)
                .connect(url)
                .await?,
        ),
        Target::Sqlite(_) => None,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..args.publishers {
        let (bus, target, counter) = (bus.clone(), target.clone(), counter.clone());
        let pool = pool.clone();
        let (pause, fail_every, limit) = (args.pause_us, args.fail_every.max(1), args.limit);
        let role = args.role;
        let handlers_mix = args.mix == "handlers";
        let outbox_busy = args
            .lock_timeout_ms
            .map_or(Duration::from_secs(10), Duration::from_millis);
        let batch = args.batch;
        tasks.spawn(async move {
            let mut sqlite_conn = None;
            let mut n = task as u64;
            loop {
                let seq = counter.fetch_add(1, Ordering::Relaxed);
                if limit > 0 && seq >= limit {
                    return Ok::<(), anyhow::Error>(());
                }
                n += 1;
                let kind = if handlers_mix {
                    match seq % 20 {
                        0 => Kind::Panic,
                        1 => Kind::Hang,
                        2 => Kind::Block,
                        3 => Kind::Slow,
                        4 => Kind::Fail,
                        _ => Kind::Ok,
                    }
                } else if seq % fail_every == fail_every - 1 {
                    Kind::Fail
                } else {
                    Kind::Ok
                };
                // `publish` delivers in the calling process: only where handlers run.
                let method = match (n % 4, role) {
                    (0, Role::Both) => Method::Publish,
                    (0 | 1, _) => Method::Enqueue,
                    (2, _) => Method::Batch,
                    _ => Method::Outbox,
                };
                let (method, count) = match batch {
                    0 if matches!(method, Method::Batch) => (method, 5),
                    0 => (method, 1),
                    n => (Method::Batch, n),
                };
                let events = (0..count)
                    .map(|i| {
                        NewEvent::new(kind.event_type(), &serde_json::json!({"seq": seq, "i": i}))
                    })
                    .collect::<durabus::Result<Vec<_>>>()?;
                let list = events
                    .iter()
                    .map(|e| e.id.to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                say(format_args!("I {} {list}", kind.event_type()));
                let result = match method {
                    Method::Publish => bus
                        .publish_event(events.into_iter().next().context("one")?)
                        .await
                        .map(drop),
                    Method::Enqueue => bus
                        .enqueue_event(events.into_iter().next().context("one")?)
                        .await
                        .map(drop),
                    Method::Batch => bus.enqueue_batch(events).await.map(drop),
                    Method::Outbox => {
                        let conn = &mut sqlite_conn;
                        outbox(&bus, &target, pool.as_ref(), conn, outbox_busy, events).await
                    }
                };
                match result {
                    Ok(()) => say(format_args!("A {list}")),
                    Err(e) => {
                        say(format_args!("X {}", e.to_string().replace('\n', " ")));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                tokio::time::sleep(Duration::from_micros(pause)).await;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    // Everything published (a limit was set).
    say(format_args!("P"));
    if args.role == Role::Both {
        return drain(bus, None).await;
    }
    bus.shutdown().await?;
    Ok(())
}

/// Writes `events` through the outbox, in a transaction of this process's own connection.
async fn outbox(
    bus: &EventBus,
    target: &Target,
    pool: Option<&durabus::sqlx::PgPool>,
    sqlite_conn: &mut Option<durabus::rusqlite::Connection>,
    busy: Duration,
    events: Vec<NewEvent>,
) -> durabus::Result<()> {
    match target {
        Target::Sqlite(path) => {
            let outbox = bus.outbox()?;
            let path = path.clone();
            let mut conn = match sqlite_conn.take() {
                Some(c) => c,
                None => {
                    let c = durabus::rusqlite::Connection::open(&path)?;
                    c.busy_timeout(busy)?;
                    c
                }
            };
            // The application's connection is blocking: off the runtime's threads.
            let (conn, result) = tokio::task::spawn_blocking(move || {
                let result = (|| {
                    let tx = conn.transaction_with_behavior(
                        durabus::rusqlite::TransactionBehavior::Immediate,
                    )?;
                    outbox.publish_batch(&tx, events)?;
                    tx.commit()?;
                    Ok(())
                })();
                (conn, result)
            })
            .await
            .map_err(|e| durabus::Error::Internal(e.to_string()))?;
            *sqlite_conn = Some(conn);
            result
        }
        Target::Postgres { .. } => {
            let outbox = bus.pg_outbox()?;
            let pool = pool.ok_or_else(|| durabus::Error::Internal("no pool".into()))?;
            let mut tx = pool.begin().await?;
            outbox
                .publish_batch(&mut tx, events, bus.clock().now())
                .await?;
            tx.commit().await?;
            Ok(())
        }
    }
}

/// Handles until the store holds nothing pending or processing three looks in a row.
async fn drain(bus: &EventBus, wait_file: Option<&std::path::Path>) -> anyhow::Result<()> {
    let store = bus.store();
    let mut quiet = 0;
    // Five minutes from when draining may finish (the wait file, if any, exists).
    let mut deadline: Option<tokio::time::Instant> = None;
    while quiet < 3 {
        if let Some(deadline) = deadline {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the drain did not finish in 5 minutes"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        // The gauges count pending and processing events on their partial indexes: a poll
        // must not scan the whole history (a read that long, back to back, would
        // keep the WAL from ever being emptied; see the store's `wal_limit`).
        let gauges = store.gauges(durabus::Timestamp::now()).await?;
        let busy = gauges.pending + gauges.processing;
        let allowed = wait_file.is_none_or(std::path::Path::exists);
        if allowed && deadline.is_none() {
            deadline = Some(tokio::time::Instant::now() + Duration::from_secs(300));
        }
        quiet = if allowed && busy == 0 && bus.in_flight() == 0 {
            quiet + 1
        } else {
            0
        };
        if std::env::var_os("TORTURE_VERBOSE").is_some() {
            eprintln!(
                "drain: {busy} pending or processing, {} in flight",
                bus.in_flight()
            );
        }
    }
    let t = std::time::Instant::now();
    bus.shutdown().await?;
    if std::env::var_os("TORTURE_VERBOSE").is_some() {
        eprintln!("drain: shut down in {:?}", t.elapsed());
    }
    say(format_args!("D"));
    Ok(())
}

/// What operators do to a running bus, every `every`: replay the last 5 s to a handler that
/// does nothing, scrape the metrics, list dead letters, history and failure groups. Failures
/// go to standard error (shown with `TORTURE_VERBOSE`); the soak judges the process by its
/// resources.
async fn operator_work(bus: EventBus, every: Duration) {
    let actor = durabus::Actor::new("torture", durabus::ActorKind::Library);
    let hooks = durabus::ReplayHooks::new().handler(|_e: Event| async { Ok(()) });
    loop {
        tokio::time::sleep(every).await;
        let now = bus.clock().now();
        let request = durabus::ReplayRequest::new(durabus::ReplaySelection::range(
            now.minus(Duration::from_secs(5)),
            Some(now),
        ))
        .rate_limit(20_000);
        if let Err(e) = bus.replays().replay(&request, &actor, &hooks).await {
            eprintln!("replay failed: {e}");
        }
        if let Err(e) = bus.metrics_text().await {
            eprintln!("scrape failed: {e}");
        }
        if let Err(e) = bus.dlq().list(durabus::Page::default()).await {
            eprintln!("dead-letter list failed: {e}");
        }
        if let Err(e) = bus.history().list(durabus::EventQuery::default()).await {
            eprintln!("history list failed: {e}");
        }
        if let Err(e) = bus.dead_letters().groups(50).await {
            eprintln!("failure groups failed: {e}");
        }
    }
}

//! The runner of durable operations: it claims one, then drives its chunks until it ends,
//! pauses or fails. A runner that dies leaves the operation `running` with a lease that runs
//! out; another runner takes it over and goes on from the last chunk written.
//!
//! The runner knows nothing of kinds. Each kind implements [`Kind`] where its data lives
//! (bulk dead-letter actions in `dlq`, replays in `replay`): given a claimed operation it makes
//! a [`Work`], whose [`step`](Work::step) does one chunk and writes it with the operation's
//! progress in one transaction. What the runner does between chunks is [`state::next`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::pace::{Pace, PaceConfig};
use super::state::{self, Next};
use super::{Advance, Operation, OperationKind, OperationStatus};
use crate::clock::{Clock, Timestamp};
use crate::error::{Error, ErrorKind, Result};
use crate::hook::{ErrorHook, ErrorSource};
use crate::store::{Backend, Store};
use crate::telemetry::Telemetry;

/// How an operation is run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Rows per chunk (one transaction each), fixed. `None`: a size that adapts to how long
    /// each chunk's write takes, so that a chunk never holds the store for long while others
    /// publish (see [`PaceConfig`] and [`default_pace`]). Defaults to `None`.
    pub chunk: Option<usize>,
    /// The bounds and target of the adapting chunk size when `chunk` is `None`; `None`: what
    /// suits the store ([`default_pace`]). Defaults to `None`.
    pub pace: Option<PaceConfig>,
    /// How long the runner holds the operation without writing a chunk before others may take
    /// it over. Defaults to 30 s.
    pub lease: Duration,
    /// Who runs it (stored as the holder). Defaults to this process's name.
    pub holder: String,
    /// Set to stop at the next chunk boundary; the operation stays `running` and is resumed
    /// by the next runner. Defaults to never.
    pub pause: Arc<AtomicBool>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            chunk: None,
            pace: None,
            lease: Duration::from_secs(30),
            holder: crate::holder::worker_name(),
            pause: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// How chunks are sized on a store when no fixed size is asked for. SQLite has one writer:
/// a chunk's transaction makes every publisher wait behind it, so a chunk aims at 1.5 ms (from
/// 50 rows, between 10 and 2,000). PostgreSQL locks rows, not the database, and a chunk's
/// round trips are worth sharing among more rows; publishers do not wait for a chunk there
/// but share the server's time with it, and what they lose depends on the bulk's share more
/// than on its chunks' length (docs/BENCHMARKS.md), so a chunk aims at 50 ms (from 500 rows,
/// between 100 and 5,000): long enough to keep a bulk action's own overhead small, bounded so
/// one chunk never holds its rows and a connection for long.
pub fn default_pace(backend: &Backend<'_>) -> PaceConfig {
    match backend {
        #[cfg(feature = "postgres")]
        Backend::Postgres(_) => PaceConfig {
            start: 500,
            min: 100,
            max: 5_000,
            target: Duration::from_millis(50),
        },
        #[allow(unreachable_patterns)]
        _ => PaceConfig {
            start: 50,
            min: 10,
            max: 2_000,
            target: Duration::from_micros(1_500),
        },
    }
}

/// What a kind's work runs with: the store, the clock, how it runs, the metrics.
#[derive(Clone)]
pub struct RunContext {
    /// The store.
    pub store: Arc<dyn Store>,
    /// The clock (rate limits pace on it).
    pub clock: Arc<dyn Clock>,
    /// How the operation is run.
    pub options: RunOptions,
    /// The metrics to count in, if any.
    pub telemetry: Option<Arc<Telemetry>>,
    /// The size of the next chunk.
    pub pace: Pace,
}

impl std::fmt::Debug for RunContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunContext")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RunContext {
    /// The time now.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// A context for running with `options` on `store`: its chunks are sized as `options`
    /// asks, or as suits the store.
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        options: RunOptions,
        telemetry: Option<Arc<Telemetry>>,
    ) -> RunContext {
        let pace = match options.chunk {
            Some(rows) => Pace::fixed(rows),
            None => Pace::adaptive(
                options
                    .pace
                    .unwrap_or_else(|| default_pace(&store.backend())),
            ),
        };
        RunContext {
            store,
            clock,
            options,
            telemetry,
            pace,
        }
    }

    /// Rows the next chunk takes.
    pub fn chunk(&self) -> usize {
        self.pace.rows()
    }

    /// Runs `write`, a chunk's write of `rows` rows, and sizes the next chunk by how long it
    /// took (see [`Pace`]). A write that fails sizes nothing.
    pub async fn paced<T>(&self, rows: usize, write: impl Future<Output = Result<T>>) -> Result<T> {
        let started = std::time::Instant::now();
        let out = write.await?;
        if rows > 0 {
            self.pace.record(rows, started.elapsed());
        }
        Ok(out)
    }

    /// Whether the runner was asked to pause.
    pub fn pausing(&self) -> bool {
        self.options.pause.load(Ordering::SeqCst)
    }

    /// Writes `advance` for operation `id` held by this runner, in one transaction. Fails with
    /// [`Error::Conflict`] (nothing written) when this runner no longer holds it running.
    pub async fn advance(&self, id: &str, advance: Advance) -> Result<Operation> {
        self.store
            .operation_advance(
                id,
                &self.options.holder,
                advance,
                self.options.lease,
                self.now(),
            )
            .await
    }

    /// Ends `op` cancelled, writing nothing else: what a kind without an announcement does.
    pub async fn finish_cancelled(&self, op: &Operation) -> Result<Operation> {
        let advance = Advance {
            cursor: op.cursor,
            cursor_key: op.cursor_key.clone(),
            finish: Some(OperationStatus::Cancelled),
            ..Advance::default()
        };
        self.advance(&op.id, advance).await
    }

    /// Marks `op` failed with `error`; a failure to write that is logged.
    pub async fn fail_plainly(&self, op: &Operation, error: &Error) {
        if let Err(e) = self
            .store
            .operation_fail(&op.id, &self.options.holder, &error.to_string(), self.now())
            .await
        {
            tracing::warn!(operation = %op.id, error = %e, "could not record an operation's failure");
        }
    }

    /// Lets go of `op` now, so the next runner takes it over at once.
    pub async fn release(&self, op: &Operation) -> Result<()> {
        self.store
            .operation_release(&op.id, &self.options.holder, self.now())
            .await
    }
}

/// The chunks of one claimed operation, as its kind runs them.
#[async_trait]
pub trait Work: Send {
    /// Does the next chunk of `op` and writes it, with the operation's progress, in one
    /// transaction. Returns the operation after it (finished once its selection is used up).
    async fn step(&mut self, op: &Operation) -> Result<Operation>;

    /// Ends `op` cancelled at this chunk boundary (announcing its end, where the kind does).
    async fn cancel(&mut self, op: &Operation) -> Result<Operation>;

    /// Ends `op` failed with `error` (announcing it, where the kind does). Best effort.
    async fn fail(&mut self, op: &Operation, error: &Error);
}

/// A kind of operation a runner can run.
pub trait Kind: Send + Sync {
    /// The operation kinds it runs.
    fn kinds(&self) -> &'static [OperationKind];

    /// Whether any runner may take `op`, rather than only the process that submitted it (a
    /// replay with a handler of that process). Defaults to any.
    fn runs_anywhere(&self, op: &Operation) -> bool {
        let _ = op;
        true
    }

    /// The work of `op`, claimed by a runner with `ctx`. An error fails the operation.
    fn work(&self, op: &Operation, ctx: RunContext) -> Result<Box<dyn Work>>;
}

/// The kinds a runner can run.
#[derive(Clone, Default)]
pub struct Kinds {
    kinds: Vec<Arc<dyn Kind>>,
}

impl std::fmt::Debug for Kinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .kinds
            .iter()
            .flat_map(|k| k.kinds().iter().map(|k| k.as_str()))
            .collect();
        f.debug_tuple("Kinds").field(&names).finish()
    }
}

impl Kinds {
    /// None yet.
    pub fn new() -> Kinds {
        Kinds::default()
    }

    /// Adds `kind` (a later kind for the same [`OperationKind`] replaces an earlier one).
    #[must_use]
    pub fn with(mut self, kind: impl Kind + 'static) -> Kinds {
        self.kinds.insert(0, Arc::new(kind));
        self
    }

    /// The kind that runs `kind`, if any.
    pub fn get(&self, kind: OperationKind) -> Option<&Arc<dyn Kind>> {
        self.kinds.iter().find(|k| k.kinds().contains(&kind))
    }
}

/// Claims operations and drives their chunks.
#[derive(Clone)]
pub struct Runner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    telemetry: Option<Arc<Telemetry>>,
    hook: ErrorHook,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner").finish_non_exhaustive()
    }
}

impl Runner {
    /// A runner on `store` reading `clock`.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Runner {
        Runner {
            store,
            clock,
            telemetry: None,
            hook: ErrorHook::default(),
        }
    }

    /// Counts what its operations do in `telemetry` (a bus's metrics).
    #[must_use]
    pub fn observed(mut self, telemetry: Option<Arc<Telemetry>>) -> Runner {
        self.telemetry = telemetry;
        self
    }

    /// Hands chunk failures that are retried to `hook` (a bus's error hook).
    #[must_use]
    pub fn hooked(mut self, hook: ErrorHook) -> Runner {
        self.hook = hook;
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The time now, on the runner's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// One operation. Fails with [`Error::NotFound`].
    pub async fn get(&self, id: &str) -> Result<Operation> {
        self.store
            .operation_get(id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("operation {id}"),
            })
    }

    /// Runs operation `id` with the kind `kinds` has for it, until it finishes (or
    /// `options.pause` is set), calling `progress` after each chunk. Returns the operation as
    /// it ended. Fails with [`Error::NotFound`], or [`Error::Conflict`] when another live
    /// runner holds it; an error that is not passing (the store refusing the chunk) fails the
    /// operation and is returned.
    pub async fn run(
        &self,
        id: &str,
        options: &RunOptions,
        kinds: &Kinds,
        mut progress: impl FnMut(&Operation) + Send,
    ) -> Result<Operation> {
        let claimed = self
            .store
            .operation_claim(id, &options.holder, options.lease, self.now())
            .await?;
        let Some(mut op) = claimed else {
            let op = self.get(id).await?;
            if op.status.is_finished() {
                return Ok(op);
            }
            return Err(Error::Conflict {
                what: format!("operation {id}"),
                status: op.status.as_str().to_owned(),
                message: format!(
                    "operation {id} is being run by another process; it takes over once that one's lease runs out"
                ),
            });
        };
        progress(&op);
        let ctx = RunContext::new(
            self.store.clone(),
            self.clock.clone(),
            options.clone(),
            self.telemetry.clone(),
        );
        let work = match kinds.get(op.kind) {
            Some(kind) => kind.work(&op, ctx.clone()),
            None => Err(Error::invalid(
                "kind",
                format!(
                    "operation {id} is of kind {}, which this runner cannot run",
                    op.kind
                ),
                "a kind registered with the runner",
            )),
        };
        let mut work = match work {
            Ok(work) => work,
            Err(e) => {
                tracing::error!(operation = id, error = %e, "an operation could not start");
                ctx.fail_plainly(&op, &e).await;
                return Err(e);
            }
        };
        let mut failures = 0u32;
        loop {
            let step = match state::next(op.status, op.cancel_requested, ctx.pausing()) {
                Next::Finished => return Ok(op),
                Next::Pause => {
                    ctx.release(&op).await?;
                    return Ok(op);
                }
                Next::Cancel => work.cancel(&op).await,
                Next::Step => work.step(&op).await,
            };
            match step {
                Ok(next) => {
                    failures = 0;
                    op = next;
                    progress(&op);
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    if let Some(pause) = passing(&e, &mut failures) {
                        tracing::warn!(operation = id, error = %e, ?pause, "an operation's chunk failed; retrying");
                        self.hook
                            .report(ErrorSource::Operation(Some(id.to_owned())), &e, true);
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    if e.kind() == ErrorKind::Conflict {
                        // Taken over (our lease ran out), cancelled elsewhere, or in need of
                        // what only another process has: not ours to fail.
                        return Err(e);
                    }
                    tracing::error!(operation = id, error = %e, "an operation failed");
                    work.fail(&op, &e).await;
                    return Err(e);
                }
            }
        }
    }

    /// Cancels operation `id`: at once if it has not started (see [`state::cancel`]) or nobody
    /// is running it (its runner died: this runner takes it and its first step is the
    /// cancel), else at its next chunk. Fails with [`Error::NotFound`], or
    /// [`Error::Conflict`] when it has finished.
    pub async fn cancel(&self, id: &str, kinds: &Kinds) -> Result<Operation> {
        let op = self.store.operation_cancel(id, self.now()).await?;
        if op.status != OperationStatus::Running {
            return Ok(op);
        }
        match self.run(id, &RunOptions::default(), kinds, |_| {}).await {
            Ok(op) => Ok(op),
            Err(e) if e.kind() == ErrorKind::Conflict => self.get(id).await,
            Err(e) => Err(e),
        }
    }

    /// The operations a runner of `kinds` may take now (submitted, or left by a runner that
    /// died), oldest first, at most 16; those only the process that submitted them can run
    /// are left to it.
    pub async fn claimable(&self, kinds: &Kinds) -> Result<Vec<Operation>> {
        let now = self.now();
        Ok(self
            .store
            .operation_open(256)
            .await?
            .into_iter()
            .filter(|op| {
                state::may_claim(
                    op.status,
                    op.holder.as_deref(),
                    op.lease_expires_at,
                    "",
                    now,
                ) && kinds.get(op.kind).is_some_and(|k| k.runs_anywhere(op))
            })
            .take(16)
            .collect())
    }
}

/// Whether `e` is passing (the database busy or briefly unreachable) and, if so, how long to
/// wait before trying again: 100 ms doubling, eight times; `failures` counts the tries.
pub fn passing(e: &Error, failures: &mut u32) -> Option<Duration> {
    if matches!(e.kind(), ErrorKind::Locked | ErrorKind::Unavailable) && *failures < 8 {
        *failures += 1;
        Some(Duration::from_millis(50u64 << *failures))
    } else {
        None
    }
}

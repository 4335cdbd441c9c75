//! Running durable operations: claim, then chunks until the end, each chunk and its progress
//! in one transaction. A runner that dies leaves the operation `running` with a lease that
//! runs out; another runner (a bus's operations task, or `durabus operations resume`) takes it
//! over and goes on from the last chunk written.

use crate::telemetry::Telemetry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, ErrorKind, Result};
use crate::operation::{ChunkReport, Operation, OperationStatus};
use crate::replay::ReplayHooks;
use crate::store::Store;

/// How an operation is run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Rows per chunk (one transaction each). `None`: what suits the store
    /// ([`Backend::bulk_chunk`](crate::store::Backend::bulk_chunk): 50 on SQLite, where small
    /// chunks keep the one writer free for publishers; 500 on PostgreSQL). Defaults to `None`.
    pub chunk: Option<usize>,
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
            lease: Duration::from_secs(30),
            holder: crate::holder::worker_name(),
            pause: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// Durable operations on a store: read, cancel, run.
#[derive(Debug, Clone)]
pub struct Operations {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    telemetry: Option<Arc<Telemetry>>,
    hook: crate::hook::ErrorHook,
}

impl Operations {
    /// On `store`, reading the system clock.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store, Arc::new(SystemClock))
    }

    /// On `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Operations {
            store,
            clock,
            telemetry: None,
            hook: crate::hook::ErrorHook::default(),
        }
    }

    /// Counts what runs through this service (dead-letter actions, replayed events) in
    /// `telemetry` (a bus's metrics).
    pub(crate) fn observed(mut self, telemetry: Option<Arc<Telemetry>>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Hands chunk failures that are retried to `hook` (a bus's error hook).
    pub(crate) fn hooked(mut self, hook: crate::hook::ErrorHook) -> Self {
        self.hook = hook;
        self
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

    /// Operations, newest first (at most `limit`; only `status` and only `kind`, one of
    /// [`OPERATION_KINDS`](crate::OPERATION_KINDS) such as `replay` or `dead_letters.retry`,
    /// if given). An unknown kind is [`Error::InvalidConfig`].
    pub async fn list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        if let Some(kind) = kind.filter(|k| !crate::OPERATION_KINDS.contains(k)) {
            return Err(Error::InvalidConfig(format!(
                "unknown operation kind {kind:?}; expected one of {}",
                crate::OPERATION_KINDS.join(", ")
            )));
        }
        self.store.operation_list(status, kind, limit).await
    }

    /// Cancels an operation: at once if it has not started or nobody is running it (its
    /// runner died), else at its next chunk. A replay that had started publishes
    /// `system.replay.completed` (status `cancelled`). Fails with [`Error::NotFound`], or
    /// [`Error::Conflict`] when it has finished.
    pub async fn cancel(&self, id: &str) -> Result<Operation> {
        let op = self.store.operation_cancel(id, self.clock.now()).await?;
        if op.status != OperationStatus::Running {
            return Ok(op);
        }
        // Taken here only if no live runner holds it; then its first step is the cancel.
        match self
            .run_with(id, &RunOptions::default(), &ReplayHooks::default(), |_| {})
            .await
        {
            Ok(op) => Ok(op),
            Err(e) if e.kind() == ErrorKind::Conflict => self.get(id).await,
            Err(e) => Err(e),
        }
    }

    /// Runs operation `id` until it finishes (or `options.pause` is set), calling `progress`
    /// after each chunk. Returns the operation as it ended. Fails with [`Error::NotFound`],
    /// or [`Error::Conflict`] when another live runner holds it; an error that is not
    /// passing (the store refusing the chunk) fails the operation and is returned.
    pub async fn run(
        &self,
        id: &str,
        options: &RunOptions,
        progress: impl FnMut(&Operation) + Send,
    ) -> Result<Operation> {
        self.run_with(id, options, &ReplayHooks::default(), progress)
            .await
    }

    /// [`run`](Self::run), with what a replay started by this process needs (its handler or
    /// filter).
    pub(crate) async fn run_with(
        &self,
        id: &str,
        options: &RunOptions,
        hooks: &ReplayHooks,
        mut progress: impl FnMut(&Operation) + Send,
    ) -> Result<Operation> {
        let claimed = self
            .store
            .operation_claim(id, &options.holder, options.lease, self.clock.now())
            .await?;
        let mut op = match claimed {
            Some(op) => op,
            None => {
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
            }
        };
        progress(&op);
        if op.kind == crate::replay::KIND {
            let run = crate::replay::Run {
                store: &self.store,
                clock: &self.clock,
                options,
                hooks,
                telemetry: self.telemetry.as_deref(),
            };
            return run.drive(op, &mut progress).await;
        }
        let mut failures = 0u32;
        while !op.status.is_finished() {
            if options.pause.load(Ordering::SeqCst) {
                self.store
                    .operation_release(id, &options.holder, self.clock.now())
                    .await?;
                return Ok(op);
            }
            match self.chunk(&op, options).await {
                Ok(report) => {
                    failures = 0;
                    if let (Some(t), Some(action)) =
                        (&self.telemetry, op.kind.strip_prefix("dead_letters."))
                    {
                        t.dead_letter_action(action, op.actor.kind.as_str(), report.processed);
                    }
                    op = self.get(id).await?;
                    progress(&op);
                    if report.finished {
                        break;
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => {
                    if let Some(pause) = passing(&e, &mut failures) {
                        tracing::warn!(operation = id, error = %e, ?pause, "an operation's chunk failed; retrying");
                        self.hook.report(
                            crate::hook::ErrorSource::Operation(Some(id.to_owned())),
                            &e,
                            true,
                        );
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                    if e.kind() == ErrorKind::Conflict {
                        // Taken over (our lease ran out) or cancelled elsewhere: not ours to fail.
                        return Err(e);
                    }
                    tracing::error!(operation = id, error = %e, "an operation failed");
                    self.store
                        .operation_fail(id, &options.holder, &e.to_string(), self.clock.now())
                        .await?;
                    return Err(e);
                }
            }
        }
        Ok(op)
    }

    async fn chunk(&self, op: &Operation, options: &RunOptions) -> Result<ChunkReport> {
        let chunk = options
            .chunk
            .unwrap_or_else(|| self.store.backend().bulk_chunk());
        if op.kind.starts_with("dead_letters.") {
            return self
                .store
                .dlq_bulk_chunk(
                    &op.id,
                    &options.holder,
                    chunk,
                    options.lease,
                    self.clock.now(),
                )
                .await;
        }
        Err(Error::InvalidConfig(format!(
            "operation {} is of kind {:?}, which this build cannot run",
            op.id, op.kind
        )))
    }

    /// The operations a runner may take now (submitted, or left by a runner that died),
    /// oldest first; replays that need the process that started them (a handler or a filter)
    /// are left to it.
    pub async fn claimable(&self) -> Result<Vec<Operation>> {
        Ok(self
            .store
            .operation_claimable(self.clock.now(), 16)
            .await?
            .into_iter()
            .filter(|op| {
                !(op.kind == crate::replay::KIND
                    && crate::replay::ReplayParams::is_attached(&op.params))
            })
            .collect())
    }

    /// Runs every operation that can be taken now (see [`claimable`](Self::claimable)), oldest
    /// first, one after another. Returns how many it ran to their end.
    pub async fn run_claimable(&self, options: &RunOptions) -> Result<usize> {
        let mut done = 0;
        for op in self.claimable().await? {
            if options.pause.load(Ordering::SeqCst) {
                break;
            }
            match self.run(&op.id, options, |_| {}).await {
                Ok(op) if op.status.is_finished() => done += 1,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => {
                    tracing::warn!(operation = %op.id, error = %e, "an operation could not run")
                }
            }
        }
        Ok(done)
    }
}

/// Whether `e` is passing (the database busy or briefly unreachable) and, if so, how long to
/// wait before trying again: 100 ms doubling, eight times; `failures` counts the tries.
pub(crate) fn passing(e: &Error, failures: &mut u32) -> Option<Duration> {
    if matches!(e.kind(), ErrorKind::Locked | ErrorKind::Unavailable) && *failures < 8 {
        *failures += 1;
        Some(Duration::from_millis(50u64 << *failures))
    } else {
        None
    }
}

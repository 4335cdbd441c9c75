//! [`Operations`]: durable operations for operators and applications, whatever their kind:
//! read, list, cancel, run, resume. Every kind of this build is registered here; the
//! [`Runner`] it drives them with knows none of them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::runner::{Kinds, RunOptions, Runner};
use super::{Operation, OperationKind, OperationStatus};
use crate::clock::Clock;
use crate::error::{ErrorKind, Result};
use crate::hook::ErrorHook;
use crate::store::Store;
use crate::telemetry::Telemetry;

/// Durable operations on a store: read, cancel, run.
#[derive(Debug, Clone)]
pub struct Operations {
    runner: Runner,
    kinds: Kinds,
}

impl Operations {
    /// On `store`, reading the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// On `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Operations {
            runner: Runner::new(store, clock),
            kinds: Self::kinds(),
        }
    }

    /// Every kind this build runs: each bulk dead-letter action, and replays (re-published;
    /// a replay with a handler or a filter runs only where [`crate::Replays::run`] gives them).
    pub fn kinds() -> Kinds {
        Kinds::new()
            .with(crate::dlq::BulkKind)
            .with(crate::replay::ReplayKind::default())
    }

    /// Counts what runs through this service (dead-letter actions, replayed events) in
    /// `telemetry` (a bus's metrics).
    pub(crate) fn observed(mut self, telemetry: Option<Arc<Telemetry>>) -> Self {
        self.runner = self.runner.observed(telemetry);
        self
    }

    /// Hands chunk failures that are retried to `hook` (a bus's error hook).
    pub(crate) fn hooked(mut self, hook: ErrorHook) -> Self {
        self.runner = self.runner.hooked(hook);
        self
    }

    /// One operation. Fails with [`Error::NotFound`](crate::Error::NotFound).
    pub async fn get(&self, id: &str) -> Result<Operation> {
        self.runner.get(id).await
    }

    /// Operations, newest first (at most `limit`; only `status` and only `kind` if given).
    pub async fn list(
        &self,
        status: Option<OperationStatus>,
        kind: Option<OperationKind>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        self.runner
            .store()
            .operation_list(status, kind, limit)
            .await
    }

    /// Cancels an operation: at once if it has not started or nobody is running it (its
    /// runner died), else at its next chunk. A replay that had started publishes
    /// `system.replay.completed` (status `cancelled`). Fails with
    /// [`Error::NotFound`](crate::Error::NotFound), or [`Error::Conflict`](crate::Error::Conflict)
    /// when it has finished.
    pub async fn cancel(&self, id: &str) -> Result<Operation> {
        self.runner.cancel(id, &self.kinds).await
    }

    /// Runs operation `id` until it finishes (or `options.pause` is set), calling `progress`
    /// after each chunk. Returns the operation as it ended. Fails with
    /// [`Error::NotFound`](crate::Error::NotFound), or [`Error::Conflict`](crate::Error::Conflict)
    /// when another live runner holds it (or it is a replay that needs the hooks of the
    /// process that started it); an error that is not passing (the store refusing the chunk)
    /// fails the operation and is returned.
    pub async fn run(
        &self,
        id: &str,
        options: &RunOptions,
        progress: impl FnMut(&Operation) + Send,
    ) -> Result<Operation> {
        self.runner.run(id, options, &self.kinds, progress).await
    }

    /// The operations a runner may take now (submitted, or left by a runner that died),
    /// oldest first; replays that need the process that started them (a handler or a filter)
    /// are left to it.
    pub async fn claimable(&self) -> Result<Vec<Operation>> {
        self.runner.claimable(&self.kinds).await
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

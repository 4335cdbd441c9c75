//! The bus's lifecycle: start (recovery, the worker, the maintenance tasks), the operations
//! runner, and graceful shutdown.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::EventBus;
use crate::error::Result;

impl EventBus {
    /// Starts the background workers. First recovers events a crash left in `processing` (back
    /// to `pending` with `retry_count + 1`) so they are delivered again. Returns how many were
    /// recovered. Subscribe before starting, so recovered events find their handlers. Calling it
    /// again does nothing and returns 0. A bus built with
    /// [`deliver(false)`](crate::BusBuilder::deliver) neither recovers nor claims: it starts
    /// the maintenance jobs and the operations runner only, and returns 0.
    pub async fn start(&self) -> Result<u64> {
        self.check_open()?;
        let life = &self.inner.life;
        if life.started.swap(true, Ordering::SeqCst) {
            return Ok(0);
        }
        let deliver = self.config().deliver;
        let recovered = if deliver {
            match self.recover_and_start_store().await {
                Ok(n) => n,
                Err(e) => {
                    // Not started: a later call may try again.
                    life.started.store(false, Ordering::SeqCst);
                    self.config()
                        .on_error
                        .report(crate::hook::ErrorSource::Recovery, &e, false);
                    return Err(e);
                }
            }
        } else {
            0
        };
        if recovered > 0 {
            tracing::info!(recovered, "recovered events left in processing by a crash");
        }
        {
            // Read once before the worker's first claim, then kept fresh.
            self.refresh_pauses().await;
            let (pauses, dispatcher) = (self.pauses(), self.dispatcher().clone());
            let every = self.config().pause_refresh;
            let hook = self.config().on_error.clone();
            life.supervisor
                .spawn("pauses and breakers", move |shutdown| {
                    super::pauses::run(pauses, dispatcher, every, hook, shutdown)
                });
        }
        if deliver {
            let dispatcher = self.dispatcher().clone();
            life.supervisor.spawn("worker", move |shutdown| {
                crate::dispatch::worker::run(dispatcher, shutdown)
            });
        }
        if self.config().scheduler.enabled {
            let scheduler = self.inner.scheduler.clone();
            life.supervisor
                .spawn("scheduler", move |shutdown| scheduler.run(shutdown));
            let dispatcher = self.dispatcher().clone();
            let changed = self.inner.periodic_changed.clone();
            life.supervisor.spawn("periodic", move |shutdown| {
                crate::periodic::run(dispatcher, changed, shutdown)
            });
        }
        if self.config().payload_snapshots {
            let payloads = self.inner.payloads.clone();
            let hook = self.config().on_error.clone();
            life.supervisor.spawn("payload-configs", move |mut shutdown| async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(crate::payload::CONFIG_REFRESH) => {}
                        _ = shutdown.recv() => return,
                    }
                    if let Err(e) = payloads.reload().await {
                        tracing::warn!(error = %e, "could not reload the payload configuration");
                        hook.report(crate::hook::ErrorSource::PayloadConfig, &e, true);
                    }
                }
            });
        }
        let operations = self.operations();
        let every = self.config().operations_poll;
        let hook = self.config().on_error.clone();
        life.supervisor.spawn("operations", move |shutdown| {
            run_operations(operations, every, hook, shutdown)
        });
        Ok(recovered)
    }

    /// Crash recovery, then the store's own background work (PostgreSQL's lease heartbeats).
    pub(super) async fn recover_and_start_store(&self) -> Result<u64> {
        let store = self.store();
        let recovered = store
            .recover_processing(self.clock().now())
            .await
            .map_err(Self::map_closed)?;
        store.start_background(self.clock());
        Ok(recovered)
    }

    /// Graceful shutdown: new publishes and subscribes fail with [`Error::Shutdown`](crate::Error::Shutdown), the workers
    /// stop claiming, in-flight dispatches get up to `shutdown_timeout` to finish, then the store
    /// is closed. Handlers still running after the timeout are abandoned; their events stay
    /// `processing` and are recovered by the next start. Calling it again is harmless.
    pub async fn shutdown(&self) -> Result<()> {
        let life = &self.inner.life;
        let mut closed = life.closed.lock().await;
        if *closed {
            return Ok(());
        }
        life.shutting_down.store(true, Ordering::SeqCst);
        life.supervisor.drain().await;
        let d = self.dispatcher();
        // The concurrency slots kept for runs that will not come go back now; the runs still
        // going give theirs back as they end.
        d.close_slots().await;
        // Rows of unnamed subscriptions belong to this process alone; named rows stay, since a
        // later process with the same names carries on their delivery records.
        for sub in d.registry().all() {
            if sub.name.is_none()
                && let Err(e) = d.store().delete_subscription(&sub.id).await
            {
                tracing::warn!(subscription_id = %sub.id, error = %e, "could not remove the subscription row");
                d.config().on_error.report(
                    crate::hook::ErrorSource::SubscriptionCleanup,
                    &e,
                    false,
                );
            }
        }
        let timeout = d.config().shutdown_timeout;
        if tokio::time::timeout(timeout, d.inflight().wait_idle())
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = d.inflight().count(),
                timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                "shutdown timed out waiting for handlers; their events will be recovered on the next start"
            );
        }
        let result = d.store().close().await;
        *closed = true;
        result
    }
}

/// The bus's operations task: every `every`, starts each operation that can be taken
/// (submitted, or left by a runner that died) on a task of its own, so a long, rate-limited
/// replay does not hold up a bulk retry submitted after it. At shutdown the running ones
/// pause at their next chunk boundary and are resumed by the next start.
async fn run_operations(
    operations: crate::Operations,
    every: std::time::Duration,
    hook: crate::hook::ErrorHook,
    mut shutdown: crate::shutdown::Shutdown,
) {
    let options = crate::RunOptions::default();
    let mut running: tokio::task::JoinSet<()> = tokio::task::JoinSet::new();
    let active = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    loop {
        // Look after a pause, not at once: a start has its own work (recovery, the first
        // claims) and an operation waits a second at most.
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shutdown.recv() => break,
        }
        while running.try_join_next().is_some() {}
        let claimable = match operations.claimable().await {
            Ok(ops) => ops,
            Err(e) => {
                tracing::warn!(error = %e, "looking for operations to run failed");
                hook.report(crate::hook::ErrorSource::Operation(None), &e, true);
                continue;
            }
        };
        for op in claimable {
            if !crate::sync::lock(&active).insert(op.id.clone()) {
                continue;
            }
            let (operations, options, active, hook) = (
                operations.clone(),
                options.clone(),
                active.clone(),
                hook.clone(),
            );
            running.spawn(async move {
                match operations.run(&op.id, &options, |_| {}).await {
                    Ok(_) => {}
                    Err(e) if e.kind() == crate::ErrorKind::Conflict => {}
                    Err(e) => {
                        tracing::warn!(operation = %op.id, error = %e, "an operation could not run");
                        hook.report(
                            crate::hook::ErrorSource::Operation(Some(op.id.clone())),
                            &e,
                            false,
                        );
                    }
                }
                crate::sync::lock(&active).remove(&op.id);
            });
        }
    }
    options.pause.store(true, Ordering::SeqCst);
    while running.join_next().await.is_some() {}
}

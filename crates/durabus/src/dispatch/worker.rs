//! The background worker loop: claim due events in batches into a local queue, deliver them
//! with at most `concurrency` running at once, and hand finished outcomes to a completer that
//! writes them in batches. When nothing is due, sleep until woken by a write, by the earliest
//! retry time, by a clock jump or by the poll interval.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use crate::bus::Inner;
use crate::bus::inflight::InFlightGuard;
use crate::event::Event;
use crate::store::Outcome;

/// An outcome on its way to the store, with the in-flight guard that makes shutdown wait for
/// the write.
type Finished = (Outcome, InFlightGuard);

/// Most outcomes written in one store call.
const COMPLETION_BATCH: usize = 1024;

/// Writes finished deliveries' outcomes in batches: one store call for all that are waiting.
async fn complete(inner: Arc<Inner>, mut rx: mpsc::UnboundedReceiver<Finished>) {
    let mut buf = Vec::with_capacity(COMPLETION_BATCH);
    while rx.recv_many(&mut buf, COMPLETION_BATCH).await > 0 {
        let (outcomes, guards): (Vec<Outcome>, Vec<InFlightGuard>) = buf.drain(..).unzip();
        crate::dispatch::record_batch(&inner, outcomes).await;
        drop(guards);
    }
}

pub(crate) async fn run_worker(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(inner.config.concurrency));
    let wake = inner.store.wakeups();
    let mut jumps = inner.clock.jumps();
    let mut failures = 0u32;
    let mut queue: VecDeque<Event> = VecDeque::new();
    let (finished, finished_rx) = mpsc::unbounded_channel::<Finished>();
    tokio::spawn(complete(inner.clone(), finished_rx));

    loop {
        if *stop.borrow() {
            break;
        }
        let slot = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = stop.changed() => break,
        };
        if queue.is_empty() {
            // Register for wake-ups before looking, so a write that lands meanwhile is not missed.
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match inner
                .store
                .claim_due(inner.clock.now(), inner.config.claim_batch)
                .await
            {
                Ok(events) => {
                    failures = 0;
                    queue.extend(events);
                }
                Err(e) => {
                    drop(slot);
                    failures = failures.saturating_add(1);
                    let pause = Duration::from_millis(10u64 << failures.min(8));
                    tracing::error!(error = %e, ?pause, "claiming due events failed; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue,
                        _ = stop.changed() => break,
                    }
                }
            }
            if queue.is_empty() {
                drop(slot);
                let sleep_for = match inner.store.next_due().await {
                    Ok(Some(due)) => inner.clock.now().until(due).min(inner.config.poll_interval),
                    _ => inner.config.poll_interval,
                };
                tokio::select! {
                    _ = &mut notified => {}
                    _ = tokio::time::sleep(sleep_for) => {}
                    _ = stop.changed() => break,
                    _ = jumped(&mut jumps) => {}
                }
                continue;
            }
        }
        if let Some(event) = queue.pop_front() {
            spawn_delivery(&inner, event, slot, finished.clone());
        }
    }
    // Claimed but never started: give them back without counting an attempt.
    if !queue.is_empty() {
        let ids = queue.iter().map(|e| e.id).collect();
        if let Err(e) = inner.store.release(ids, inner.clock.now()).await {
            tracing::warn!(error = %e, events = queue.len(), "could not release queued events; the next start recovers them");
        }
    }
}

/// Renews this process's leases every `every`, from `start` until shutdown has drained the
/// deliveries in flight.
pub(crate) async fn heartbeat(inner: Arc<Inner>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = inner.store.heartbeat(inner.clock.now()).await {
            tracing::warn!(error = %e, "could not renew leases; retrying at the next beat");
        }
    }
}

fn spawn_delivery(
    inner: &Arc<Inner>,
    event: Event,
    slot: OwnedSemaphorePermit,
    finished: mpsc::UnboundedSender<Finished>,
) {
    let guard = inner.inflight.enter();
    let inner = inner.clone();
    tokio::spawn(async move {
        let outcome = crate::dispatch::attempt(&inner, event).await;
        // The slot is free once the handlers are done; the guard stays until the outcome is
        // written, so shutdown waits for the write.
        drop(slot);
        // The completer outlives every sender; if it is gone the runtime is stopping and the
        // event is recovered on the next start.
        let _ = finished.send((outcome, guard));
    });
}

async fn jumped(jumps: &mut Option<watch::Receiver<i64>>) {
    match jumps {
        Some(rx) => {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

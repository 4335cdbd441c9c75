//! The background worker loop: claim due events in batches, deliver them concurrently (up to
//! `concurrency`), and sleep until woken by a write, by the earliest retry time, by a clock jump
//! or by the poll interval.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, watch};

use crate::bus::Inner;

/// Returns a slot to the semaphore when a delivery ends, even by panic.
struct Slot(Arc<Semaphore>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.add_permits(1);
    }
}

pub(crate) async fn run_worker(inner: Arc<Inner>, mut stop: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(inner.config.concurrency));
    let wake = inner.store.wakeups();
    let mut jumps = inner.clock.jumps();
    let mut failures = 0u32;
    loop {
        if *stop.borrow() {
            return;
        }
        let first = tokio::select! {
            p = slots.clone().acquire_many_owned(1) => match p { Ok(p) => p, Err(_) => return },
            _ = stop.changed() => return,
        };
        let want = 1 + slots.available_permits();
        // Register for wake-ups before looking, so a write that lands meanwhile is not missed.
        let notified = wake.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let claimed = match inner.store.claim_due(inner.clock.now(), want).await {
            Ok(events) => {
                failures = 0;
                events
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let pause = Duration::from_millis(10u64 << failures.min(8));
                tracing::error!(error = %e, ?pause, "claiming due events failed; retrying");
                drop(first);
                tokio::select! {
                    _ = tokio::time::sleep(pause) => continue,
                    _ = stop.changed() => return,
                }
            }
        };
        let got = claimed.len();
        first.forget();
        if got > 1 {
            match slots
                .clone()
                .try_acquire_many_owned(u32::try_from(got - 1).unwrap_or(u32::MAX))
            {
                Ok(p) => p.forget(),
                Err(_) => tracing::error!("worker slots out of step; continuing"),
            }
        }
        if got == 0 {
            slots.add_permits(1);
        }
        for event in claimed {
            let slot = Slot(slots.clone());
            let guard = inner.inflight.enter();
            let inner = inner.clone();
            tokio::spawn(async move {
                crate::dispatch::deliver(&inner, event).await;
                drop(guard);
                drop(slot);
            });
        }
        if got == want {
            continue;
        }
        let sleep_for = match inner.store.next_due().await {
            Ok(Some(due)) => inner.clock.now().until(due).min(inner.config.poll_interval),
            _ => inner.config.poll_interval,
        };
        if got > 0 && sleep_for.is_zero() {
            continue;
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep(sleep_for) => {}
            _ = stop.changed() => return,
            _ = jumped(&mut jumps) => {}
        }
    }
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

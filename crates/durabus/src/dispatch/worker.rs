//! The background worker loop. It claims due events into a small local queue, delivers them
//! with at most `concurrency` running at once, and hands finished outcomes to a completer task
//! that writes them in batches. A claim takes at most the free delivery slots plus a prefetch,
//! so a worker never holds (and, on PostgreSQL, leases) many more events than it gets through
//! soon (see [`Pacer`]). While a backlog lasts, the next claim runs beside the deliveries once
//! the queue is half down (see [`ahead`](super::ahead)). When nothing is due it sleeps until
//! woken by a write, by the earliest due time, by a clock jump, by the poll interval, by
//! shutdown, or by an enqueue that hands it its event (see [`handoff`](super::handoff)).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

use super::ahead::{self, Ahead, Claimed};
use super::handoff::Handed;
use super::inflight::InFlightGuard;
use super::{Attempted, Dispatcher};
use crate::event::Event;
use crate::shutdown::Shutdown;
use crate::store::Outcome;

/// An outcome (and its snapshot) on its way to the store, with the in-flight guard that makes
/// shutdown wait for the write and its place among the outcomes not yet recorded.
type Finished = (Attempted, InFlightGuard, Unrecorded);

/// Most outcomes written in one store call.
const COMPLETION_BATCH: usize = 1024;

/// Most deliveries started whose outcomes are not yet recorded. When the store writes outcomes
/// slowly (lock waits, a bloated table), the loop stops claiming at this many instead of
/// claiming on as handlers finish: every event it holds is one more lease to renew and one
/// more outcome waiting, and on PostgreSQL the renewals then slow the writes further. The
/// reliability suite saw 3,900 held events and a drain at a crawl before this bound.
const UNRECORDED_MAX: usize = COMPLETION_BATCH;

/// The deliveries started whose outcomes are not yet recorded, at most `max`, and a signal for
/// the loop waiting for room. Only the loop adds to the count, so checking and adding need no
/// lock: an atomic and a `Notify` cost less per delivery than a semaphore, whose every
/// release takes a lock.
#[derive(Debug)]
struct Outstanding {
    count: AtomicUsize,
    room: Notify,
    max: usize,
}

/// One delivery counted in [`Outstanding`]; dropping it (once the outcome is written, or
/// when the delivery never started) makes room for another.
struct Unrecorded(Arc<Outstanding>);

impl Outstanding {
    fn new(max: usize) -> Arc<Outstanding> {
        Arc::new(Outstanding {
            count: AtomicUsize::new(0),
            room: Notify::new(),
            max,
        })
    }

    /// Waits until fewer than `max` deliveries are unrecorded, then counts one more. Only one
    /// task (the worker loop) may call this; dropping the future while it waits counts nothing.
    async fn enter(self: &Arc<Self>) -> Unrecorded {
        loop {
            if self.count.load(Ordering::Acquire) < self.max {
                self.count.fetch_add(1, Ordering::AcqRel);
                return Unrecorded(self.clone());
            }
            // Full: register for the signal, then look again, so room made meanwhile is seen.
            let room = self.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.count.load(Ordering::Acquire) < self.max {
                self.count.fetch_add(1, Ordering::AcqRel);
                return Unrecorded(self.clone());
            }
            room.await;
        }
    }
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == self.0.max {
            self.0.room.notify_one();
        }
    }
}

/// Writes finished deliveries' outcomes in batches: one store call for all that are waiting.
/// Ends when every sender (the loop and each delivery) is gone.
async fn complete(dispatcher: Arc<Dispatcher>, mut rx: mpsc::UnboundedReceiver<Finished>) {
    let mut buf = Vec::with_capacity(COMPLETION_BATCH);
    while rx.recv_many(&mut buf, COMPLETION_BATCH).await > 0 {
        // The deliveries of one claim finish together: let the others that are about to send
        // theirs do so, so they share this write instead of waiting for the next one.
        tokio::task::yield_now().await;
        while buf.len() < COMPLETION_BATCH {
            match rx.try_recv() {
                Ok(f) => buf.push(f),
                Err(_) => break,
            }
        }
        let mut attempts = Vec::with_capacity(buf.len());
        let mut held = Vec::with_capacity(buf.len());
        for (attempt, guard, permit) in buf.drain(..) {
            attempts.push(attempt);
            held.push((guard, permit));
        }
        let (outcomes, snapshots): (Vec<Outcome>, Vec<_>) = attempts.into_iter().unzip();
        dispatcher
            .record(outcomes, snapshots.into_iter().flatten().collect())
            .await;
        drop(held);
    }
}

/// The work a claim may queue beyond the free slots: what this worker finishes in this long
/// at its recent rate (at least `prefetch` events).
pub(crate) const PREFETCH_HORIZON: Duration = Duration::from_millis(50);

/// How many events one claim may take: the free delivery slots plus a prefetch of at least
/// `prefetch` events, or as many as the worker finishes within [`PREFETCH_HORIZON`] at
/// `rate` events/s, and never more than `claim_batch`. With slow handlers the prefetch stays
/// at `prefetch` (an event waits in the queue for at most one handler's run); with fast ones a
/// claim grows up to `claim_batch`, and a queued event still waits no more than about the
/// horizon.
pub(crate) fn claim_limit(free: usize, prefetch: usize, rate: f64, claim_batch: usize) -> usize {
    let by_rate = (rate.max(0.0) * PREFETCH_HORIZON.as_secs_f64()) as usize;
    free.saturating_add(prefetch.max(by_rate))
        .min(claim_batch)
        .max(1)
}

/// Finished events enough for a first rate estimate (see [`Pacer::rate`]).
const FIRST_ESTIMATE: u64 = 4;

/// Measures how fast this worker finishes events (a moving average), for [`claim_limit`].
#[derive(Debug)]
struct Pacer {
    finished: Arc<AtomicU64>,
    since: Instant,
    rate: f64,
}

impl Pacer {
    fn new() -> Pacer {
        Pacer {
            finished: Arc::new(AtomicU64::new(0)),
            since: Instant::now(),
            rate: 0.0,
        }
    }

    /// Events finished per second, recently; updated every few milliseconds, or as soon as
    /// `enough` events have finished (so a burst ramps up within its first claims). The first
    /// estimate needs only [`FIRST_ESTIMATE`] of them: until there is one, a claim ahead has no
    /// room beyond the prefetch, and a burst at start would wait for it.
    fn rate(&mut self, enough: u64) -> f64 {
        let elapsed = self.since.elapsed();
        let finished = self.finished.load(Ordering::Relaxed);
        let enough = if self.rate == 0.0 {
            enough.min(FIRST_ESTIMATE)
        } else {
            enough
        };
        let measurable = elapsed >= Duration::from_millis(5)
            || (finished >= enough && elapsed >= Duration::from_micros(100));
        if measurable {
            let done = self.finished.swap(0, Ordering::Relaxed) as f64;
            let now = done / elapsed.as_secs_f64();
            self.rate = if self.rate == 0.0 {
                now
            } else {
                0.7 * self.rate + 0.3 * now
            };
            self.since = Instant::now();
        }
        self.rate
    }
}

/// Runs until `shutdown` fires; then gives back the events it claimed but never started.
pub(crate) async fn run(dispatcher: Arc<Dispatcher>, mut shutdown: Shutdown) {
    let config = dispatcher.config().clone();
    let store = dispatcher.store().clone();
    let clock = dispatcher.clock().clone();
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let unrecorded = Outstanding::new(UNRECORDED_MAX);
    let wake = store.wakeups();
    let mut jumps = clock.jumps();
    let mut failures = 0u32;
    let mut queue: VecDeque<Event> = VecDeque::new();
    let (finished, finished_rx) = mpsc::unbounded_channel::<Finished>();
    tokio::spawn(complete(dispatcher.clone(), finished_rx));
    let mut pacer = Pacer::new();
    let mut last_full = 0usize;
    let mut ahead = Ahead::default();
    let handoff = dispatcher.handoff().clone();
    let mut handed = handoff.receiver();
    let mut paused = dispatcher.paused().changes();

    loop {
        if shutdown.is_shutdown() {
            break;
        }
        // Events handed over while the loop was busy are claimed already: queue them.
        queue_handed(&mut handed, &mut queue);
        if ahead.finished()
            && let Some(claimed) = ahead.take().await
        {
            last_full = queue_ahead(claimed, &mut queue);
        }
        // Room for one more outcome waiting to be written, then a free delivery slot.
        let write = tokio::select! {
            w = unrecorded.enter() => w,
            _ = shutdown.recv() => break,
        };
        let slot = tokio::select! {
            p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = shutdown.recv() => break,
        };
        if queue.is_empty() && ahead.running() {
            // The claim started ahead is still running: wait for it rather than start another.
            // Empty or failed, it is followed at once by an ordinary claim below, which
            // registers for wake-ups before it looks.
            let claimed = tokio::select! {
                c = ahead.take() => c,
                _ = shutdown.recv() => break,
            };
            if let Some(claimed) = claimed {
                last_full = queue_ahead(claimed, &mut queue);
            }
        }
        if queue.is_empty() && dispatcher.paused().bus(clock.now()).is_some() {
            // The whole bus is paused: no claims until the pause set changes (a resume, an
            // expiry, a refresh) or shutdown. What was claimed before runs out first; what the
            // store set aside for the next claim goes back.
            drop((slot, write));
            give_back_set_aside(&dispatcher).await;
            let changed = paused.changed();
            tokio::select! {
                _ = changed => {}
                // A write (an outcome that set the next event of a key aside, say): look again.
                _ = wake.notified() => {}
                _ = tokio::time::sleep(config.poll_interval) => {}
                _ = shutdown.recv() => break,
            }
            continue;
        }
        if queue.is_empty() {
            // Register for wake-ups before looking, so a write that lands meanwhile is not missed.
            let notified = wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let rate = pacer.rate(config.prefetch.max(16) as u64);
            let mut limit = claim_limit(
                slots.available_permits() + 1,
                config.prefetch,
                rate,
                config.claim_batch,
            );
            // Before the first measurement, a backlog doubles the claim each time the last one
            // came back full (and drained before the next): a burst ramps up in a few claims.
            if rate == 0.0 && last_full > 0 {
                limit = limit
                    .max(last_full.saturating_mul(2))
                    .min(config.claim_batch);
            }
            let (claimed, _) = ahead::claim(&dispatcher, limit).await;
            match claimed {
                Ok(events) => {
                    failures = 0;
                    last_full = fullness(events.len(), limit);
                    queue.extend(events);
                }
                Err(e) => {
                    drop((slot, write));
                    failures = failures.saturating_add(1);
                    let pause = config.error_backoff.pause(failures);
                    ahead::claim_failed(&dispatcher, &e, pause);
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => continue,
                        _ = shutdown.recv() => break,
                    }
                }
            }
            if queue.is_empty() {
                drop((slot, write));
                // Nothing more to run: the concurrency slots kept for the next runs go back.
                dispatcher.release_idle_slots().await;
                let sleep_for = match store.next_due().await {
                    Ok(Some(due)) => clock.now().until(due).min(config.poll_interval),
                    _ => config.poll_interval,
                };
                // A slot is free (this one, just given back): an enqueue may hand its event
                // over instead of waking the loop to claim it.
                handoff.wait();
                let woke = tokio::select! {
                    _ = &mut notified => None,
                    _ = tokio::time::sleep(sleep_for) => None,
                    _ = shutdown.recv() => {
                        handoff.stop_waiting();
                        break;
                    }
                    _ = jumped(&mut jumps) => None,
                    _ = paused.changed() => None,
                    h = next_handed(&mut handed) => h,
                };
                handoff.stop_waiting();
                if let Some(Handed::Event(e)) = woke {
                    queue.push_back(*e);
                }
                continue;
            }
        }
        if let Some(event) = queue.pop_front() {
            dispatcher.set_busy();
            spawn_delivery(
                &dispatcher,
                event,
                (slot, write),
                finished.clone(),
                pacer.finished.clone(),
            );
            // A backlog (the last claim came back full): once the queue is half down, claim
            // the next events beside the deliveries, within the same bound as any claim.
            if last_full > 0 && !ahead.running() && dispatcher.paused().bus(clock.now()).is_none() {
                let bound = claim_limit(
                    slots.available_permits(),
                    config.prefetch,
                    pacer.rate(config.prefetch.max(16) as u64),
                    config.claim_batch,
                );
                if let Some(limit) = ahead::room(bound, queue.len()) {
                    ahead.start(&dispatcher, limit);
                }
            }
        }
    }
    // No more hand-overs; what was handed and not started is given back with the queue, and
    // so is what a claim still running ahead brings.
    handoff.close();
    if let Some(rx) = handed.as_mut() {
        rx.close();
    }
    queue_handed(&mut handed, &mut queue);
    if let Some((Ok(events), _)) = ahead.take().await {
        queue.extend(events);
    }
    // Claimed but never started: give them back without counting an attempt.
    give_back_set_aside(&dispatcher).await;
    if !queue.is_empty() {
        let ids = queue.iter().map(|e| e.id).collect();
        if let Err(e) = store.release(ids, clock.now()).await {
            tracing::warn!(error = %e, events = queue.len(), "could not release queued events; the next start recovers them");
            config
                .on_error
                .report(crate::hook::ErrorSource::Release, &e, false);
        }
    }
}

/// Gives back what the store set aside for this loop's next claims (see
/// [`EventStore::give_back_set_aside`](crate::store::EventStore::give_back_set_aside)).
async fn give_back_set_aside(dispatcher: &Dispatcher) {
    let now = dispatcher.clock().now();
    if let Err(e) = dispatcher.store().give_back_set_aside(now).await {
        tracing::warn!(error = %e, "could not give back set-aside events; closing the store or the next start does");
        dispatcher
            .config()
            .on_error
            .report(crate::hook::ErrorSource::Release, &e, false);
    }
}

fn spawn_delivery(
    dispatcher: &Arc<Dispatcher>,
    event: Event,
    (slot, write): (OwnedSemaphorePermit, Unrecorded),
    finished: mpsc::UnboundedSender<Finished>,
    count: Arc<AtomicU64>,
) {
    let guard = dispatcher.inflight().enter();
    let dispatcher = dispatcher.clone();
    // Boxed: the delivery's state is about a kilobyte, and the runtime moves a spawned future
    // several times (into its task cell, through each stage) where a box moves one pointer.
    tokio::spawn(Box::pin(async move {
        let outcome = dispatcher.attempt(event).await;
        count.fetch_add(1, Ordering::Relaxed);
        // The slot is free once the handlers are done; the guard stays until the outcome is
        // written, so shutdown waits for the write.
        drop(slot);
        // The completer outlives every sender; if it is gone the runtime is stopping and the
        // event is recovered on the next start.
        let _ = finished.send((outcome, guard, write));
    }));
}

/// Queues the events a claim made ahead brought; returns the new `last_full`. A failed claim
/// (reported by its task when it failed) leaves 0: the ordinary claim that follows at once
/// retries, with its back-off.
fn queue_ahead((claimed, limit): Claimed, queue: &mut VecDeque<Event>) -> usize {
    match claimed {
        Ok(events) => {
            let full = fullness(events.len(), limit);
            queue.extend(events);
            full
        }
        Err(_) => 0,
    }
}

/// What a claim of `limit` that brought `got` events leaves in `last_full`: the limit if it
/// came back full (more is probably due), else 0.
fn fullness(got: usize, limit: usize) -> usize {
    if got == limit { limit } else { 0 }
}

/// Moves the events waiting in the hand-over channel into `queue`.
fn queue_handed(handed: &mut Option<mpsc::UnboundedReceiver<Handed>>, queue: &mut VecDeque<Event>) {
    if let Some(rx) = handed.as_mut() {
        while let Ok(h) = rx.try_recv() {
            if let Handed::Event(e) = h {
                queue.push_back(*e);
            }
        }
    }
}

/// The next hand-over; never resolves without a receiver (or once every sender is gone).
async fn next_handed(handed: &mut Option<mpsc::UnboundedReceiver<Handed>>) -> Option<Handed> {
    match handed {
        Some(rx) => match rx.recv().await {
            Some(h) => Some(h),
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
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

#[cfg(test)]
mod tests {
    use super::{FIRST_ESTIMATE, Outstanding, Pacer, claim_limit};

    #[tokio::test]
    async fn the_loop_waits_for_room_once_the_unrecorded_bound_is_reached_and_not_before() {
        let outstanding = Outstanding::new(2);
        let first = outstanding.enter().await;
        let second = outstanding.enter().await;
        let third = outstanding.enter();
        tokio::pin!(third);
        let waits = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(third.as_mut(), cx).is_pending())
        })
        .await;
        assert!(
            waits,
            "a third delivery must wait while two outcomes are unrecorded"
        );
        drop(first);
        let third = tokio::time::timeout(std::time::Duration::from_secs(5), third)
            .await
            .unwrap_or_else(|_| panic!("recording one outcome must make room"));
        assert_eq!(
            outstanding.count.load(std::sync::atomic::Ordering::Acquire),
            2
        );
        drop((second, third));
        assert_eq!(
            outstanding.count.load(std::sync::atomic::Ordering::Acquire),
            0
        );
        // With everything recorded, the loop enters at once again.
        let _a = outstanding.enter().await;
        let _b = outstanding.enter().await;
    }

    #[test]
    fn the_first_rate_estimate_needs_only_a_few_finished_events() {
        let mut pacer = Pacer::new();
        pacer
            .finished
            .store(FIRST_ESTIMATE, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(std::time::Duration::from_micros(200));
        let first = pacer.rate(16);
        assert!(first > 0.0, "{FIRST_ESTIMATE} finished events give a rate");
        assert_eq!(
            pacer.finished.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "the events measured are counted once"
        );
    }

    #[test]
    fn a_claim_takes_the_free_slots_plus_the_prefetch_within_the_batch_limit() {
        // Slow handlers (16 slots, 1 s each: 16 events/s): the prefetch stays at its minimum.
        assert_eq!(claim_limit(16, 16, 16.0, 256), 32);
        assert_eq!(claim_limit(1, 16, 0.0, 256), 17);
        // Fast ones: as many as the worker finishes within 50 ms, up to the batch limit.
        assert_eq!(claim_limit(16, 16, 2_000.0, 256), 116);
        assert_eq!(claim_limit(16, 16, 100_000.0, 256), 256);
        assert_eq!(claim_limit(200, 100, 0.0, 256), 256);
        assert_eq!(
            claim_limit(0, 0, 0.0, 256),
            1,
            "at least one event per claim"
        );
        assert_eq!(claim_limit(4, 16, f64::NAN, 256), 20, "no rate yet");
    }
}

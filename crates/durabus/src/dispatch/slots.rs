//! Concurrency limits in the dispatcher (see [`crate::concurrency`]): which subscriptions have
//! one (as this process last read them; with none set, asking costs one atomic load), the
//! per-process semaphores, and a run's slot taken before its handler and given back after,
//! or kept for the next run (see [`super::kept`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Dispatcher;
use super::kept::{Acquire, Bound, Kept, Run, Seen, Slot, Waiting};
use super::registry::Entry;
use crate::clock::Timestamp;
use crate::concurrency::{LEASE_MARGIN, PartitionBy, SlotAsk, SlotTake, WAIT_MARK};
use crate::event::Event;

/// How long a run waits in this process for the slot of another run of its own (see
/// [`super::kept`]) before it asks the store.
pub(crate) const LOCAL_WAIT: std::time::Duration = std::time::Duration::from_millis(25);

/// The most partitions with events waiting a refresh reads; with more, every partition of
/// the subscription counts as having some.
const WAITING_READ: u32 = 1_000;

/// A concurrency limit as this process last read it.
#[derive(Debug, Clone)]
pub(crate) struct Local {
    /// Runs at once in this process, if limited.
    per_process: Option<u32>,
    /// What splits the subscription's events into partitions, if anything.
    by: Option<PartitionBy>,
    /// Runs at once over all partitions, and of each.
    bound: Bound,
    /// When the limit was set.
    set_at: Timestamp,
}

/// This process's view of the concurrency-limited subscriptions, and the slots it keeps.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    limits: RwLock<Arc<HashMap<String, Local>>>,
    any: AtomicBool,
    /// Per-process semaphores by key, with the limit each was made for.
    local: Mutex<HashMap<String, (u32, Arc<Semaphore>)>>,
    /// Slots kept between runs.
    kept: Kept,
    /// The worker loop has events to run (a slot is kept only while it has).
    busy: AtomicBool,
}

impl Slots {
    /// The limited subscriptions, `None` when there are none.
    pub fn get(&self) -> Option<Arc<HashMap<String, Local>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        Some(crate::sync::read(&self.limits).clone())
    }

    /// Replaces the view.
    pub fn replace(&self, limits: HashMap<String, Local>) {
        let mut slot = crate::sync::write(&self.limits);
        self.any.store(!limits.is_empty(), Ordering::Release);
        *slot = Arc::new(limits);
    }

    /// The per-process semaphore of `key` for a limit of `n` (made anew when `n` changed).
    fn semaphore(&self, key: &str, n: u32) -> Arc<Semaphore> {
        let mut local = crate::sync::lock(&self.local);
        match local.get(key) {
            Some((m, s)) if *m == n => s.clone(),
            _ => {
                let s = Arc::new(Semaphore::new(n as usize));
                local.insert(key.to_owned(), (n, s.clone()));
                s
            }
        }
    }

    /// The worker loop has events to run, or not.
    pub fn set_busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Release);
    }
}

/// A run's hold on its subscription's limit: the per-process permit and the slot held in the
/// store, if any (given back or kept by [`Dispatcher::give_back`]).
pub(crate) struct Held {
    _permit: Option<OwnedSemaphorePermit>,
    slot: Option<Slot>,
}

impl Held {
    fn none() -> Held {
        Held {
            _permit: None,
            slot: None,
        }
    }
}

impl Dispatcher {
    /// Before `sub`'s handler runs for `event`: waits for the per-process permit, then asks
    /// the store for a slot. `Ok(hold)`: run; `Err(until)`: every slot is taken (the event is
    /// in the line, to be parked at the waiting mark) or the store could not answer.
    pub(super) async fn take_slot(
        &self,
        event: &Event,
        sub: &Entry,
        now: Timestamp,
    ) -> std::result::Result<Held, Timestamp> {
        let Some(limits) = self.slots.get() else {
            return Ok(Held::none());
        };
        let Some(local) = limits.get(&sub.key) else {
            return Ok(Held::none());
        };
        let permit = match local.per_process {
            Some(n) => self.slots.semaphore(&sub.key, n).acquire_owned().await.ok(),
            None => None,
        };
        let part = local
            .by
            .as_ref()
            .map(|b| b.of(event.ordering_key.as_deref(), &event.metadata))
            .unwrap_or_default();
        let mut unfit = Vec::new();
        let run = Run {
            sub: &sub.key,
            part: &part,
            set_at: local.set_at,
            now,
            timeout: sub.info.timeout,
        };
        let got = self.slots.kept.acquire(&run, local.bound, &mut unfit);
        self.release_slots(unfit).await;
        let handed = match got {
            Acquire::Kept(slot) => Some(slot),
            // Another run of this process may end soon and hand its slot over, or say to
            // ask the store; past LOCAL_WAIT the run asks the store (and joins the line
            // there, where it is seen).
            Acquire::Wait(mut rx) => {
                let slot = match tokio::time::timeout(LOCAL_WAIT, &mut rx).await {
                    Ok(got) => got.ok().flatten(),
                    Err(_) => {
                        // A slot handed over just as the wait ran out is not lost.
                        rx.close();
                        rx.try_recv().ok().flatten()
                    }
                };
                if slot.is_none() {
                    self.slots.kept.asking(&sub.key, &part);
                }
                slot
            }
            Acquire::Store => None,
        };
        if let Some(slot) = handed {
            return Ok(Held {
                _permit: permit,
                slot: Some(slot),
            });
        }
        let lease = now.plus(sub.info.timeout).plus(LEASE_MARGIN);
        match self
            .store
            .concurrency_take(
                &sub.key,
                &SlotAsk::of(event),
                self.breakers.process(),
                now,
                lease,
            )
            .await
        {
            Ok(SlotTake::Granted) => Ok(Held {
                _permit: permit,
                slot: Some(Slot {
                    row: event.id,
                    part,
                    lease_until: lease,
                    set_at: local.set_at,
                }),
            }),
            Ok(SlotTake::Unlimited) => {
                self.slots.kept.not_granted(&sub.key, &part);
                Ok(Held {
                    _permit: permit,
                    slot: None,
                })
            }
            Ok(SlotTake::Wait) => {
                // An event waits in line now: what this process keeps goes back, so that
                // the line moves.
                self.slots.kept.not_granted(&sub.key, &part);
                let kept = self.slots.kept.contended(&sub.key, &part);
                self.release_slots(kept).await;
                Err(WAIT_MARK)
            }
            Err(e) => {
                self.slots.kept.not_granted(&sub.key, &part);
                tracing::warn!(subscription = %sub.key, error = %e, "could not take a concurrency slot; the event waits");
                Err(now.plus(std::time::Duration::from_secs(1)))
            }
        }
    }

    /// After `sub`'s handler ran (`well`: it succeeded): keeps its slot for the next run of
    /// the same subscription and partition, or gives it back (the first waiting event is due
    /// then). A failed release is logged; the slot's lease runs out.
    pub(super) async fn give_back(&self, sub: &Entry, held: Held, well: bool) {
        let Some(slot) = held.slot else {
            return;
        };
        let set_at = self
            .slots
            .get()
            .and_then(|l| l.get(&sub.key).map(|l| l.set_at));
        let back = self.slots.kept.give_back(
            &sub.key,
            slot,
            well,
            set_at,
            &self.slots.busy,
            self.clock.now(),
            sub.info.timeout,
        );
        if let Some(slot) = back {
            self.release_slots(vec![(sub.key.clone(), slot)]).await;
        }
    }

    /// Gives `slots` back to the store, at once. A failed release is logged; the slot's lease
    /// runs out.
    async fn release_slots(&self, slots: Vec<(String, Slot)>) {
        if slots.is_empty() {
            return;
        }
        let now = self.clock.now();
        let mut tasks = tokio::task::JoinSet::new();
        for (key, slot) in slots {
            let store = self.store.clone();
            tasks.spawn(async move {
                if let Err(e) = store.concurrency_release(&key, slot.row, now).await {
                    tracing::warn!(subscription = %key, error = %e, "could not give back a concurrency slot; it comes back when its lease runs out");
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// Gives back every slot kept idle: the worker loop found nothing more to claim.
    pub(crate) async fn release_idle_slots(&self) {
        self.slots.set_busy(false);
        let idle = self.slots.kept.take_all();
        self.release_slots(idle).await;
    }

    /// Shutdown: nothing more is kept, and what was goes back.
    pub(crate) async fn close_slots(&self) {
        let kept = self.slots.kept.close();
        self.release_slots(kept).await;
    }

    /// The worker loop starts a delivery: slots may be kept for the next ones.
    pub(crate) fn set_busy(&self) {
        self.slots.set_busy(true);
    }

    /// After `outcomes` were recorded (`applied` says which): the events they parked in a
    /// concurrency limit's line wake their partitions' first waiting events if a slot freed
    /// while they were still running. A failure is logged; the next sweep wakes them.
    pub(super) async fn parked_for_slots(
        &self,
        outcomes: &[crate::store::Outcome],
        applied: &[bool],
    ) {
        let parked: Vec<crate::event::EventId> = outcomes
            .iter()
            .zip(applied)
            .filter(|(o, a)| **a && o.parks_for_slot())
            .map(|(o, _)| o.id())
            .collect();
        if parked.is_empty() {
            return;
        }
        if let Err(e) = self
            .store
            .concurrency_parked(&parked, self.clock.now())
            .await
        {
            tracing::warn!(error = %e, "could not look for free slots after parking events; the next refresh does");
        }
    }

    /// Reads which subscriptions have a concurrency limit, gives back the kept slots that
    /// should not be kept any more, and wakes the events waiting for slots that are free
    /// (after a crash, a raised limit).
    pub(crate) async fn refresh_slots(&self) -> crate::error::Result<()> {
        let now = self.clock.now();
        let ticket = self.slots.kept.ticket();
        let limits = self.store.concurrency_list(now).await?;
        let mut seen = HashMap::with_capacity(limits.len());
        for l in &limits {
            let waiting = if l.waiting == 0 {
                Waiting::None
            } else {
                let parts = self
                    .store
                    .concurrency_waiting(&l.subscription, WAITING_READ)
                    .await?;
                if parts.len() >= WAITING_READ as usize {
                    Waiting::All
                } else {
                    Waiting::Parts(parts.into_iter().collect())
                }
            };
            let s = Seen {
                set_at: l.set_at,
                waiting,
            };
            seen.insert(l.subscription.clone(), s);
        }
        let back = self.slots.kept.refresh(ticket, &seen);
        self.slots.replace(
            limits
                .iter()
                .map(|l| {
                    let local = Local {
                        per_process: l.per_process,
                        by: l.partition.as_ref().map(|p| p.by.clone()),
                        bound: Bound {
                            max: l.max_in_flight,
                            per_partition: l.partition.as_ref().map(|p| p.max_in_flight),
                        },
                        set_at: l.set_at,
                    };
                    (l.subscription.clone(), local)
                })
                .collect(),
        );
        self.release_slots(back).await;
        if !limits.is_empty() {
            self.store.concurrency_sweep(now).await?;
        }
        Ok(())
    }
}

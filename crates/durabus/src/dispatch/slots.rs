//! Concurrency limits in the dispatcher (see [`crate::concurrency`]): which subscriptions have
//! one (as this process last read them; with none set, asking costs one atomic load), the
//! per-process semaphores, and a run's slot taken before its handler and given back after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Dispatcher;
use super::registry::Entry;
use crate::clock::Timestamp;
use crate::concurrency::{LEASE_MARGIN, SlotAsk, SlotTake, WAIT_MARK};
use crate::event::Event;

/// This process's view of the concurrency-limited subscriptions: key → per-process limit.
#[derive(Debug, Default)]
pub(crate) struct Slots {
    limits: RwLock<Arc<HashMap<String, Option<u32>>>>,
    any: AtomicBool,
    /// Per-process semaphores by key, with the limit each was made for.
    local: Mutex<HashMap<String, (u32, Arc<Semaphore>)>>,
}

impl Slots {
    /// The limited subscriptions, `None` when there are none.
    pub fn get(&self) -> Option<Arc<HashMap<String, Option<u32>>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        Some(crate::sync::read(&self.limits).clone())
    }

    /// Replaces the view.
    pub fn replace(&self, limits: HashMap<String, Option<u32>>) {
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
}

/// A run's hold on its subscription's limit: the per-process permit and whether a slot in
/// the store is held (given back by [`Dispatcher::give_back`]).
pub(crate) struct Held {
    _permit: Option<OwnedSemaphorePermit>,
    slot: bool,
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
            return Ok(Held {
                _permit: None,
                slot: false,
            });
        };
        let Some(per_process) = limits.get(&sub.key) else {
            return Ok(Held {
                _permit: None,
                slot: false,
            });
        };
        let permit = match per_process {
            Some(n) => self
                .slots
                .semaphore(&sub.key, *n)
                .acquire_owned()
                .await
                .ok(),
            None => None,
        };
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
                slot: true,
            }),
            Ok(SlotTake::Unlimited) => Ok(Held {
                _permit: permit,
                slot: false,
            }),
            Ok(SlotTake::Wait) => Err(WAIT_MARK),
            Err(e) => {
                tracing::warn!(subscription = %sub.key, error = %e, "could not take a concurrency slot; the event waits");
                Err(now.plus(std::time::Duration::from_secs(1)))
            }
        }
    }

    /// After `sub`'s handler ran for `event`: gives its slot back (the first waiting event is
    /// due then). A failed release is logged; the slot's lease runs out.
    pub(super) async fn give_back(&self, event: &Event, sub: &Entry, held: Held) {
        if held.slot
            && let Err(e) = self
                .store
                .concurrency_release(&sub.key, event.id, self.clock.now())
                .await
        {
            tracing::warn!(subscription = %sub.key, error = %e, "could not give back a concurrency slot; it comes back when its lease runs out");
        }
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

    /// Reads which subscriptions have a concurrency limit, and wakes the events waiting for
    /// slots that are free (after a crash, a raised limit).
    pub(crate) async fn refresh_slots(&self) -> crate::error::Result<()> {
        let now = self.clock.now();
        let limits = self.store.concurrency_list(now).await?;
        self.slots.replace(
            limits
                .iter()
                .map(|l| (l.subscription.clone(), l.per_process))
                .collect(),
        );
        if !limits.is_empty() {
            self.store.concurrency_sweep(now).await?;
        }
        Ok(())
    }
}

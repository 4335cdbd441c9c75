//! The concurrency slots this process keeps between two runs (see [`crate::concurrency`]).
//!
//! Taking a slot in the store and giving it back are two writes per run. When a run that held
//! a slot ends well while the worker loop has events to run, and no event of its partition
//! waits in the subscription's line, the process keeps the slot (still held in the store, with
//! its lease; at most [`KEEP_MAX`] idle) and the next run of the same subscription and
//! partition takes it here, with no write. A run whose partition's room (or the whole limit)
//! this process's own runs hold waits here, a short while, for the first of them to end and
//! hand its slot over. The limit holds: every run still holds a slot the store counts. What is
//! kept goes back to the store:
//! - when an event of its partition waits in the line (this process was refused a slot, or
//!   a refresh read such an event, not woken yet): kept slots would make it wait longer;
//! - when the limit changed (read at a refresh): slots taken under the old one are not reused;
//! - when the worker loop finds nothing more to claim, at a refresh for a slot that stayed
//!   idle since the refresh before, and at shutdown;
//! - when its lease would run out before a run could end.
//!
//! Only a run that ended well keeps its slot: the slot's row in the store is named after the
//! event that took it, and an event that failed comes back for another attempt, which would
//! take a slot under the same name.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use tokio::sync::oneshot;

use crate::clock::Timestamp;
use crate::concurrency::LEASE_MARGIN;
use crate::event::EventId;

mod waiting;
pub(crate) use waiting::Waiting;

#[cfg(test)]
mod tests;

/// The most slots a process keeps idle at once.
pub(crate) const KEEP_MAX: usize = 1_024;

/// A slot held in the store by this process, between runs or for a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    /// The event its row in the store is named after (the one that took it).
    pub row: EventId,
    /// Its partition (`""` when the limit has none).
    pub part: String,
    /// When its lease runs out.
    pub lease_until: Timestamp,
    /// When the limit it was taken under was set: a slot of an older limit is not reused.
    pub set_at: Timestamp,
}

impl Slot {
    /// Whether its lease outlasts a run of at most `timeout` starting `now`, with half the
    /// lease margin to spare.
    fn lasts(&self, now: Timestamp, timeout: std::time::Duration) -> bool {
        now.plus(timeout).plus(LEASE_MARGIN / 2) <= self.lease_until
    }
}

/// A run asking for a slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run<'a> {
    /// Its subscription's key.
    pub sub: &'a str,
    /// Its partition (`""` when the limit has none).
    pub part: &'a str,
    /// When the limit this process last read was set.
    pub set_at: Timestamp,
    /// When it starts.
    pub now: Timestamp,
    /// Its handler's timeout.
    pub timeout: std::time::Duration,
}

/// A limit's room, as this process last read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    /// Runs at once over all partitions.
    pub max: u32,
    /// Runs at once of each partition, if it has partitions.
    pub per_partition: Option<u32>,
}

/// Where a run's slot comes from.
#[derive(Debug)]
pub(crate) enum Acquire {
    /// A slot kept here.
    Kept(Slot),
    /// The slot of another run of this process, when it ends; `None` (or a closed channel):
    /// ask the store, after [`Kept::asking`].
    Wait(oneshot::Receiver<Option<Slot>>),
    /// The store (the run counts as holding a slot until [`Kept::not_granted`] says not).
    Store,
}

/// A slot kept idle, and whether a refresh saw it idle already.
#[derive(Debug)]
struct Idle {
    slot: Slot,
    seen: bool,
}

/// One subscription's kept slots.
#[derive(Debug, Default)]
struct Sub {
    /// Idle, by partition.
    idle: HashMap<String, Vec<Idle>>,
    /// The partitions with an event waiting in line: nothing of them is kept.
    contended: Waiting,
    /// This process's runs holding a slot, by partition, and in all.
    running: HashMap<String, u32>,
    running_total: u32,
    /// Runs of this process waiting for the slot of another run of theirs, by partition.
    waiters: HashMap<String, VecDeque<oneshot::Sender<Option<Slot>>>>,
}

impl Sub {
    /// A run of `part` holds a slot now.
    fn started(&mut self, part: &str) {
        match self.running.get_mut(part) {
            Some(n) => *n += 1,
            None => {
                self.running.insert(part.to_owned(), 1);
            }
        }
        self.running_total += 1;
    }

    /// A run of `part` holds its slot no more.
    fn ended(&mut self, part: &str) {
        if let Some(n) = self.running.get_mut(part) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(part);
            }
        }
        self.running_total = self.running_total.saturating_sub(1);
    }

    /// The runs waiting here for a slot of a partition `waiting` covers ask the store.
    fn send_to_store(&mut self, waiting: &Waiting) {
        for (part, line) in &mut self.waiters {
            if waiting.covers(part) {
                for tx in line.drain(..) {
                    let _ = tx.send(None);
                }
            }
        }
    }

    fn drain(&mut self, out: &mut Vec<(String, Slot)>, key: &str, keep: impl Fn(&Idle) -> bool) {
        for list in self.idle.values_mut() {
            let mut i = 0;
            while i < list.len() {
                if keep(&list[i]) {
                    i += 1;
                } else {
                    out.push((key.to_owned(), list.swap_remove(i).slot));
                }
            }
        }
        self.idle.retain(|_, l| !l.is_empty());
    }
}

/// The entry of `sub` in `subs`, made if it has none (without a copy of the key when it has);
/// always `Some`.
fn entry<'a>(subs: &'a mut HashMap<String, Sub>, sub: &str) -> Option<&'a mut Sub> {
    if !subs.contains_key(sub) {
        subs.insert(sub.to_owned(), Sub::default());
    }
    subs.get_mut(sub)
}

/// What a refresh read of one limit.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// When the limit was set.
    pub set_at: Timestamp,
    /// The partitions with an event waiting in its line, not woken yet.
    pub waiting: Waiting,
}

/// The slots this process keeps, by subscription.
#[derive(Debug, Default)]
pub(crate) struct Kept {
    subs: Mutex<HashMap<String, Sub>>,
    /// Idle slots over every subscription.
    idle: AtomicUsize,
    /// The bus is shutting down: nothing more is kept.
    closing: AtomicBool,
    /// How many times this process was refused a slot: a refresh that read the limits
    /// before the latest refusal does not end the keeping's pause.
    refusals: AtomicU64,
}

impl Kept {
    /// A slot for the run `run` describes, under a limit of `bound`: a kept one if one is
    /// idle, its lease lasts the run and no event of its partition waits in line; or, when
    /// this process's own runs hold the whole room of the limit or of the run's partition,
    /// a place in the local line for the slot of the first of them to end (at most as many
    /// places as that room). Kept slots found unfit on the way are added to `unfit`, to be
    /// given back.
    pub fn acquire(&self, run: &Run<'_>, bound: Bound, unfit: &mut Vec<(String, Slot)>) -> Acquire {
        let mut subs = crate::sync::lock(&self.subs);
        let Some(s) = entry(&mut subs, run.sub) else {
            return Acquire::Store;
        };
        if s.contended.covers(run.part) {
            s.started(run.part);
            return Acquire::Store;
        }
        if let Some(list) = s.idle.get_mut(run.part) {
            let mut found = None;
            while let Some(idle) = list.pop() {
                self.idle.fetch_sub(1, Ordering::AcqRel);
                if idle.slot.set_at == run.set_at && idle.slot.lasts(run.now, run.timeout) {
                    found = Some(idle.slot);
                    break;
                }
                unfit.push((run.sub.to_owned(), idle.slot));
            }
            if list.is_empty() {
                s.idle.remove(run.part);
            }
            if let Some(slot) = found {
                s.started(run.part);
                return Acquire::Kept(slot);
            }
        }
        let mine = s.running.get(run.part).copied().unwrap_or(0);
        let room = match bound.per_partition {
            Some(each) if mine >= each => each,
            _ if s.running_total >= bound.max => bound.max,
            _ => {
                s.started(run.part);
                return Acquire::Store;
            }
        };
        let line = s.waiters.entry(run.part.to_owned()).or_default();
        line.retain(|w| !w.is_closed());
        if line.len() >= room as usize {
            s.started(run.part);
            return Acquire::Store;
        }
        let (tx, rx) = oneshot::channel();
        line.push_back(tx);
        Acquire::Wait(rx)
    }

    /// A run of `sub` in `part` that waited here for a slot asks the store now (it counts as
    /// holding one until [`Kept::not_granted`] says not).
    pub fn asking(&self, sub: &str, part: &str) {
        crate::sync::lock(&self.subs)
            .entry(sub.to_owned())
            .or_default()
            .started(part);
    }

    /// A run of `sub` in `part` sent to the store by [`Kept::acquire`] (counted as holding
    /// a slot from then, so that other runs of its partition wait here rather than ask the
    /// store at the same time) got none.
    pub fn not_granted(&self, sub: &str, part: &str) {
        if let Some(s) = crate::sync::lock(&self.subs).get_mut(sub) {
            s.ended(part);
        }
    }

    /// A run of `sub` that held `slot` ended (`well`: its handler succeeded) at `now`, under
    /// the limit set at `set_at` (`None`: no limit now), while the worker loop is `busy`
    /// (read under the lock). Hands the slot to the first run waiting for one in this
    /// process, or keeps it, and answers `None`; or answers it to be given back (and lets
    /// a run waiting here know it must ask the store).
    #[allow(clippy::too_many_arguments)]
    pub fn give_back(
        &self,
        sub: &str,
        slot: Slot,
        well: bool,
        set_at: Option<Timestamp>,
        busy: &AtomicBool,
        now: Timestamp,
        timeout: std::time::Duration,
    ) -> Option<Slot> {
        let fit = well
            && !self.closing.load(Ordering::Acquire)
            && set_at == Some(slot.set_at)
            && slot.lasts(now, timeout);
        let mut subs = crate::sync::lock(&self.subs);
        let Some(s) = entry(&mut subs, sub) else {
            return Some(slot);
        };
        let contended = s.contended.covers(&slot.part);
        let mut held = Some(slot);
        let line = match held.as_ref() {
            Some(slot) => s.waiters.get_mut(&slot.part),
            None => None,
        };
        if let Some(line) = line {
            while let Some(tx) = line.pop_front() {
                if fit && !contended {
                    // The run stays counted: its slot goes on to the next run.
                    match tx.send(held.take()) {
                        Ok(()) => return None,
                        Err(back) => held = back,
                    }
                } else if tx.send(None).is_ok() {
                    break;
                }
            }
        }
        let slot = held?;
        s.ended(&slot.part);
        // Read under the lock: the worker loop marks itself idle before it takes what is
        // kept, so a slot kept here after that sees it idle and goes back at once.
        if !fit
            || contended
            || !busy.load(Ordering::Acquire)
            || self.idle.load(Ordering::Acquire) >= KEEP_MAX
        {
            return Some(slot);
        }
        match s.idle.get_mut(&slot.part) {
            Some(list) => list.push(Idle { slot, seen: false }),
            None => {
                s.idle
                    .insert(slot.part.clone(), vec![Idle { slot, seen: false }]);
            }
        }
        self.idle.fetch_add(1, Ordering::AcqRel);
        None
    }

    /// This process was refused a slot of `sub` for a run of `part`: an event of `part`
    /// waits in line. Nothing of `part` is kept until a refresh finds none of it waiting;
    /// answers what of it was kept, to be given back.
    pub fn contended(&self, sub: &str, part: &str) -> Vec<(String, Slot)> {
        let mut out = Vec::new();
        let mut subs = crate::sync::lock(&self.subs);
        self.refusals.fetch_add(1, Ordering::AcqRel);
        let s = subs.entry(sub.to_owned()).or_default();
        s.contended.add(part);
        s.send_to_store(&s.contended.clone());
        s.drain(&mut out, sub, |i| i.slot.part != part);
        self.idle.fetch_sub(out.len(), Ordering::AcqRel);
        out
    }

    /// Everything kept idle, to be given back (nothing more to claim, or shutdown).
    pub fn take_all(&self) -> Vec<(String, Slot)> {
        if self.idle.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut subs = crate::sync::lock(&self.subs);
        for (key, s) in subs.iter_mut() {
            s.drain(&mut out, key, |_| false);
        }
        self.idle.fetch_sub(out.len(), Ordering::AcqRel);
        out
    }

    /// Shutdown: nothing more is kept; answers what was, to be given back.
    pub fn close(&self) -> Vec<(String, Slot)> {
        self.closing.store(true, Ordering::Release);
        for s in crate::sync::lock(&self.subs).values_mut() {
            s.send_to_store(&Waiting::All);
        }
        self.take_all()
    }

    /// What a refresh takes before it reads the limits, and hands to [`Kept::refresh`].
    pub fn ticket(&self) -> u64 {
        self.refusals.load(Ordering::Acquire)
    }

    /// A refresh read the limits `seen` (by subscription), after taking `ticket`: a partition
    /// with an event in line keeps nothing, one without may keep again (unless this process
    /// was refused a slot since the ticket); slots of a limit removed or set anew, and slots
    /// idle since the refresh before, are answered, to be given back.
    pub fn refresh(&self, ticket: u64, seen: &HashMap<String, Seen>) -> Vec<(String, Slot)> {
        let mut out = Vec::new();
        let mut subs = crate::sync::lock(&self.subs);
        let current = self.refusals.load(Ordering::Acquire) == ticket;
        for (key, s) in subs.iter_mut() {
            match seen.get(key) {
                None => {
                    s.send_to_store(&Waiting::All);
                    s.drain(&mut out, key, |_| false);
                }
                Some(l) => {
                    let before = std::mem::take(&mut s.contended);
                    s.contended = if current {
                        l.waiting.clone()
                    } else {
                        before.merge(&l.waiting)
                    };
                    let waiting = s.contended.clone();
                    s.send_to_store(&waiting);
                    s.drain(&mut out, key, |i| {
                        !waiting.covers(&i.slot.part) && !i.seen && i.slot.set_at == l.set_at
                    });
                    for i in s.idle.values_mut().flatten() {
                        i.seen = true;
                    }
                }
            }
        }
        subs.retain(|k, _| seen.contains_key(k));
        self.idle.fetch_sub(out.len(), Ordering::AcqRel);
        out
    }

    /// Slots kept idle now.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.load(Ordering::Acquire)
    }
}

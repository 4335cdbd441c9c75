//! The next events of ordering keys, claimed by the completions of their predecessors. When an
//! event with an ordering key completes, the next event of its key was waiting for exactly
//! that: the completion's transaction claims it (`processing`, one update of its row) instead
//! of making it due for a later claim to find and update again, and sets it aside here, in
//! memory, for the next claim of this store to return (see [`take`](SetAside::take)).
//!
//! Nothing is lost on the way: a set-aside event is `processing` in the table, like an event a
//! claim returned and the worker has not started yet. A worker that stops or finds the bus
//! paused gives the set-aside events back (`pending` at their place, their due time), and so
//! does closing the store; a crash leaves them to the next start's recovery, as it does the
//! worker's queue.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rusqlite::{Connection, params};
use tokio::sync::Notify;

use super::op::WriteOp;
use super::rows::Undecoded;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::store::types::Outcome;
use crate::sync::lock;

/// How many handed-over events [`SetAside`] remembers at most (see `handed`); past it, it
/// forgets them all and starts again (a completion it forgot takes the general statements).
const HANDED_MAX: usize = 1 << 16;

/// How long a claim trusts a look at the table that found it dry, in the claims' time (the
/// bus's clock): while set-aside events fill whole claims, the table is looked at again after
/// this long even if no commit says events became due there (a retry's back-off or a
/// scheduled time running out makes events due with no commit).
const DRY_FOR: Duration = Duration::from_millis(5);

/// The events set aside for the next claims, oldest first, and what the claims know of the
/// table.
pub(super) struct SetAside {
    queue: Mutex<VecDeque<Undecoded>>,
    /// Wakes the dispatcher when events are set aside.
    wake: Arc<Notify>,
    /// Commits that may have made events due in the table, counted by the writer.
    table_changes: AtomicU64,
    /// The last look at the table that came back short: the count of changes before it, and
    /// the claim's time. `None` after a look that came back full.
    dry: Mutex<Option<(u64, Timestamp)>>,
    /// Which side gets the odd event of a shared claim (so a claim of one alternates).
    odd_to_table: AtomicBool,
    /// The events set aside whose outcome is not written yet, with their keys: a completion
    /// of one goes first to the statement for the head of a key (it is one, unless something
    /// changed it meanwhile, which that statement checks). A hint, never trusted alone.
    handed: Mutex<HashMap<EventId, String>>,
}

impl std::fmt::Debug for SetAside {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SetAside").field(&self.len()).finish()
    }
}

impl SetAside {
    /// Nothing set aside; `wake` is the dispatcher's.
    pub fn new(wake: Arc<Notify>) -> SetAside {
        SetAside {
            queue: Mutex::new(VecDeque::new()),
            wake,
            table_changes: AtomicU64::new(0),
            dry: Mutex::new(None),
            odd_to_table: AtomicBool::new(false),
            handed: Mutex::new(HashMap::new()),
        }
    }

    /// How many events are set aside.
    pub fn len(&self) -> usize {
        lock(&self.queue).len()
    }

    /// Sets `rows` aside, behind those already waiting, and wakes the dispatcher.
    pub fn put(&self, rows: Vec<Undecoded>) {
        if !rows.is_empty() {
            {
                let mut handed = lock(&self.handed);
                if handed.len() + rows.len() > HANDED_MAX {
                    handed.clear();
                }
                for row in &rows {
                    if let Some(key) = &row.event().ordering_key {
                        handed.insert(row.id(), key.clone());
                    }
                }
            }
            lock(&self.queue).extend(rows);
            self.wake.notify_one();
        }
    }

    /// Forgets the events of `outcomes` (their outcome is being written); for each, the key of
    /// a completion of an event set aside here (most likely the head of its key).
    pub fn heads_of(&self, outcomes: &[Outcome]) -> Vec<Option<String>> {
        let mut handed = lock(&self.handed);
        if handed.is_empty() {
            return vec![None; outcomes.len()];
        }
        outcomes
            .iter()
            .map(|o| {
                let key = handed.remove(&o.id());
                key.filter(|_| matches!(o, Outcome::Done { .. }))
            })
            .collect()
    }

    /// Forgets events `ids` (given back or recovered: pending again).
    pub fn forget(&self, ids: impl IntoIterator<Item = EventId>) {
        let mut handed = lock(&self.handed);
        if !handed.is_empty() {
            for id in ids {
                handed.remove(&id);
            }
        }
    }

    /// Forgets every event set aside so far (a recovery made them all pending).
    pub fn forget_all(&self) {
        lock(&self.handed).clear();
    }

    /// Puts `rows`, taken by a claim that did not keep them, back in front, in their order.
    pub fn put_back(&self, rows: Vec<Undecoded>) {
        let mut queue = lock(&self.queue);
        for row in rows.into_iter().rev() {
            queue.push_front(row);
        }
    }

    /// Takes up to `n` events, oldest first.
    pub fn take(&self, n: usize) -> Vec<Undecoded> {
        let mut queue = lock(&self.queue);
        let n = n.min(queue.len());
        queue.drain(..n).collect()
    }

    /// Takes every event set aside (to give them back: they are forgotten).
    pub fn take_all(&self) -> Vec<Undecoded> {
        let rows: Vec<Undecoded> = lock(&self.queue).drain(..).collect();
        self.forget(rows.iter().map(Undecoded::id));
        rows
    }

    /// A committed write may have made events due in the table (the writer's wake-up).
    pub fn table_changed(&self) {
        self.table_changes.fetch_add(1, Ordering::AcqRel);
    }

    /// The count of such commits so far, read before a look at the table.
    pub fn table_changes(&self) -> u64 {
        self.table_changes.load(Ordering::Acquire)
    }

    /// A claim at `now` looked at the table, `changes` being the count read before it: it
    /// came back `short` (fewer due events than it had room for) or full.
    pub fn looked(&self, changes: u64, short: bool, now: Timestamp) {
        *lock(&self.dry) = short.then_some((changes, now));
    }

    /// Whether the table is known to have no due events: the last look came back short, no
    /// commit since may have made any due, and it is recent at `now` (see [`DRY_FOR`]).
    pub fn table_dry(&self, now: Timestamp) -> bool {
        lock(&self.dry)
            .is_some_and(|(changes, at)| changes == self.table_changes() && now < at.plus(DRY_FOR))
    }

    /// Takes what a claim of `limit` events gets from the set-aside ones before it looks at
    /// the table (if room is left): all it can, but only half the claim when they would fill it
    /// and the table is not known to be dry, so that due events in the table (other keys'
    /// heads, events without a key, higher priorities) are never starved by chains of keyed
    /// completions, which set aside about as many events as the worker claims. The odd event
    /// of such a claim goes to each side in turn: claims of one (`Bus::poll`) alternate.
    pub fn take_first(&self, limit: usize, now: Timestamp) -> Vec<Undecoded> {
        let mut rows = self.take(limit);
        if rows.len() == limit && limit > 0 && !self.table_dry(now) {
            let odd_to_table = self.odd_to_table.fetch_xor(true, Ordering::AcqRel);
            let keep = if odd_to_table {
                limit / 2
            } else {
                limit.div_ceil(2)
            };
            self.put_back(rows.split_off(keep));
        }
        rows
    }
}

/// Set-aside events given back: each `pending` again at its due time, its place among the due
/// events (`cancelled` instead if a cancel came while it was set aside, letting its key move
/// on).
pub(super) struct GiveBack(pub Vec<(EventId, Timestamp)>);

impl GiveBack {
    /// The give-back of `rows`.
    pub fn of(rows: &[Undecoded]) -> GiveBack {
        GiveBack(
            rows.iter()
                .map(|r| {
                    let due = r.next_attempt_at().unwrap_or(r.created_at());
                    (r.id(), due)
                })
                .collect(),
        )
    }
}

impl GiveBack {
    /// The give-back of every event set aside in `set_aside`, with the latest of their due
    /// times as now (for a writer closing, which has no clock); `None` if none is.
    pub fn all_of(set_aside: &SetAside) -> Option<(GiveBack, Timestamp)> {
        let rows = set_aside.take_all();
        let back = GiveBack::of(&rows);
        let now = back.0.iter().map(|(_, due)| *due).max()?;
        Some((back, now))
    }
}

impl WriteOp for GiveBack {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let mut n = 0u64;
        for (id, due) in &self.0 {
            n += conn.prepare_cached(&sql.key_give_back)?.execute(params![
                id.to_string(),
                due.as_millis(),
                now.as_millis()
            ])? as u64;
            super::keys::settle(&mut super::prepared::Prepared::new(conn), sql, *id, now)?;
        }
        Ok(n)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

//! The pauses in force, as this process last read them (see [`crate::pause`]): what a delivery
//! asks before it runs a handler and the worker loop before it claims. With no pause active
//! (the usual case) asking costs one atomic load.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::pause::PauseSet;

/// This process's view of the active pauses.
#[derive(Debug)]
pub(crate) struct Paused {
    /// The set, and the ticket of the read it came from.
    set: RwLock<(u64, Arc<PauseSet>)>,
    /// The last ticket handed out.
    tickets: AtomicU64,
    /// Whether the set holds any pause.
    any: AtomicBool,
    /// Bumped whenever the set changes: the worker loop waits on it while the bus is paused.
    changed: watch::Sender<u64>,
}

impl Default for Paused {
    fn default() -> Paused {
        Paused {
            set: RwLock::new((0, Arc::new(PauseSet::default()))),
            tickets: AtomicU64::new(0),
            any: AtomicBool::new(false),
            changed: watch::Sender::new(0),
        }
    }
}

impl Paused {
    /// The active pauses, `None` when there are none.
    pub fn get(&self) -> Option<Arc<PauseSet>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        Some(crate::sync::read(&self.set).1.clone())
    }

    /// A ticket to take before reading the pauses from the store: a read that started later
    /// is newer.
    pub fn ticket(&self) -> u64 {
        self.tickets.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Replaces the set with `set`, read under `ticket`, unless a read that started later has
    /// replaced it already (a refresh that began before a pause was made and ended after it
    /// must not hide the pause). Tells the waiters if it changed.
    pub fn replace(&self, ticket: u64, set: PauseSet) {
        let mut slot = crate::sync::write(&self.set);
        if ticket < slot.0 {
            return;
        }
        slot.0 = ticket;
        if *slot.1 == set {
            return;
        }
        self.any.store(!set.is_empty(), Ordering::Release);
        slot.1 = Arc::new(set);
        drop(slot);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// The pause of the whole bus in force at `now`, if any: its id.
    pub fn bus(&self, now: Timestamp) -> Option<i64> {
        self.get()?.bus(now).map(|p| p.id)
    }

    /// A receiver that sees every change of the set.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actor::{Actor, ActorKind};
    use crate::pause::{Pause, PauseScope};

    #[test]
    fn the_view_reports_changes_and_nothing_when_empty() {
        let paused = Paused::default();
        assert!(paused.get().is_none());
        let mut rx = paused.changes();
        let bus = Pause {
            id: 7,
            scope: PauseScope::Bus,
            actor: Actor::new("ops", ActorKind::Cli),
            reason: "maintenance".into(),
            paused_at: Timestamp(0),
            until: Some(Timestamp(10)),
            ended: None,
            parked: 0,
        };
        paused.replace(paused.ticket(), PauseSet::new(vec![bus.clone()]));
        assert!(rx.has_changed().unwrap_or(false));
        rx.mark_unchanged();
        assert_eq!(paused.bus(Timestamp(5)), Some(7));
        assert_eq!(paused.bus(Timestamp(10)), None);
        // The same set again is no change.
        paused.replace(paused.ticket(), PauseSet::new(vec![bus.clone()]));
        assert!(!rx.has_changed().unwrap_or(true));
        // A read that started before the last one applied is stale: it changes nothing.
        let stale = paused.ticket();
        paused.replace(paused.ticket(), PauseSet::new(vec![bus]));
        paused.replace(stale, PauseSet::default());
        assert_eq!(paused.bus(Timestamp(5)), Some(7));
        paused.replace(paused.ticket(), PauseSet::default());
        assert!(paused.get().is_none());
        assert!(rx.has_changed().unwrap_or(false));
    }
}

//! The pauses in force, as this process last read them (see [`crate::pause`]): what a delivery
//! asks before it runs a handler and the worker loop before it claims. With no pause active
//! (the usual case) asking costs one atomic load.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use tokio::sync::watch;

use crate::clock::Timestamp;
use crate::pause::PauseSet;

/// This process's view of the active pauses.
#[derive(Debug)]
pub(crate) struct Paused {
    set: RwLock<Arc<PauseSet>>,
    /// Whether the set holds any pause.
    any: AtomicBool,
    /// Bumped whenever the set changes: the worker loop waits on it while the bus is paused.
    changed: watch::Sender<u64>,
}

impl Default for Paused {
    fn default() -> Paused {
        Paused {
            set: RwLock::new(Arc::new(PauseSet::default())),
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
        Some(crate::sync::read(&self.set).clone())
    }

    /// Replaces the set; tells the waiters if it changed.
    pub fn replace(&self, set: PauseSet) {
        let mut slot = crate::sync::write(&self.set);
        if **slot == set {
            return;
        }
        self.any.store(!set.is_empty(), Ordering::Release);
        *slot = Arc::new(set);
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
        paused.replace(PauseSet::new(vec![bus.clone()]));
        assert!(rx.has_changed().unwrap_or(false));
        rx.mark_unchanged();
        assert_eq!(paused.bus(Timestamp(5)), Some(7));
        assert_eq!(paused.bus(Timestamp(10)), None);
        // The same set again is no change.
        paused.replace(PauseSet::new(vec![bus]));
        assert!(!rx.has_changed().unwrap_or(true));
        paused.replace(PauseSet::default());
        assert!(paused.get().is_none());
        assert!(rx.has_changed().unwrap_or(false));
    }
}

//! Handing an enqueued event straight to this process's idle worker loop. When the loop's
//! last claim found nothing and it sleeps with a free delivery slot, one `enqueue` stores its
//! event already claimed by this process (as an inline publish does) and hands it over: the
//! loop delivers it without a claim, a round trip to the store less between the publish and
//! the handler. Only one enqueue takes the turn per idle spell; the others store their events
//! as pending, which wakes the loop to claim them. A busy loop is never handed anything, so a
//! backlog keeps its order.
//!
//! Nothing is lost on the way: an event handed to a loop that has stopped comes back to the
//! enqueue, which gives it back to the store as pending; a loop that stops drains what was
//! handed to it into the events it releases. A crash in between leaves a `processing` event
//! that recovery (SQLite, at the next start) or its lease's expiry (PostgreSQL) gives back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::mpsc;

use crate::event::Event;

/// The loop is not waiting: running, not started, or between claims.
const BUSY: u8 = 0;
/// The loop sleeps with a free slot, its last claim empty: the next enqueue may hand it one.
const WAITING: u8 = 1;
/// The loop has stopped for good.
const CLOSED: u8 = 2;

/// What an enqueue that took the turn sends the loop.
#[derive(Debug)]
pub(crate) enum Handed {
    /// A stored event, claimed by this process, to deliver.
    Event(Box<Event>),
    /// Nothing after all (the id was already stored, or the insert failed): the loop wakes
    /// and looks for work, so the turn it offered is not lost.
    Nothing,
}

/// The hand-over point between enqueues and the worker loop of one dispatcher.
#[derive(Debug)]
pub(crate) struct Handoff {
    state: AtomicU8,
    tx: mpsc::UnboundedSender<Handed>,
    rx: std::sync::Mutex<Option<mpsc::UnboundedReceiver<Handed>>>,
}

/// The right to hand the waiting loop one event, taken by one enqueue. Dropped unused, it
/// wakes the loop.
#[derive(Debug)]
pub(crate) struct Turn {
    handoff: Arc<Handoff>,
    used: bool,
}

impl Handoff {
    pub fn new() -> Arc<Handoff> {
        let (tx, rx) = mpsc::unbounded_channel();
        Arc::new(Handoff {
            state: AtomicU8::new(BUSY),
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
        })
    }

    /// The turn to hand the loop an event, if it is waiting and no other enqueue took it.
    pub fn take(self: &Arc<Self>) -> Option<Turn> {
        self.state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| Turn {
                handoff: self.clone(),
                used: false,
            })
    }

    /// The loop's end of the channel; `None` once a loop has taken it (one loop per bus).
    pub fn receiver(&self) -> Option<mpsc::UnboundedReceiver<Handed>> {
        crate::sync::lock(&self.rx).take()
    }

    /// The loop is about to sleep with a free slot and nothing claimed.
    pub fn wait(&self) {
        let _ = self
            .state
            .compare_exchange(BUSY, WAITING, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The loop woke: no enqueue may take a turn until it waits again.
    pub fn stop_waiting(&self) {
        let _ = self
            .state
            .compare_exchange(WAITING, BUSY, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The loop has stopped: no turn is ever taken again.
    pub fn close(&self) {
        self.state.store(CLOSED, Ordering::Release);
    }
}

impl Turn {
    /// Hands the loop `event`. Returns it if the loop has stopped (its receiver closed), for
    /// the caller to give back to the store.
    pub fn give(mut self, event: Event) -> Option<Event> {
        self.used = true;
        match self.handoff.tx.send(Handed::Event(Box::new(event))) {
            Err(mpsc::error::SendError(Handed::Event(event))) => Some(*event),
            _ => None,
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if !self.used {
            let _ = self.handoff.tx.send(Handed::Nothing);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::{Handed, Handoff};
    use crate::event::{EventStatus, NewEvent};

    fn event() -> crate::event::Event {
        NewEvent::new("t", &1)
            .unwrap()
            .into_event(EventStatus::Processing, crate::clock::Timestamp::now())
    }

    #[test]
    fn a_turn_is_taken_only_while_the_loop_waits_and_only_once() {
        let h = Handoff::new();
        let mut rx = h.receiver().unwrap();
        assert!(h.receiver().is_none(), "one loop takes the receiver");
        assert!(h.take().is_none(), "a loop that never waited is busy");
        h.wait();
        let turn = h.take().expect("a waiting loop offers a turn");
        assert!(h.take().is_none(), "one turn per idle spell");
        let e = event();
        let id = e.id;
        assert!(turn.give(e).is_none());
        match rx.try_recv().unwrap() {
            Handed::Event(got) => assert_eq!(got.id, id),
            Handed::Nothing => panic!("the event was not handed over"),
        }
        h.wait();
        h.stop_waiting();
        assert!(h.take().is_none(), "a loop that woke offers nothing");
    }

    #[test]
    fn an_unused_turn_wakes_the_loop() {
        let h = Handoff::new();
        let mut rx = h.receiver().unwrap();
        h.wait();
        drop(h.take().unwrap());
        assert!(matches!(rx.try_recv().unwrap(), Handed::Nothing));
    }

    #[test]
    fn a_stopped_loop_gives_the_event_back_and_offers_no_more_turns() {
        let h = Handoff::new();
        let mut rx = h.receiver().unwrap();
        h.wait();
        let turn = h.take().unwrap();
        // The loop stops while the enqueue stores its event.
        h.close();
        rx.close();
        let e = event();
        let id = e.id;
        let back = turn.give(e).expect("nobody is left to deliver it");
        assert_eq!(back.id, id);
        h.wait();
        assert!(h.take().is_none(), "a closed hand-off never waits again");
    }
}

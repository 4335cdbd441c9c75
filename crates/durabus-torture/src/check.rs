//! The checker: what the ledger says was acknowledged, what the handlers say they saw, and what
//! the store holds after a full drain with faults off, held against the bus's promises.
//!
//! Kept free of I/O so it can be tested on hand-made histories, including broken ones: a
//! checker that cannot fail proves nothing.

use std::collections::{HashMap, HashSet};

use durabus::{DeadLetterStatus, EventId, EventStatus};

/// What an event's handler does (its type says so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Succeeds: the event must end done.
    Ok,
    /// Always returns an error: the event must end in the dead-letter queue.
    Fail,
    /// Always panics: dead-lettered.
    Panic,
    /// Never returns (past its timeout): dead-lettered.
    Hang,
    /// Blocks its thread for a while (within its timeout), then succeeds: done.
    Block,
    /// Blocks its thread past its timeout, then succeeds: either outcome is allowed.
    Slow,
    /// Aborts the whole process: dead-lettered after at most `max_retries + 1` crashes.
    Poison,
}

impl Kind {
    /// Every kind.
    pub const ALL: [Kind; 7] = [
        Kind::Ok,
        Kind::Fail,
        Kind::Panic,
        Kind::Hang,
        Kind::Block,
        Kind::Slow,
        Kind::Poison,
    ];

    /// The event type that carries this kind.
    pub fn event_type(self) -> &'static str {
        match self {
            Kind::Ok => "torture.ok",
            Kind::Fail => "torture.fail",
            Kind::Panic => "torture.panic",
            Kind::Hang => "torture.hang",
            Kind::Block => "torture.block",
            Kind::Slow => "torture.slow",
            Kind::Poison => "torture.poison",
        }
    }

    /// The kind of an event type, if it is one of the suite's.
    pub fn of_type(event_type: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.event_type() == event_type)
    }

    /// Whether the event can never end done.
    pub fn never_done(self) -> bool {
        matches!(self, Kind::Fail | Kind::Panic | Kind::Hang | Kind::Poison)
    }

    /// Whether the event should end done (unless crashes used up its attempts).
    pub fn should_succeed(self) -> bool {
        matches!(self, Kind::Ok | Kind::Block)
    }
}

/// One handler run, as the handler wrote it down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// The event.
    pub id: EventId,
    /// Whether the handler returned success.
    pub ok: bool,
    /// The life (process start) of the child that ran it.
    pub life: u32,
}

/// What the store holds for one event after the drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The event's status.
    pub status: EventStatus,
    /// Its dead-letter record's status, if it has one.
    pub dead_letter: Option<DeadLetterStatus>,
}

/// Everything the checker looks at.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Every event a publisher was about to publish, with its kind.
    pub intended: HashMap<EventId, Kind>,
    /// Every event whose publish returned success.
    pub acked: HashSet<EventId>,
    /// Every handler run.
    pub deliveries: Vec<Delivery>,
    /// The store after the drain.
    pub stored: HashMap<EventId, Stored>,
    /// Lives that ended with a kill or an abort, or were frozen past their leases, with the
    /// events the store held `processing` right after that fault: those, and only those, were
    /// in flight and may be handled again.
    pub killed: HashMap<u32, HashSet<EventId>>,
}

/// The checker's findings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Events whose publish returned success.
    pub acknowledged: u64,
    /// Events that ended done.
    pub done: u64,
    /// Events that ended in the dead-letter queue.
    pub dead: u64,
    /// Succeeding events dead-lettered because crashes used up their attempts (allowed: the
    /// spec's answer to a poison event), counted for the table.
    pub crash_exhausted: u64,
    /// Acknowledged events neither done nor dead-lettered: must be 0.
    pub lost: u64,
    /// Successful deliveries beyond the first, per event.
    pub duplicates: u64,
    /// Every broken promise, in words.
    pub violations: Vec<String>,
}

/// Most violations spelled out; the rest are counted.
const SHOWN: usize = 20;

/// Checks `h`. `faults` says whether the run injected faults: without them a duplicate is a
/// violation.
pub fn check(h: &History, faults: bool) -> Report {
    let mut r = Report {
        acknowledged: h.acked.len() as u64,
        ..Report::default()
    };
    let mut violations = Vec::new();
    let mut say = |v: String| violations.push(v);

    for id in &h.acked {
        if !h.intended.contains_key(id) {
            say(format!(
                "event {id} was acknowledged without being announced"
            ));
        }
        match h.stored.get(id) {
            None => {
                r.lost += 1;
                say(format!("acknowledged event {id} is not in the store"));
            }
            Some(s) if !matches!(s.status, EventStatus::Done | EventStatus::Dlq) => {
                r.lost += 1;
                say(format!("acknowledged event {id} ended {}", s.status));
            }
            Some(_) => {}
        }
    }

    let mut ok_runs: HashMap<EventId, Vec<u32>> = HashMap::new();
    for d in &h.deliveries {
        if !h.intended.contains_key(&d.id) {
            say(format!(
                "a handler saw event {}, which nobody published",
                d.id
            ));
        }
        if d.ok {
            ok_runs.entry(d.id).or_default().push(d.life);
        }
    }

    for (id, s) in &h.stored {
        let Some(kind) = h.intended.get(id) else {
            say(format!(
                "the store holds event {id}, which nobody published"
            ));
            continue;
        };
        match s.status {
            EventStatus::Done => {
                r.done += 1;
                if matches!(
                    s.dead_letter,
                    Some(DeadLetterStatus::Pending | DeadLetterStatus::Retrying)
                ) {
                    say(format!("event {id} is done and an open dead letter"));
                }
                if kind.never_done() {
                    say(format!("event {id} always fails, yet it is done"));
                }
                if !ok_runs.contains_key(id) {
                    say(format!(
                        "event {id} is done, but no handler succeeded on it"
                    ));
                }
            }
            EventStatus::Dlq => {
                r.dead += 1;
                if s.dead_letter.is_none() {
                    say(format!("event {id} is dead without a dead-letter record"));
                }
                if kind.should_succeed() {
                    r.crash_exhausted += 1;
                }
            }
            other => say(format!("event {id} was left {other} after the drain")),
        }
    }

    // Duplicates: a successful run beyond the first. With faults, every run but one must come
    // from a life that was killed (or frozen) with the event still in flight (`processing` in
    // the store right after), each such life explaining one run. A frozen life's run may end
    // after the run of the life that took the event over, so the unexplained run may be any.
    for (id, lives) in &ok_runs {
        let extra = lives.len().saturating_sub(1) as u64;
        if extra == 0 {
            continue;
        }
        r.duplicates += extra;
        if !faults {
            say(format!(
                "event {id} was handled {} times in a run without faults",
                lives.len()
            ));
            continue;
        }
        let mut explained = HashSet::new();
        let unexplained: Vec<&u32> = lives
            .iter()
            .filter(|life| {
                let in_flight = h.killed.get(life).is_some_and(|ids| ids.contains(id));
                !(in_flight && explained.insert(**life))
            })
            .collect();
        for life in unexplained.iter().take(unexplained.len().saturating_sub(1)) {
            match h.killed.get(*life) {
                None => say(format!(
                    "event {id} was handled again after life {life}, which was not killed"
                )),
                Some(in_flight) if !in_flight.contains(id) => say(format!(
                    "event {id} was handled again after life {life}, though it was not in flight when that life was killed"
                )),
                Some(_) => {}
            }
        }
    }

    let total = violations.len();
    violations.truncate(SHOWN);
    if total > SHOWN {
        violations.push(format!("… and {} more", total - SHOWN));
    }
    r.violations = violations;
    r
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id(n: u128) -> EventId {
        EventId(uuid::Uuid::from_u128(n))
    }

    fn done() -> Stored {
        Stored {
            status: EventStatus::Done,
            dead_letter: None,
        }
    }

    fn dead() -> Stored {
        Stored {
            status: EventStatus::Dlq,
            dead_letter: Some(DeadLetterStatus::Pending),
        }
    }

    fn ok_run(n: u128, life: u32) -> Delivery {
        Delivery {
            id: id(n),
            ok: true,
            life,
        }
    }

    /// Three events: 1 and 2 succeed, 3 always fails; all acknowledged and accounted for.
    fn healthy() -> History {
        let mut h = History::default();
        for (n, k) in [(1, Kind::Ok), (2, Kind::Ok), (3, Kind::Fail)] {
            h.intended.insert(id(n), k);
            h.acked.insert(id(n));
        }
        h.deliveries = vec![
            ok_run(1, 0),
            ok_run(2, 0),
            Delivery {
                id: id(3),
                ok: false,
                life: 0,
            },
        ];
        h.stored = HashMap::from([(id(1), done()), (id(2), done()), (id(3), dead())]);
        h
    }

    #[test]
    fn a_healthy_history_passes() {
        let r = check(&healthy(), false);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!((r.acknowledged, r.done, r.dead, r.lost), (3, 2, 1, 0));
    }

    #[test]
    fn an_acknowledged_event_missing_from_the_store_is_lost() {
        let mut h = healthy();
        h.stored.remove(&id(2));
        let r = check(&h, true);
        assert_eq!(r.lost, 1);
        assert!(
            r.violations[0].contains("not in the store"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn an_unacknowledged_event_may_be_missing() {
        let mut h = healthy();
        h.acked.remove(&id(2));
        h.stored.remove(&id(2));
        h.deliveries.retain(|d| d.id != id(2));
        assert!(check(&h, true).violations.is_empty());
    }

    #[test]
    fn events_left_pending_or_processing_are_violations() {
        for status in [EventStatus::Pending, EventStatus::Processing] {
            let mut h = healthy();
            h.stored.get_mut(&id(1)).unwrap().status = status;
            let r = check(&h, false);
            assert_eq!(r.lost, 1);
            assert!(r.violations.iter().any(|v| v.contains("after the drain")));
        }
    }

    #[test]
    fn done_and_dead_at_once_is_a_violation() {
        let mut h = healthy();
        h.stored.get_mut(&id(1)).unwrap().dead_letter = Some(DeadLetterStatus::Pending);
        assert!(check(&h, false).violations[0].contains("done and an open dead letter"));
        // A dead letter retried and then delivered is resolved: that is fine.
        h.stored.get_mut(&id(1)).unwrap().dead_letter = Some(DeadLetterStatus::Resolved);
        assert!(check(&h, false).violations.is_empty());
    }

    #[test]
    fn dead_without_its_record_is_a_violation() {
        let mut h = healthy();
        h.stored.get_mut(&id(3)).unwrap().dead_letter = None;
        assert!(check(&h, false).violations[0].contains("without a dead-letter record"));
    }

    #[test]
    fn unknown_ids_are_violations() {
        let mut h = healthy();
        h.stored.insert(id(9), done());
        assert!(
            check(&h, false)
                .violations
                .iter()
                .any(|v| v.contains("nobody published"))
        );
        let mut h = healthy();
        h.deliveries.push(ok_run(8, 0));
        assert!(
            check(&h, false)
                .violations
                .iter()
                .any(|v| v.contains("nobody published"))
        );
    }

    #[test]
    fn done_without_a_successful_handler_is_a_violation() {
        let mut h = healthy();
        h.deliveries.retain(|d| d.id != id(1));
        assert!(check(&h, false).violations[0].contains("no handler succeeded"));
    }

    #[test]
    fn a_failing_event_that_ends_done_is_a_violation() {
        let mut h = healthy();
        h.stored.insert(id(3), done());
        h.deliveries.push(ok_run(3, 0));
        assert!(
            check(&h, false)
                .violations
                .iter()
                .any(|v| v.contains("always fails"))
        );
    }

    #[test]
    fn duplicates_fail_a_run_without_faults() {
        let mut h = healthy();
        h.deliveries.push(ok_run(1, 1));
        let r = check(&h, false);
        assert_eq!(r.duplicates, 1);
        assert!(r.violations[0].contains("without faults"));
    }

    #[test]
    fn duplicates_after_a_kill_are_counted_within_the_bound() {
        let mut h = healthy();
        h.killed.insert(0, HashSet::from([id(1), id(2)]));
        h.deliveries.extend([ok_run(1, 1), ok_run(2, 1)]);
        let r = check(&h, true);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.duplicates, 2);
    }

    #[test]
    fn duplicates_of_events_not_in_flight_at_the_kill_are_violations() {
        let mut h = healthy();
        h.killed.insert(0, HashSet::from([id(1)]));
        h.deliveries.extend([ok_run(1, 1), ok_run(2, 1)]);
        let r = check(&h, true);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(
            r.violations[0].contains("not in flight"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn a_frozen_life_may_finish_after_the_life_that_took_its_event_over() {
        let mut h = healthy();
        h.killed.insert(0, HashSet::from([id(1)]));
        // Life 1 took event 1 over while life 0 was frozen; life 0 then finished its run.
        h.deliveries.retain(|d| d.id != id(1));
        h.deliveries.extend([ok_run(1, 1), ok_run(1, 0)]);
        let r = check(&h, true);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.duplicates, 1);
    }

    #[test]
    fn one_fault_explains_one_extra_run_only() {
        let mut h = healthy();
        h.killed.insert(0, HashSet::from([id(1)]));
        h.deliveries.extend([ok_run(1, 1), ok_run(1, 2)]);
        let r = check(&h, true);
        assert_eq!(r.duplicates, 2);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(
            r.violations[0].contains("was not killed"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn duplicates_after_a_life_that_was_not_killed_are_violations() {
        let mut h = healthy();
        h.deliveries.push(ok_run(1, 1));
        let r = check(&h, true);
        assert!(
            r.violations[0].contains("was not killed"),
            "{:?}",
            r.violations
        );
    }

    #[test]
    fn crash_exhausted_successes_are_counted_not_failed() {
        let mut h = healthy();
        h.stored.insert(id(1), dead());
        let r = check(&h, true);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.crash_exhausted, 1);
    }

    #[test]
    fn long_lists_of_violations_are_cut() {
        let mut h = healthy();
        for n in 100..150 {
            h.acked.insert(id(n));
        }
        let r = check(&h, true);
        assert_eq!(r.lost, 50);
        assert_eq!(r.violations.len(), SHOWN + 1);
        assert!(r.violations.last().unwrap().contains("more"));
    }
}

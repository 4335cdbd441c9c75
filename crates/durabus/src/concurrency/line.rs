//! The line of events waiting for a slot, decided in one place for every store: who may take
//! a slot, and which waiting events a freed slot wakes. The stores read the line and the slots
//! held, ask [`plan`], and write what it answers.
//!
//! Under a limit with partitions the line is first come first within each partition: a woken
//! event keeps its entry (marked woken, counted as holding its partition's room until it
//! takes its slot), and a run may take a slot only while no event of its partition waits in
//! line ahead of it ([`may_take`]). A tenant's backlog then parks behind its first runs and
//! moves only as its slots free up, while the other tenants' events run beside it.

use std::collections::HashMap;

use super::WAIT_MARK;

/// Where an event in the line stands, read from its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InLine {
    /// Still running the attempt that found no slot: it parks itself after; it stays in line.
    Running,
    /// Parked at [`WAIT_MARK`]: it may be woken.
    Parked,
    /// Pending or scheduled for another reason (a breaker, a retry, a pause): it asks again
    /// when it comes; it stays in line.
    Elsewhere,
    /// Finished, cancelled, dead or gone: its entry is dropped.
    Gone,
}

impl InLine {
    /// The standing of an event with `status` and due time `due` (`None`: no such event).
    pub fn of(status: Option<&str>, due: Option<i64>) -> InLine {
        match (status, due) {
            (Some("processing"), _) => InLine::Running,
            (Some("pending"), Some(d)) if d == WAIT_MARK.as_millis() => InLine::Parked,
            (Some("pending" | "scheduled"), _) => InLine::Elsewhere,
            _ => InLine::Gone,
        }
    }
}

/// A limit as a store reads it to take or give back a slot: its limit over all partitions,
/// its limit per partition and what splits its events.
#[derive(Debug, Clone)]
pub struct StoredLimit {
    /// Runs at once over all partitions.
    pub max: u32,
    /// Runs at once of each partition, if it has partitions.
    pub per_partition: Option<u32>,
    /// What splits its events into partitions.
    pub by: Option<super::PartitionBy>,
}

impl StoredLimit {
    /// The room under this limit with `held` slots held: in all, and by partition.
    pub fn room(&self, held: (u64, HashMap<String, u64>)) -> Room {
        Room::new(self.max, held.0, self.per_partition, held.1)
    }

    /// Whether it has partitions.
    pub fn partitioned(&self) -> bool {
        self.per_partition.is_some()
    }
}

/// Which part of a subscription's line a wake reads.
#[derive(Debug, Clone, Copy)]
pub enum Reach<'a> {
    /// The first entries of one partition.
    Partition(&'a str),
    /// The first entries of each partition.
    EachPartition,
    /// The first entries of the whole line.
    All,
}

/// One entry of the line, in line order (by `seq`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiter {
    /// Its place in the line.
    pub seq: i64,
    /// Its partition (`""` when the limit has none).
    pub partition: String,
    /// Where its event stands.
    pub state: InLine,
    /// Woken already (under a limit with partitions; it leaves the line when it takes its
    /// slot).
    pub woken: bool,
}

/// The slots free under a limit: over all partitions, and in each partition when the limit
/// has a per-partition limit.
#[derive(Debug, Clone)]
pub struct Room {
    free: u64,
    per_partition: Option<u32>,
    held: HashMap<String, u64>,
}

impl Room {
    /// The room under a limit of `max` with `live` slots held, and at most `per_partition`
    /// of each partition with `held` slots held by partition (partitions not in it hold none).
    pub fn new(
        max: u32,
        live: u64,
        per_partition: Option<u32>,
        held: HashMap<String, u64>,
    ) -> Room {
        Room {
            free: super::to_wake(live, max),
            per_partition,
            held,
        }
    }

    /// Room without bounds (a removed limit wakes every event in line).
    pub fn unbounded() -> Room {
        Room {
            free: u64::MAX,
            per_partition: None,
            held: HashMap::new(),
        }
    }

    /// Slots free over all partitions.
    pub fn free(&self) -> u64 {
        self.free
    }

    /// Whether a run of `partition` may take a slot.
    pub fn admits(&self, partition: &str) -> bool {
        self.free > 0
            && self
                .per_partition
                .is_none_or(|max| self.held.get(partition).copied().unwrap_or(0) < u64::from(max))
    }

    /// A run of `partition` took a slot (or was woken to take one).
    pub fn take(&mut self, partition: &str) {
        self.free = self.free.saturating_sub(1);
        if self.per_partition.is_some() {
            *self.held.entry(partition.to_owned()).or_default() += 1;
        }
    }
}

/// Whether a run of `partition` may take a slot: the limit and its partition have `room`,
/// and no event of its partition waits in line ahead of it (`queued_ahead`; only read under
/// a limit with partitions).
pub fn may_take(room: &Room, partition: &str, queued_ahead: bool) -> bool {
    room.admits(partition) && !queued_ahead
}

/// Whether a freed slot whose own partition woke no event may wake one of another partition
/// (`room` as it is after the release): only under a limit with partitions, and only when the
/// limit over all partitions was full before the release, that is one slot is free now. An
/// event of another partition otherwise waits for its own partition's room, which this slot
/// does not free; reading every partition's line for it would be wasted.
pub fn wake_elsewhere(room: &Room, woke_own: u64) -> bool {
    woke_own == 0 && room.per_partition.is_some() && room.free() == 1
}

/// What to do with the line: wake these entries (indices into the line read), drop these
/// `seq`s and mark these woken.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Entries to wake (due now): indices into the line.
    pub wake: Vec<usize>,
    /// Entries that leave the line, by `seq` (gone events, and the woken ones of a limit
    /// without partitions).
    pub drop: Vec<i64>,
    /// Entries that stay in line marked woken, by `seq` (the woken ones of a limit with
    /// partitions).
    pub woken: Vec<i64>,
}

/// Wakes at most `most` parked events of `line` (in line order), each only while its
/// partition and the limit have room; drops the entries of events that are gone.
pub fn plan(line: &[Waiter], room: &mut Room, most: u64) -> Plan {
    let mut out = Plan::default();
    for (i, w) in line.iter().enumerate() {
        if out.wake.len() as u64 >= most || room.free() == 0 {
            break;
        }
        match w.state {
            InLine::Gone => out.drop.push(w.seq),
            _ if w.woken => {}
            InLine::Running | InLine::Elsewhere => {}
            InLine::Parked => {
                if room.admits(&w.partition) {
                    room.take(&w.partition);
                    out.wake.push(i);
                    if room.per_partition.is_some() {
                        out.woken.push(w.seq);
                    } else {
                        out.drop.push(w.seq);
                    }
                }
            }
        }
    }
    out
}

/// How many entries of the line to read for a wake of `n` (entries still running are passed
/// over; the next wake looks again).
pub fn scan(n: u64) -> i64 {
    i64::try_from(n.saturating_mul(4).saturating_add(16)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: i64, partition: &str, state: InLine) -> Waiter {
        Waiter {
            seq,
            partition: partition.into(),
            state,
            woken: false,
        }
    }

    #[test]
    fn standing_is_read_from_the_row() {
        assert_eq!(InLine::of(Some("processing"), None), InLine::Running);
        assert_eq!(
            InLine::of(Some("pending"), Some(WAIT_MARK.as_millis())),
            InLine::Parked
        );
        assert_eq!(InLine::of(Some("pending"), Some(5)), InLine::Elsewhere);
        assert_eq!(InLine::of(Some("scheduled"), Some(5)), InLine::Elsewhere);
        assert_eq!(InLine::of(Some("done"), None), InLine::Gone);
        assert_eq!(InLine::of(None, None), InLine::Gone);
    }

    #[test]
    fn a_wake_passes_over_running_events_and_drops_gone_ones() {
        let line = [
            w(1, "", InLine::Running),
            w(2, "", InLine::Gone),
            w(3, "", InLine::Parked),
            w(4, "", InLine::Parked),
        ];
        let p = plan(&line, &mut Room::new(3, 2, None, HashMap::new()), 5);
        assert_eq!(p.wake, vec![2]);
        assert_eq!(p.drop, vec![2, 3]);
        let p = plan(&line, &mut Room::unbounded(), 1);
        assert_eq!((p.wake, p.drop), (vec![2], vec![2, 3]));
    }

    #[test]
    fn a_full_partition_is_passed_over_for_one_with_room() {
        let line = [
            w(1, "a", InLine::Parked),
            w(2, "a", InLine::Parked),
            w(3, "b", InLine::Parked),
            w(4, "b", InLine::Parked),
            w(5, "c", InLine::Parked),
        ];
        let held = HashMap::from([("a".to_owned(), 2), ("b".to_owned(), 1)]);
        let p = plan(&line, &mut Room::new(100, 3, Some(2), held), 10);
        // a is full; b has room for one; c for two but has one waiting. The woken stay in
        // line, marked.
        assert_eq!(p.wake, vec![2, 4]);
        assert_eq!((p.woken, p.drop), (vec![3, 5], vec![]));
        // The limit over all partitions binds too.
        let p = plan(&line, &mut Room::new(4, 3, Some(2), HashMap::new()), 10);
        assert_eq!(p.wake, vec![0]);
        // An entry woken already is not woken again; one whose event is gone is dropped.
        let mut again = line.to_vec();
        again[0].woken = true;
        again[1].woken = true;
        again[1].state = InLine::Gone;
        let p = plan(&again, &mut Room::new(100, 0, Some(2), HashMap::new()), 10);
        assert_eq!((p.wake, p.drop), (vec![2, 3, 4], vec![2]));
    }

    #[test]
    fn a_freed_slot_looks_at_other_partitions_only_when_the_whole_limit_was_full() {
        let full_before = Room::new(4, 3, Some(2), HashMap::new());
        assert!(wake_elsewhere(&full_before, 0));
        assert!(
            !wake_elsewhere(&full_before, 1),
            "its own partition woke one"
        );
        assert!(!wake_elsewhere(
            &Room::new(10, 3, Some(2), HashMap::new()),
            0
        ));
        assert!(!wake_elsewhere(&Room::new(4, 3, None, HashMap::new()), 0));
    }

    #[test]
    fn a_run_waits_behind_its_partitions_line() {
        let room = Room::new(10, 0, Some(2), HashMap::new());
        assert!(may_take(&room, "a", false));
        assert!(!may_take(&room, "a", true));
        assert!(!may_take(
            &Room::new(1, 1, None, HashMap::new()),
            "a",
            false
        ));
    }

    #[test]
    fn a_run_may_take_a_slot_while_both_limits_have_room() {
        let held = HashMap::from([("a".to_owned(), 2)]);
        let room = Room::new(10, 2, Some(2), held);
        assert!(!room.admits("a"));
        assert!(room.admits("b"));
        assert!(!Room::new(2, 2, Some(5), HashMap::new()).admits("b"));
        assert!(Room::new(2, 1, None, HashMap::new()).admits("anything"));
        assert_eq!(scan(1), 20);
        assert_eq!(scan(u64::MAX), i64::MAX);
    }
}

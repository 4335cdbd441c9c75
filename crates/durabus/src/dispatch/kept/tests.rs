//! The rules of keeping slots, without a store.

use super::*;
use std::collections::HashSet;
use std::time::Duration;

const T: Duration = Duration::from_secs(5);

fn slot(part: &str, set_at: i64) -> Slot {
    Slot {
        row: EventId::new(),
        part: part.into(),
        lease_until: Timestamp(1_000).plus(T).plus(LEASE_MARGIN),
        set_at: Timestamp(set_at),
    }
}

fn reuse(
    k: &Kept,
    sub: &str,
    part: &str,
    set_at: i64,
    now: Timestamp,
    unfit: &mut Vec<(String, Slot)>,
) -> Option<Slot> {
    let run = Run {
        sub,
        part,
        set_at: Timestamp(set_at),
        now,
        timeout: T,
    };
    let bound = Bound {
        max: u32::MAX,
        per_partition: None,
    };
    match k.acquire(&run, bound, unfit) {
        Acquire::Kept(slot) => Some(slot),
        _ => None,
    }
}

fn busy() -> AtomicBool {
    AtomicBool::new(true)
}

fn idle_loop() -> AtomicBool {
    AtomicBool::new(false)
}

fn seen(set_at: i64, waiting: bool) -> HashMap<String, Seen> {
    let waiting = if waiting {
        Waiting::Parts(HashSet::from([String::new()]))
    } else {
        Waiting::None
    };
    HashMap::from([(
        "s".to_owned(),
        Seen {
            set_at: Timestamp(set_at),
            waiting,
        },
    )])
}

#[test]
fn a_slot_is_kept_only_for_events_queued_and_reused_in_its_partition() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    let mut unfit = Vec::new();
    let a = slot("a", 7);
    assert!(
        k.give_back(
            "s",
            a.clone(),
            true,
            Some(Timestamp(7)),
            &idle_loop(),
            now,
            T
        )
        .is_some(),
        "the worker loop is idle: given back"
    );
    assert!(
        k.give_back("s", a.clone(), false, Some(Timestamp(7)), &busy(), now, T)
            .is_some(),
        "a failed run: given back"
    );
    assert!(
        k.give_back("s", a.clone(), true, Some(Timestamp(8)), &busy(), now, T)
            .is_some(),
        "the limit was set anew: given back"
    );
    assert!(
        k.give_back("s", a.clone(), true, None, &busy(), now, T)
            .is_some(),
        "no limit now: given back"
    );
    assert_eq!(
        k.give_back("s", a.clone(), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
    assert_eq!(k.idle(), 1);
    assert_eq!(reuse(&k, "s", "b", 7, now, &mut unfit), None);
    assert_eq!(reuse(&k, "t", "a", 7, now, &mut unfit), None);
    assert_eq!(reuse(&k, "s", "a", 7, now, &mut unfit), Some(a));
    assert!(unfit.is_empty());
    assert_eq!(k.idle(), 0);
}

#[test]
fn at_most_keep_max_slots_are_kept() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    for _ in 0..KEEP_MAX {
        assert_eq!(
            k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T),
            None
        );
    }
    assert!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some()
    );
    assert_eq!(k.idle(), KEEP_MAX);
}

#[test]
fn a_refusal_stops_the_keeping_in_its_partition_only() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    let mut unfit = Vec::new();
    for part in ["a", "b"] {
        assert_eq!(
            k.give_back(
                "s",
                slot(part, 7),
                true,
                Some(Timestamp(7)),
                &busy(),
                now,
                T
            ),
            None
        );
    }
    let back = k.contended("s", "a");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].1.part, "a");
    assert!(
        k.give_back("s", slot("a", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some()
    );
    assert!(reuse(&k, "s", "b", 7, now, &mut unfit).is_some());
    // A refresh that reads other partitions waiting ends the pause of this one.
    let mut seen = seen(7, false);
    if let Some(s) = seen.get_mut("s") {
        s.waiting = Waiting::Parts(HashSet::from(["b".to_owned()]));
    }
    assert!(k.refresh(k.ticket(), &seen).is_empty());
    assert_eq!(
        k.give_back("s", slot("a", 7), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
    assert!(
        k.give_back("s", slot("b", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some()
    );
    if let Some(s) = seen.get_mut("s") {
        s.waiting = Waiting::All;
    }
    assert_eq!(k.refresh(k.ticket(), &seen).len(), 1);
}

#[test]
fn an_unfit_slot_is_not_reused_but_given_back() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    let mut unfit = Vec::new();
    let a = slot("", 7);
    assert_eq!(
        k.give_back("s", a.clone(), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
    // Read under a limit set since: not reused.
    assert_eq!(reuse(&k, "s", "", 9, now, &mut unfit), None);
    assert_eq!(unfit, vec![("s".to_owned(), a.clone())]);
    // A lease that would run out during the run.
    let late = now.plus(LEASE_MARGIN);
    assert!(
        k.give_back("s", a.clone(), true, Some(Timestamp(7)), &busy(), late, T)
            .is_some()
    );
    assert_eq!(k.idle(), 0);
}

#[test]
fn a_line_that_is_not_empty_stops_the_keeping_until_a_refresh_finds_it_empty() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    let mut unfit = Vec::new();
    assert_eq!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
    assert_eq!(k.contended("s", "").len(), 1, "the kept slot goes back");
    assert!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some(),
        "nothing kept while an event waits"
    );
    assert!(k.refresh(k.ticket(), &seen(7, true)).is_empty());
    assert!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some()
    );
    assert!(k.refresh(k.ticket(), &seen(7, false)).is_empty());
    assert_eq!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
    assert_eq!(
        k.refresh(k.ticket(), &seen(7, true)).len(),
        1,
        "a waiter seen by a refresh"
    );
    assert_eq!(reuse(&k, "s", "", 7, now, &mut unfit), None);
    // A refresh that read the limits before a refusal does not end the pause it began.
    let ticket = k.ticket();
    assert!(k.refresh(ticket, &seen(7, false)).is_empty());
    let ticket = k.ticket();
    assert!(k.contended("s", "").is_empty());
    assert!(k.refresh(ticket, &seen(7, false)).is_empty());
    assert!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T)
            .is_some(),
        "still paused"
    );
    assert!(k.refresh(k.ticket(), &seen(7, false)).is_empty());
    assert_eq!(
        k.give_back("s", slot("", 7), true, Some(Timestamp(7)), &busy(), now, T),
        None
    );
}

#[test]
fn refreshes_give_back_idle_slots_and_those_of_a_changed_or_removed_limit() {
    let k = Kept::default();
    let now = Timestamp(1_000);
    let keep = |set_at| {
        k.give_back(
            "s",
            slot("", set_at),
            true,
            Some(Timestamp(set_at)),
            &busy(),
            now,
            T,
        )
    };
    assert_eq!(keep(7), None);
    assert!(
        k.refresh(k.ticket(), &seen(7, false)).is_empty(),
        "kept since this refresh"
    );
    assert_eq!(
        k.refresh(k.ticket(), &seen(7, false)).len(),
        1,
        "idle since the last one"
    );
    assert_eq!(keep(7), None);
    assert_eq!(
        k.refresh(k.ticket(), &seen(8, false)).len(),
        1,
        "the limit was set anew"
    );
    assert_eq!(keep(7), None);
    assert_eq!(
        k.refresh(k.ticket(), &HashMap::new()).len(),
        1,
        "the limit was removed"
    );
    assert_eq!(keep(7), None);
    assert_eq!(keep(7), None);
    assert_eq!(k.take_all().len(), 2);
    assert_eq!(keep(7), None);
    assert_eq!(k.close().len(), 1);
    assert!(keep(7).is_some(), "nothing kept once closing");
    assert_eq!(k.idle(), 0);
}

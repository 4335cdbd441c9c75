//! Ordering keys, on every store: events of one key are handled one at a time in publish
//! order (across retries, dead letters, cancels, delays and restarts); other keys and unkeyed
//! events are not held up; bad keys are refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durabus::{
    Actor, ActorKind, ErrorKind, Event, EventBus, EventId, EventQuery, EventStatus, InsertMode,
    NewEvent, RetryOverride, SubscribeOptions,
};

use crate::support::*;

/// What the recording handler saw: per key, the payloads in the order their handling started,
/// and the most runs of one key in flight at once.
#[derive(Default)]
struct Log {
    order: HashMap<String, Vec<i64>>,
    running: HashMap<String, usize>,
    most: usize,
    calls: usize,
}

type Shared = Arc<Mutex<Log>>;

/// Subscribes a handler to `o.*` that records each run under its key and fails the payloads
/// in `fail` (each as often as its count says) before succeeding.
async fn recording(bus: &EventBus, options: SubscribeOptions, fail: HashMap<i64, usize>) -> Shared {
    let log: Shared = Arc::default();
    let fail = Arc::new(Mutex::new(fail));
    let l = log.clone();
    bus.subscribe(
        "o.*",
        move |e: Event| {
            let (l, fail) = (l.clone(), fail.clone());
            async move {
                let key = e.ordering_key.clone().unwrap_or_default();
                let n: i64 = e.payload().unwrap();
                {
                    let mut g = l.lock().unwrap();
                    g.calls += 1;
                    g.order.entry(key.clone()).or_default().push(n);
                    // Unkeyed events (key "") run side by side by design: only keys count.
                    if !key.is_empty() {
                        let r = g.running.entry(key.clone()).or_default();
                        *r += 1;
                        let r = *r;
                        g.most = g.most.max(r);
                    }
                }
                // Long enough for another worker slot to take a second event of the key if
                // the bus let it.
                tokio::time::sleep(Duration::from_millis(2)).await;
                if !key.is_empty() {
                    *l.lock().unwrap().running.get_mut(&key).unwrap() -= 1;
                }
                let mut f = fail.lock().unwrap();
                match f.get_mut(&n) {
                    Some(left) if *left > 0 => {
                        *left -= 1;
                        Err(format!("payload {n} fails").into())
                    }
                    _ => Ok(()),
                }
            }
        },
        options.name("recorder"),
    )
    .await
    .unwrap();
    log
}

fn keyed(key: &str, n: i64) -> NewEvent {
    NewEvent::new("o.step", &n).unwrap().ordering_key(key)
}

async fn status(bus: &EventBus, id: EventId) -> EventStatus {
    bus.store().get_event(id).await.unwrap().unwrap().status
}

async fn reach(bus: &EventBus, id: EventId, want: EventStatus) {
    eventually(&format!("{id} {want:?}"), || async {
        (status(bus, id).await == want).then_some(())
    })
    .await;
}

pub async fn events_of_a_key_run_one_at_a_time_in_publish_order(h: &Harness) {
    let bus = h.builder().await.concurrency(8).build().await.unwrap();
    let log = recording(&bus, SubscribeOptions::default(), HashMap::new()).await;
    // Interleaved across three keys, some in one batch, some one by one, plus unkeyed events.
    let mut batch = Vec::new();
    for n in 0..10 {
        for key in ["a", "b"] {
            batch.push(keyed(key, n));
        }
    }
    bus.enqueue_batch(batch).await.unwrap();
    for n in 0..10 {
        bus.enqueue_event(keyed("c", n)).await.unwrap();
        bus.enqueue("o.free", &(100 + n)).await.unwrap();
    }
    bus.start().await.unwrap();
    eventually("every event handled", || async {
        (log.lock().unwrap().calls == 40).then_some(())
    })
    .await;
    {
        let g = log.lock().unwrap();
        for key in ["a", "b", "c"] {
            assert_eq!(g.order[key], (0..10).collect::<Vec<_>>(), "key {key}");
        }
        assert_eq!(g.most, 1, "never two runs of one key at once");
    }
    bus.shutdown().await.unwrap();
}

pub async fn a_failing_event_holds_its_key_through_its_retries(h: &Harness) {
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(
        &bus,
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(5)),
        HashMap::from([(1, 2)]),
    )
    .await;
    bus.start().await.unwrap();
    let first = bus.enqueue_event(keyed("k", 1)).await.unwrap();
    let second = bus.enqueue_event(keyed("k", 2)).await.unwrap();
    let other = bus.enqueue_event(keyed("other", 9)).await.unwrap();
    // The other key is not held up; the second event waits while the first retries.
    reach(&bus, other, EventStatus::Done).await;
    eventually("the first failed once", || async {
        (log.lock().unwrap().order.get("k").map(Vec::len) == Some(1)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(status(&bus, second).await, EventStatus::Pending);
    assert_eq!(log.lock().unwrap().order["k"], vec![1]);
    // Past each retry's back-off, however late the worker gets to it (a busy machine).
    eventually("the first to succeed on its third attempt", || async {
        h.advance(Duration::from_secs(60));
        (status(&bus, first).await == EventStatus::Done).then_some(())
    })
    .await;
    reach(&bus, second, EventStatus::Done).await;
    assert_eq!(log.lock().unwrap().order["k"], vec![1, 1, 1, 2]);
    bus.shutdown().await.unwrap();
}

pub async fn a_dead_letter_lets_its_key_move_on_or_holds_it_until_retried(h: &Harness) {
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let no_retry = RetryOverride::default().max_retries(0);
    let log = recording(
        &bus,
        SubscribeOptions::default().retry(no_retry),
        HashMap::from([(1, 1)]),
    )
    .await;
    bus.start().await.unwrap();
    // The default: the key moves on past the dead letter. One batch: the later event is
    // stored before the first can run and die.
    let ids = bus
        .enqueue_batch(vec![keyed("moves", 1), keyed("moves", 2)])
        .await
        .unwrap();
    let (dead, next) = (ids[0], ids[1]);
    reach(&bus, dead, EventStatus::Dlq).await;
    reach(&bus, next, EventStatus::Done).await;
    let dl = bus.dead_letters().get(dead).await.unwrap();
    assert_eq!(dl.ordering_key.as_deref(), Some("moves"));
    assert_eq!(dl.key_waiting, Some(1), "one later event was waiting");
    assert_eq!(
        bus.store()
            .get_event(dead)
            .await
            .unwrap()
            .unwrap()
            .ordering_key
            .as_deref(),
        Some("moves")
    );
    // Retried while its key is busy again (a head waiting for its time): the dead letter
    // joins the back of the key, runs once the head finishes (on SQLite, handed over by that
    // completion), and its delivery resolves its record.
    let head = bus
        .enqueue_event(keyed("moves", 3).delay(Duration::from_secs(600)))
        .await
        .unwrap();
    let me = Actor::new("ops", ActorKind::Library);
    bus.dead_letters().retry(dead, &me).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        status(&bus, dead).await,
        EventStatus::Pending,
        "behind the busy key"
    );
    h.advance(Duration::from_secs(600));
    reach(&bus, dead, EventStatus::Done).await;
    assert_eq!(status(&bus, head).await, EventStatus::Done);
    assert_eq!(log.lock().unwrap().order["moves"], vec![1, 2, 3, 1]);
    assert_eq!(
        bus.dead_letters().get(dead).await.unwrap().status,
        durabus::DeadLetterStatus::Resolved
    );
    bus.shutdown().await.unwrap();

    // hold_key_on_dead_letter: later events wait until the dead letter is retried.
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log2 = recording(
        &bus,
        SubscribeOptions::default()
            .retry(no_retry)
            .hold_key_on_dead_letter(true),
        HashMap::from([(11, 1)]),
    )
    .await;
    bus.start().await.unwrap();
    let dead = bus.enqueue_event(keyed("held", 11)).await.unwrap();
    let waits = bus.enqueue_event(keyed("held", 12)).await.unwrap();
    let free = bus.enqueue_event(keyed("free", 13)).await.unwrap();
    reach(&bus, dead, EventStatus::Dlq).await;
    reach(&bus, free, EventStatus::Done).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        status(&bus, waits).await,
        EventStatus::Pending,
        "held by the dead letter"
    );
    let g = bus.store().gauges(h.clock.now()).await.unwrap();
    assert_eq!(g.held_keys, 1);
    assert!(g.oldest_held_key_at.is_some());
    let me = Actor::new("ops", ActorKind::Library);
    bus.dead_letters().retry(dead, &me).await.unwrap();
    reach(&bus, dead, EventStatus::Done).await;
    reach(&bus, waits, EventStatus::Done).await;
    assert_eq!(log2.lock().unwrap().order["held"], vec![11, 11, 12]);
    assert_eq!(
        bus.store().gauges(h.clock.now()).await.unwrap().held_keys,
        0
    );
    drop(log);
    bus.shutdown().await.unwrap();
}

/// The purge's last resort, deleting dead events that have no record, lets a key one of them
/// held move on (else the key's later events would wait for good).
pub async fn deleting_a_dead_event_that_holds_its_key_moves_the_key_on(h: &Harness) {
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(
        &bus,
        SubscribeOptions::default()
            .retry(RetryOverride::default().max_retries(0))
            .hold_key_on_dead_letter(true),
        HashMap::from([(1, 1)]),
    )
    .await;
    bus.start().await.unwrap();
    let dead = bus.enqueue_event(keyed("k", 1)).await.unwrap();
    let waits = bus.enqueue_event(keyed("k", 2)).await.unwrap();
    reach(&bus, dead, EventStatus::Dlq).await;
    assert_eq!(status(&bus, waits).await, EventStatus::Pending);
    // Not dead: nothing is deleted, the key stays as it is.
    assert_eq!(
        bus.store()
            .dlq_delete_dead_events(vec![waits], h.clock.now())
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        bus.store().gauges(h.clock.now()).await.unwrap().held_keys,
        1
    );
    assert_eq!(
        bus.store()
            .dlq_delete_dead_events(vec![dead], h.clock.now())
            .await
            .unwrap(),
        1
    );
    reach(&bus, waits, EventStatus::Done).await;
    assert!(bus.store().get_event(dead).await.unwrap().is_none());
    assert_eq!(log.lock().unwrap().order["k"], vec![1, 2]);
    assert_eq!(
        bus.store().gauges(h.clock.now()).await.unwrap().held_keys,
        0
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_delayed_head_holds_its_key_and_a_cancel_moves_it_on(h: &Harness) {
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(&bus, SubscribeOptions::default(), HashMap::new()).await;
    bus.start().await.unwrap();
    // Ordered, delayed and prioritised together.
    let later = bus
        .enqueue_event(keyed("d", 1).delay(Duration::from_secs(600)).priority(5))
        .await
        .unwrap();
    let now = bus.enqueue_event(keyed("d", 2)).await.unwrap();
    let third = bus.enqueue_event(keyed("d", 3).priority(-3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(
        status(&bus, now).await,
        EventStatus::Pending,
        "behind the delayed head"
    );
    assert!(!log.lock().unwrap().order.contains_key("d"));
    // The delayed head comes due: then the rest follow in order.
    h.advance(Duration::from_secs(600));
    reach(&bus, third, EventStatus::Done).await;
    assert_eq!(log.lock().unwrap().order["d"], vec![1, 2, 3]);
    assert_eq!(status(&bus, later).await, EventStatus::Done);

    // A cancelled head lets the key move on; a cancelled waiting event leaves the queue.
    let head = bus
        .enqueue_event(keyed("e", 1).delay(Duration::from_secs(600)))
        .await
        .unwrap();
    let gone = bus.enqueue_event(keyed("e", 2)).await.unwrap();
    let last = bus.enqueue_event(keyed("e", 3)).await.unwrap();
    let cancel = |id| durabus::cancel::CancelRequest {
        event_id: id,
        subscription: None,
        actor: Actor::new("ops", ActorKind::Library),
        reason: "withdrawn".into(),
    };
    bus.cancel(cancel(gone)).await.unwrap();
    bus.cancel(cancel(head)).await.unwrap();
    reach(&bus, last, EventStatus::Done).await;
    assert_eq!(log.lock().unwrap().order["e"], vec![3]);

    // A cancelled last event: the one ahead of it is the key's last again, and an event
    // published then waits behind it.
    let head = bus
        .enqueue_event(keyed("f", 1).delay(Duration::from_secs(600)))
        .await
        .unwrap();
    let tail = bus.enqueue_event(keyed("f", 2)).await.unwrap();
    bus.cancel(cancel(tail)).await.unwrap();
    let after = bus.enqueue_event(keyed("f", 3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        status(&bus, after).await,
        EventStatus::Pending,
        "behind the delayed head"
    );
    assert!(!log.lock().unwrap().order.contains_key("f"));
    h.advance(Duration::from_secs(600));
    reach(&bus, after, EventStatus::Done).await;
    assert_eq!(status(&bus, head).await, EventStatus::Done);
    assert_eq!(log.lock().unwrap().order["f"], vec![1, 3]);
    bus.shutdown().await.unwrap();
}

/// A key moved on by an operator (a cancelled head, a resolved dead letter that held it, a
/// held dead event deleted) wakes the worker: the next event of the key runs at once, not at
/// the next poll (an hour away here).
pub async fn a_key_moved_on_by_an_operator_wakes_the_worker(h: &Harness) {
    let bus = h
        .builder()
        .await
        .concurrency(4)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .await
        .unwrap();
    let log = recording(
        &bus,
        SubscribeOptions::default()
            .retry(RetryOverride::default().max_retries(0))
            .hold_key_on_dead_letter(true),
        HashMap::from([(21, 1), (31, 1)]),
    )
    .await;
    bus.start().await.unwrap();
    let me = Actor::new("ops", ActorKind::Library);

    // A cancelled head.
    let head = bus
        .enqueue_event(keyed("c", 1).delay(Duration::from_secs(600)))
        .await
        .unwrap();
    let next = bus.enqueue_event(keyed("c", 2)).await.unwrap();
    // The worker has looked and found nothing due: it waits for a wake-up.
    tokio::time::sleep(Duration::from_millis(50)).await;
    bus.cancel(durabus::cancel::CancelRequest {
        event_id: head,
        subscription: None,
        actor: me.clone(),
        reason: "withdrawn".into(),
    })
    .await
    .unwrap();
    reach(&bus, next, EventStatus::Done).await;

    // A dead letter holding its key, resolved.
    let dead = bus.enqueue_event(keyed("r", 21)).await.unwrap();
    let waits = bus.enqueue_event(keyed("r", 22)).await.unwrap();
    reach(&bus, dead, EventStatus::Dlq).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(status(&bus, waits).await, EventStatus::Pending);
    bus.dead_letters()
        .resolve(dead, "handled by hand", &me)
        .await
        .unwrap();
    reach(&bus, waits, EventStatus::Done).await;

    // A dead event holding its key, deleted without its record.
    let dead = bus.enqueue_event(keyed("d", 31)).await.unwrap();
    let waits = bus.enqueue_event(keyed("d", 32)).await.unwrap();
    reach(&bus, dead, EventStatus::Dlq).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        bus.store()
            .dlq_delete_dead_events(vec![dead], h.clock.now())
            .await
            .unwrap(),
        1
    );
    reach(&bus, waits, EventStatus::Done).await;
    let order = log.lock().unwrap().order.clone();
    assert_eq!(
        (&order["c"], &order["r"], &order["d"]),
        (&vec![2], &vec![21, 22], &vec![31, 32])
    );
    bus.shutdown().await.unwrap();
}

pub async fn a_keys_order_survives_a_crash_mid_delivery(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let events: Vec<NewEvent> = (1..=3).map(|n| keyed("crash", n)).collect();
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    store
        .insert(events, InsertMode::Pending, now)
        .await
        .unwrap();
    // A worker claims the head and dies during its attempt: only the head was claimable.
    let claimed = store.claim_due(now, 10).await.unwrap();
    assert_eq!(
        claimed.iter().map(|e| e.id).collect::<Vec<_>>(),
        vec![ids[0]]
    );
    drop(store);
    // Past any lease (PostgreSQL takes a dead worker's events over when it runs out; SQLite
    // recovers them when the bus starts).
    h.advance(Duration::from_secs(3600));
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(&bus, SubscribeOptions::default(), HashMap::new()).await;
    bus.start().await.unwrap();
    reach(&bus, ids[2], EventStatus::Done).await;
    assert_eq!(log.lock().unwrap().order["crash"], vec![1, 2, 3]);
    assert_eq!(log.lock().unwrap().most, 1);
    let listed = bus.history().list(EventQuery::default()).await.unwrap();
    assert!(
        listed
            .iter()
            .all(|e| e.ordering_key.as_deref() == Some("crash"))
    );
    bus.shutdown().await.unwrap();
}

/// A cancel that came while a key's head ran, then a crash before its outcome: the head ends
/// cancelled without running again, and the key moves on in order.
pub async fn a_head_cancelled_while_running_then_crashed_lets_its_key_move_on(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    let events: Vec<NewEvent> = (1..=3).map(|n| keyed("gone", n)).collect();
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    store
        .insert(events, InsertMode::Pending, now)
        .await
        .unwrap();
    assert_eq!(claim_ids(&*store, now, 10).await, vec![ids[0]]);
    let answer = store
        .cancel_event(
            durabus::cancel::CancelRequest {
                event_id: ids[0],
                subscription: None,
                actor: Actor::new("ops", ActorKind::Library),
                reason: "withdrawn".into(),
            },
            now,
        )
        .await
        .unwrap();
    assert_eq!(answer.outcome, durabus::cancel::CancelOutcome::Running);
    drop(store);
    h.advance(PAST_ANY_LEASE);
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(&bus, SubscribeOptions::default(), HashMap::new()).await;
    bus.start().await.unwrap();
    reach(&bus, ids[2], EventStatus::Done).await;
    assert_eq!(status(&bus, ids[0]).await, EventStatus::Cancelled);
    assert_eq!(log.lock().unwrap().order["gone"], vec![2, 3]);
    bus.shutdown().await.unwrap();
}

/// A dead letter retried behind a busy key, then resolved before it ran: the retry is called
/// off, it leaves the key's queue, and the event behind it runs after the head.
pub async fn a_retry_called_off_while_waiting_behind_its_key_leaves_the_queue(h: &Harness) {
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    let log = recording(
        &bus,
        SubscribeOptions::default().retry(RetryOverride::default().max_retries(0)),
        HashMap::from([(1, 1)]),
    )
    .await;
    bus.start().await.unwrap();
    let me = Actor::new("ops", ActorKind::Library);
    let dead = bus.enqueue_event(keyed("w", 1)).await.unwrap();
    reach(&bus, dead, EventStatus::Dlq).await;
    // The key is busy with a delayed head; the retried dead letter waits behind it, and an
    // event published after the retry waits behind the dead letter.
    let head = bus
        .enqueue_event(keyed("w", 2).delay(Duration::from_secs(600)))
        .await
        .unwrap();
    bus.dead_letters().retry(dead, &me).await.unwrap();
    let last = bus.enqueue_event(keyed("w", 3)).await.unwrap();
    assert_eq!(status(&bus, dead).await, EventStatus::Pending);
    bus.dead_letters()
        .resolve(dead, "fixed by hand", &me)
        .await
        .unwrap();
    assert_eq!(status(&bus, dead).await, EventStatus::Dlq);
    h.advance(Duration::from_secs(600));
    reach(&bus, last, EventStatus::Done).await;
    assert_eq!(status(&bus, head).await, EventStatus::Done);
    assert_eq!(log.lock().unwrap().order["w"], vec![1, 2, 3]);
    assert_eq!(
        bus.dead_letters().get(dead).await.unwrap().status,
        durabus::DeadLetterStatus::Resolved
    );
    bus.shutdown().await.unwrap();
}

/// `id` handled by every subscription.
fn done(id: EventId) -> durabus::Outcome {
    durabus::Outcome::Done {
        id,
        delivered: vec!["recorder".into()],
    }
}

/// The ids `store` claims at `at` (at most `limit`). On PostgreSQL a claim makes due
/// scheduled events pending and the next claim takes them (a statement does not see its own
/// changes), so an empty claim is tried once more.
async fn claim_ids(
    store: &dyn durabus::Store,
    at: durabus::Timestamp,
    limit: usize,
) -> Vec<EventId> {
    let mut claimed = store.claim_due(at, limit).await.unwrap();
    if claimed.is_empty() {
        claimed = store.claim_due(at, limit).await.unwrap();
    }
    claimed.iter().map(|e| e.id).collect()
}

pub async fn a_finished_head_wakes_its_successor_scheduled_or_due_in_its_lane(h: &Harness) {
    let store = h.backend.open().await;
    let now = h.clock.now();
    // A head due now; behind it one delayed by 600 s, then one with a priority.
    let events = vec![
        keyed("w", 1),
        keyed("w", 2).delay(Duration::from_secs(600)),
        keyed("w", 3).priority(7),
        NewEvent::new("o.free", &4).unwrap(),
    ];
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    store
        .insert(events, InsertMode::Pending, now)
        .await
        .unwrap();
    assert_eq!(
        claim_ids(&*store, now, 1).await,
        vec![ids[0]],
        "only the key's head is claimable"
    );
    // The head finishes: its successor's delivery time is still ahead, so it is scheduled,
    // not claimable, and it holds the key.
    assert!(store.record(done(ids[0]), now).await.unwrap());
    let second = store.get_event(ids[1]).await.unwrap().unwrap();
    assert_eq!(second.status, EventStatus::Scheduled);
    assert_eq!(
        claim_ids(&*store, now, 10).await,
        vec![ids[3]],
        "the key waits for its scheduled event"
    );
    assert!(store.record(done(ids[3]), now).await.unwrap());
    // Its time comes: it runs, then the prioritised one is due in its lane, ahead of an
    // unkeyed event published after it.
    let later = h.clock.now().plus(Duration::from_secs(600));
    h.advance(Duration::from_secs(600));
    assert_eq!(claim_ids(&*store, later, 10).await, vec![ids[1]]);
    let plain = NewEvent::new("o.free", &5).unwrap();
    let plain_id = plain.id;
    store
        .insert(vec![plain], InsertMode::Pending, later)
        .await
        .unwrap();
    assert!(store.record(done(ids[1]), later).await.unwrap());
    assert_eq!(
        claim_ids(&*store, later, 1).await,
        vec![ids[2]],
        "the woken event's priority puts it first"
    );
    assert_eq!(store.get_event(ids[2]).await.unwrap().unwrap().priority, 7);
    assert!(store.record(done(ids[2]), later).await.unwrap());
    assert_eq!(claim_ids(&*store, later, 10).await, vec![plain_id]);
}

pub async fn bad_ordering_keys_are_refused_and_nothing_is_stored(h: &Harness) {
    let bus = h.bus().await;
    for key in [String::new(), "k".repeat(256)] {
        let e = NewEvent::new("o.bad", &1).unwrap().ordering_key(key);
        for err in [
            bus.enqueue_event(e.clone()).await.unwrap_err(),
            bus.publish_event(e.clone()).await.unwrap_err(),
        ] {
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
            assert_eq!(
                err.invalid_value().map(|i| i.field).as_deref(),
                Some("ordering_key")
            );
        }
    }
    assert!(
        bus.history()
            .list(EventQuery::default())
            .await
            .unwrap()
            .is_empty()
    );
    bus.shutdown().await.unwrap();
}

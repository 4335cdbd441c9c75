//! Concurrency limits per subscription, on every store: at most N runs at once across two
//! processes with the rest waiting in line, a per-process limit, the slots of a process that
//! died coming back with their lease, and what is refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use durabus::concurrency::WAIT_MARK;
use durabus::{
    Actor, ActorKind, Clock, ErrorKind, Event, EventBus, EventId, EventStatus, SubscribeOptions,
};
use tokio::sync::Semaphore;

use crate::support::*;

const REFRESH: Duration = Duration::from_millis(10);

/// What the handlers saw: runs started, finished, and the most in flight at once.
#[derive(Default)]
struct Runs {
    started: AtomicU32,
    finished: AtomicU32,
    now: AtomicU32,
    most: AtomicU32,
}

async fn process(h: &Harness, runs: &Arc<Runs>, gate: &Arc<Semaphore>) -> EventBus {
    let bus = unstarted(h, runs, gate, REFRESH).await;
    bus.start().await.unwrap();
    bus
}

/// A bus refreshing every `refresh` whose subscription `work` records its runs in `runs` and
/// ends each when `gate` lets it; not started.
async fn unstarted(
    h: &Harness,
    runs: &Arc<Runs>,
    gate: &Arc<Semaphore>,
    refresh: Duration,
) -> EventBus {
    let bus = h
        .builder()
        .await
        .pause_refresh(refresh)
        .build()
        .await
        .unwrap();
    let (runs, gate) = (runs.clone(), gate.clone());
    bus.subscribe(
        "c.*",
        move |_e: Event| {
            let (runs, gate) = (runs.clone(), gate.clone());
            async move {
                runs.started.fetch_add(1, Ordering::SeqCst);
                let now = runs.now.fetch_add(1, Ordering::SeqCst) + 1;
                runs.most.fetch_max(now, Ordering::SeqCst);
                gate.acquire().await.map_err(|e| e.to_string())?.forget();
                runs.now.fetch_sub(1, Ordering::SeqCst);
                runs.finished.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        },
        SubscribeOptions::default().name("work"),
    )
    .await
    .unwrap();
    bus
}

fn ops() -> Actor {
    Actor::new("ops", ActorKind::Library)
}

async fn settle(runs: &Runs, started: u32) {
    eventually(&format!("{started} runs started"), || async {
        (runs.started.load(Ordering::SeqCst) >= started).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(runs.started.load(Ordering::SeqCst), started);
}

pub async fn a_concurrency_limit_holds_across_processes_and_the_line_moves(h: &Harness) {
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(0)));
    let a = process(h, &runs, &gate).await;
    let b = process(h, &runs, &gate).await;
    let limit = a
        .concurrency_limits()
        .set("work", 2, None, &ops())
        .await
        .unwrap();
    assert_eq!((limit.max_in_flight, limit.in_flight), (2, 0));
    tokio::time::sleep(REFRESH * 5).await;
    let mut ids = Vec::new();
    for (i, bus) in [&a, &b, &a, &b, &a, &b].into_iter().enumerate() {
        ids.push(bus.enqueue("c.job", &i).await.unwrap());
    }
    // Two run (one process or both); the other four wait in line, parked, no attempt counted.
    settle(&runs, 2).await;
    let waiting: Vec<EventId> = eventually("four events in line", || async {
        let mut waiting = Vec::new();
        for id in &ids {
            let e = get(&a, *id).await;
            assert_eq!(e.retry_count, 0);
            if e.status == EventStatus::Pending && e.next_attempt_at == Some(WAIT_MARK) {
                waiting.push(*id);
            }
        }
        (waiting.len() == 4).then_some(waiting)
    })
    .await;
    let listed = a.concurrency_limits().list().await.unwrap();
    assert_eq!((listed[0].in_flight, listed[0].waiting), (2, 4));
    // And in the metrics.
    let m = super::telemetry::scrape(&b).await;
    let gauge = |what: &str| {
        super::telemetry::num(
            &m,
            "durabus_concurrency_limit",
            &[("subscription", "work"), ("what", what)],
        )
    };
    assert_eq!(
        (gauge("max"), gauge("in_flight"), gauge("waiting")),
        (2.0, 2.0, 4.0)
    );
    // Each run that ends lets the first in line through.
    gate.add_permits(1);
    settle(&runs, 3).await;
    gate.add_permits(10);
    for id in ids {
        wait_status(&a, id, EventStatus::Done).await;
    }
    assert_eq!(runs.finished.load(Ordering::SeqCst), 6);
    assert_eq!(
        runs.most.load(Ordering::SeqCst),
        2,
        "never more than the limit at once"
    );
    assert_eq!(waiting.len(), 4);
    let listed = a.concurrency_limits().list().await.unwrap();
    assert_eq!((listed[0].in_flight, listed[0].waiting), (0, 0));
    for bus in [a, b] {
        bus.shutdown().await.unwrap();
    }
}

pub async fn a_per_process_limit_holds_in_each_process(h: &Harness) {
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(0)));
    let bus = process(h, &runs, &gate).await;
    bus.concurrency_limits()
        .set("work", 10, Some(1), &ops())
        .await
        .unwrap();
    tokio::time::sleep(REFRESH * 5).await;
    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(bus.enqueue("c.job", &i).await.unwrap());
    }
    settle(&runs, 1).await;
    gate.add_permits(10);
    for id in ids {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    assert_eq!(runs.most.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

pub async fn slots_of_a_process_that_died_come_back_with_their_lease(h: &Harness) {
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(10)));
    let bus = process(h, &runs, &gate).await;
    bus.concurrency_limits()
        .set("work", 1, None, &ops())
        .await
        .unwrap();
    // A process that died holding the only slot, its lease 30 s on.
    let now = h.clock.now();
    let taken = bus
        .store()
        .concurrency_take(
            "work",
            &durabus::concurrency::SlotAsk::new(EventId::new()),
            "gone",
            now,
            now.plus(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(taken, durabus::concurrency::SlotTake::Granted);
    tokio::time::sleep(REFRESH * 5).await;
    let id = bus.enqueue("c.job", &1).await.unwrap();
    eventually("the event to wait in line", || async {
        (get(&bus, id).await.next_attempt_at == Some(WAIT_MARK)).then_some(())
    })
    .await;
    assert_eq!(runs.started.load(Ordering::SeqCst), 0);
    // The lease runs out: the next refresh frees the slot and wakes the event.
    h.advance(Duration::from_secs(31));
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(runs.started.load(Ordering::SeqCst), 1);
    bus.shutdown().await.unwrap();
}

pub async fn bad_concurrency_limits_are_refused_and_nothing_changes(h: &Harness) {
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(0)));
    let bus = process(h, &runs, &gate).await;
    let limits = bus.concurrency_limits();
    for (max, per) in [
        (0, None),
        (durabus::concurrency::MAX_IN_FLIGHT + 1, None),
        (4, Some(0)),
        (4, Some(durabus::concurrency::MAX_IN_FLIGHT + 1)),
    ] {
        let e = limits.set("work", max, per, &ops()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{max} {per:?}: {e}");
    }
    let e = limits.set("nobody", 1, None, &ops()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(limits.list().await.unwrap().is_empty());
    limits.set("work", 3, None, &ops()).await.unwrap();
    let gone = limits.remove("work").await.unwrap();
    assert_eq!((gone.max_in_flight, gone.set_by.name.as_str()), (3, "ops"));
    assert_eq!(
        limits.remove("work").await.unwrap_err().kind(),
        ErrorKind::NotFound
    );
    bus.shutdown().await.unwrap();
}

pub async fn slots_kept_between_runs_go_back_when_the_worker_runs_out_of_events(h: &Harness) {
    // A limit as large as the process's delivery slots (16): no event joins the line, so the
    // process keeps the slots of its runs. Refreshes 10 s apart and a clock that stands
    // still (no lease runs out): only the worker running out of events can give them back.
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(1_000)));
    let bus = unstarted(h, &runs, &gate, Duration::from_secs(10)).await;
    bus.concurrency_limits()
        .set("work", 16, None, &ops())
        .await
        .unwrap();
    bus.start().await.unwrap();
    let events = (0..60)
        .map(|i| durabus::NewEvent::new("c.job", &i).unwrap())
        .collect();
    let ids = bus.enqueue_batch(events).await.unwrap();
    for id in ids {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    assert_eq!(runs.finished.load(Ordering::SeqCst), 60);
    assert!(
        runs.most.load(Ordering::SeqCst) <= 16,
        "never more than the limit at once"
    );
    eventually("every slot back in the store", || async {
        let l = bus.concurrency_limits().list().await.unwrap();
        ((l[0].in_flight, l[0].waiting) == (0, 0)).then_some(())
    })
    .await;
    // The same once more: the process keeps slots again for the next stream.
    let events = (0..20)
        .map(|i| durabus::NewEvent::new("c.job", &i).unwrap())
        .collect();
    for id in bus.enqueue_batch(events).await.unwrap() {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    assert!(runs.most.load(Ordering::SeqCst) <= 16);
    eventually("every slot back in the store again", || async {
        let l = bus.concurrency_limits().list().await.unwrap();
        (l[0].in_flight == 0).then_some(())
    })
    .await;
    bus.shutdown().await.unwrap();
}

pub async fn a_stream_under_a_limit_shared_by_two_processes_all_runs_and_holds_it(h: &Harness) {
    // Each process keeps the slot it holds while it has events; the other's events wait in
    // the store's line, which a refresh sees: the keeper gives the slot back and the line
    // moves. Every event runs, never two at once.
    let (runs, gate) = (Arc::new(Runs::default()), Arc::new(Semaphore::new(1_000)));
    let a = process(h, &runs, &gate).await;
    let b = process(h, &runs, &gate).await;
    a.concurrency_limits()
        .set("work", 1, None, &ops())
        .await
        .unwrap();
    tokio::time::sleep(REFRESH * 5).await;
    let mut ids = Vec::new();
    for bus in [&a, &b] {
        let events = (0..40)
            .map(|i| durabus::NewEvent::new("c.job", &i).unwrap())
            .collect();
        ids.extend(bus.enqueue_batch(events).await.unwrap());
    }
    for id in ids {
        wait_status(&a, id, EventStatus::Done).await;
    }
    assert_eq!(runs.finished.load(Ordering::SeqCst), 80);
    assert_eq!(runs.most.load(Ordering::SeqCst), 1, "never two at once");
    eventually("the slot back in the store", || async {
        let l = a.concurrency_limits().list().await.unwrap();
        ((l[0].in_flight, l[0].waiting) == (0, 0)).then_some(())
    })
    .await;
    for bus in [a, b] {
        bus.shutdown().await.unwrap();
    }
}

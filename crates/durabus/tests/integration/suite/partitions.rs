//! Concurrency limits per partition (tenant), on every store: at most M runs of each tenant at
//! once with the others running beside it, a freed slot going to its own tenant's line, a
//! small tenant's events not stuck behind a large tenant's backlog, and what is refused.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durabus::concurrency::{PartitionBy, PartitionLimit};
use durabus::{
    Actor, ActorKind, ErrorKind, Event, EventBus, EventStatus, NewEvent, SubscribeOptions,
};
use tokio::sync::Semaphore;

use crate::support::*;

const REFRESH: Duration = Duration::from_millis(10);

/// What the handlers saw, by tenant: runs in flight now, the most at once, and the order in
/// which runs finished.
#[derive(Default)]
struct Tenants {
    now: HashMap<String, u32>,
    most: HashMap<String, u32>,
    finished: Vec<String>,
    started: u32,
}

fn tenant(e: &Event) -> String {
    e.metadata.get("tenant").cloned().unwrap_or_default()
}

/// A bus whose handler of `t.*` (subscription `work`) records `seen` and waits for `gate`;
/// on the system clock if `wall`.
async fn process(
    h: &Harness,
    seen: &Arc<Mutex<Tenants>>,
    gate: &Arc<Semaphore>,
    wall: bool,
) -> EventBus {
    process_refreshed(h, seen, gate, wall, REFRESH).await
}

/// [`process`], reading the limits (and sweeping their lines) every `refresh`.
async fn process_refreshed(
    h: &Harness,
    seen: &Arc<Mutex<Tenants>>,
    gate: &Arc<Semaphore>,
    wall: bool,
    refresh: Duration,
) -> EventBus {
    let mut builder = h.builder().await.pause_refresh(refresh);
    if wall {
        builder = builder.clock(Arc::new(durabus::SystemClock));
    }
    let bus = builder.build().await.unwrap();
    let (seen, gate) = (seen.clone(), gate.clone());
    bus.subscribe(
        "t.*",
        move |e: Event| {
            let (seen, gate) = (seen.clone(), gate.clone());
            async move {
                let who = tenant(&e);
                {
                    let mut s = seen.lock().unwrap();
                    s.started += 1;
                    let now = s.now.entry(who.clone()).or_default();
                    *now += 1;
                    let now = *now;
                    let most = s.most.entry(who.clone()).or_default();
                    *most = (*most).max(now);
                }
                gate.acquire().await.map_err(|e| e.to_string())?.forget();
                let mut s = seen.lock().unwrap();
                *s.now.entry(who.clone()).or_default() -= 1;
                s.finished.push(who);
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

fn by_tenant(each: u32) -> Option<PartitionLimit> {
    Some(PartitionLimit::new(
        PartitionBy::Metadata("tenant".into()),
        each,
    ))
}

fn of(who: &str, n: usize) -> NewEvent {
    let e = NewEvent::new("t.job", &n).unwrap();
    if who.is_empty() {
        e
    } else {
        e.with_metadata("tenant", who)
    }
}

pub async fn a_partition_limit_holds_per_tenant_and_the_others_run_beside_it(h: &Harness) {
    let (seen, gate) = (
        Arc::new(Mutex::new(Tenants::default())),
        Arc::new(Semaphore::new(0)),
    );
    let bus = process(h, &seen, &gate, false).await;
    bus.start().await.unwrap();
    let set = bus
        .concurrency_limits()
        .set_partitioned("work", 10, None, by_tenant(1), &ops())
        .await
        .unwrap();
    assert_eq!(set.partition, by_tenant(1));
    tokio::time::sleep(REFRESH * 5).await;
    let events = ["a", "a", "a", "b", "b", ""]
        .iter()
        .enumerate()
        .map(|(i, who)| of(who, i))
        .collect();
    let ids = bus.enqueue_batch(events).await.unwrap();
    // One of each tenant runs (the events without the field share the partition ""); the
    // other three wait in line.
    eventually("one run of each tenant", || async {
        (seen.lock().unwrap().started == 3).then_some(())
    })
    .await;
    eventually("three events in line", || async {
        let l = bus.concurrency_limits().list().await.unwrap();
        (l[0].in_flight == 3 && l[0].waiting == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(40)).await;
    assert_eq!(seen.lock().unwrap().started, 3);
    // A run of b that ends lets b's next through, not a's.
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.now.get("a"), Some(&1));
        assert_eq!(s.now.get("b"), Some(&1));
        assert_eq!(s.now.get(""), Some(&1));
    }
    gate.add_permits(100);
    for id in ids {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    {
        let s = seen.lock().unwrap();
        assert_eq!(s.finished.len(), 6);
        for who in ["a", "b", ""] {
            assert_eq!(
                s.most.get(who),
                Some(&1),
                "tenant {who:?} ran more than 1 at once"
            );
        }
    }
    // Set again without partitions: the partition limit is gone.
    let plain = bus
        .concurrency_limits()
        .set("work", 10, None, &ops())
        .await
        .unwrap();
    assert_eq!(plain.partition, None);
    bus.shutdown().await.unwrap();
}

pub async fn a_slot_freed_under_a_full_limit_goes_to_another_tenant_when_its_own_has_none(
    h: &Harness,
) {
    let (seen, gate) = (
        Arc::new(Mutex::new(Tenants::default())),
        Arc::new(Semaphore::new(0)),
    );
    // No refresh in the test's time: only the freed slot can wake b (a sweep would too).
    let bus = process_refreshed(h, &seen, &gate, false, Duration::from_secs(10)).await;
    // Two at once in all, two of each tenant: a's two runs fill the limit; b waits for room
    // over all tenants, not for its own.
    bus.concurrency_limits()
        .set_partitioned("work", 2, None, by_tenant(2), &ops())
        .await
        .unwrap();
    bus.start().await.unwrap();
    let a = bus
        .enqueue_batch(vec![of("a", 0), of("a", 1)])
        .await
        .unwrap();
    eventually("a's two runs", || async {
        (seen.lock().unwrap().started == 2).then_some(())
    })
    .await;
    let b = bus.enqueue_event(of("b", 2)).await.unwrap();
    eventually("b in line", || async {
        let l = bus.concurrency_limits().list().await.unwrap();
        (l[0].waiting == 1).then_some(())
    })
    .await;
    // One of a's runs ends: a has no one in line, so the slot goes to b.
    gate.add_permits(1);
    let freed = std::time::Instant::now();
    while seen.lock().unwrap().now.get("b") != Some(&1) {
        // Well before the next refresh (10 s after the start) could wake b instead.
        assert!(
            freed.elapsed() < Duration::from_secs(3),
            "the freed slot did not wake b"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    gate.add_permits(10);
    for id in a.into_iter().chain([b]) {
        wait_status(&bus, id, EventStatus::Done).await;
    }
    bus.shutdown().await.unwrap();
}

pub async fn a_small_tenant_is_not_stuck_behind_a_large_tenants_backlog(h: &Harness) {
    let (seen, gate) = (
        Arc::new(Mutex::new(Tenants::default())),
        Arc::new(Semaphore::new(Semaphore::MAX_PERMITS)),
    );
    // On the system clock: an event woken from the line is due when it is woken, after the
    // events published before (a manual clock that stands still would make them due at once).
    let bus = process(h, &seen, &gate, true).await;
    bus.concurrency_limits()
        .set_partitioned(
            "work",
            durabus::concurrency::MAX_IN_FLIGHT,
            None,
            by_tenant(2),
            &ops(),
        )
        .await
        .unwrap();
    // Tenant a's backlog of 10,000, then b's 10.
    for chunk in 0..10 {
        let events = (0..1000).map(|i| of("a", chunk * 1000 + i)).collect();
        bus.enqueue_batch(events).await.unwrap();
    }
    let mut b = Vec::new();
    for i in 0..10 {
        b.push(bus.enqueue_event(of("b", i)).await.unwrap());
    }
    bus.start().await.unwrap();
    let started = std::time::Instant::now();
    for id in b {
        while get(&bus, id).await.status != EventStatus::Done {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "b's events were not done in 120 s"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    {
        let s = seen.lock().unwrap();
        let b_at: Vec<usize> = s
            .finished
            .iter()
            .enumerate()
            .filter(|(_, w)| *w == "b")
            .map(|(i, _)| i)
            .collect();
        // a's runs that finished before b's last.
        let last = b_at.last().copied().unwrap_or(0);
        let a_before = s.finished[..last].iter().filter(|w| *w == "a").count();
        eprintln!("b's 10 events finished after {a_before} of a's (at {b_at:?})");
        assert!(
            a_before < 200,
            "b's 10 events waited for {a_before} of a's backlog"
        );
        assert!(s.most.get("a").is_some_and(|m| *m <= 2), "{:?}", s.most);
    }
    bus.shutdown().await.unwrap();
}

pub async fn bad_partition_limits_are_refused_and_nothing_changes(h: &Harness) {
    let (seen, gate) = (
        Arc::new(Mutex::new(Tenants::default())),
        Arc::new(Semaphore::new(0)),
    );
    let bus = process(h, &seen, &gate, false).await;
    let limits = bus.concurrency_limits();
    limits.set("work", 3, None, &ops()).await.unwrap();
    for each in [0, durabus::concurrency::MAX_IN_FLIGHT + 1] {
        let e = limits
            .set_partitioned("work", 3, None, by_tenant(each), &ops())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{each}: {e}");
    }
    for text in ["tenant", "metadata.", "metadata.a b", ""] {
        let e = text.parse::<PartitionBy>().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{text:?}: {e}");
    }
    let e = limits
        .set_partitioned("nobody", 3, None, by_tenant(1), &ops())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let listed = limits.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!((listed[0].max_in_flight, &listed[0].partition), (3, &None));
    bus.shutdown().await.unwrap();
}

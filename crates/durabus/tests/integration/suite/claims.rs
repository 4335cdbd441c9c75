//! How much a worker claims: within its slots plus the prefetch, including the claim it runs
//! ahead of need while a backlog lasts, and nothing claimed is left behind at shutdown.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use durabus::{Event, EventId, EventStatus, NewEvent, SubscribeOptions};

use crate::support::*;

/// Events of `ids` the store has in each status.
async fn statuses(h: &Harness, ids: &[EventId]) -> HashMap<EventStatus, usize> {
    let store = h.backend.open().await;
    let mut by = HashMap::new();
    for id in ids {
        let e = store.get_event(*id).await.unwrap().unwrap();
        *by.entry(e.status).or_default() += 1;
    }
    store.close().await.unwrap();
    by
}

pub async fn a_worker_holds_no_more_than_its_slots_plus_the_prefetch_while_handlers_block(
    h: &Harness,
) {
    let bus = h
        .builder()
        .await
        .concurrency(2)
        .prefetch(2)
        .shutdown_timeout(Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let started = count_calls_and_hang(&bus, "hold.*").await;
    let batch: Vec<_> = (0..40)
        .map(|i| NewEvent::new("hold.x", &i).unwrap())
        .collect();
    let ids = bus.enqueue_batch(batch).await.unwrap();
    bus.start().await.unwrap();
    eventually("both slots to be busy", || {
        let s = started.clone();
        async move { (s.load(Ordering::SeqCst) == 2).then_some(()) }
    })
    .await;
    // The first claim came back full, the backlog that makes a worker claim ahead; give the
    // loop a moment to do so (it must stay within the bound all the same).
    tokio::time::sleep(Duration::from_millis(10)).await;
    let by = statuses(h, &ids).await;
    let held = by.get(&EventStatus::Processing).copied().unwrap_or(0);
    assert!(
        (2..=4).contains(&held),
        "2 slots + a prefetch of 2: {held} events held ({by:?})"
    );
    assert_eq!(started.load(Ordering::SeqCst), 2, "only the slots run");
    bus.shutdown().await.unwrap();
}

pub async fn a_backlog_shut_down_midway_leaves_nothing_claimed_and_finishes_once(h: &Harness) {
    let handled: Arc<std::sync::Mutex<HashMap<EventId, u32>>> = Arc::default();
    let subscribe = |bus: &durabus::EventBus| {
        let handled = handled.clone();
        let bus = bus.clone();
        async move {
            bus.subscribe(
                "backlog.*",
                move |e: Event| {
                    let handled = handled.clone();
                    async move {
                        *handled.lock().unwrap().entry(e.id).or_default() += 1;
                        Ok(())
                    }
                },
                SubscribeOptions::default(),
            )
            .await
            .unwrap();
        }
    };
    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    subscribe(&bus).await;
    let mut ids = Vec::new();
    for chunk in 0..4 {
        let batch: Vec<_> = (0..500)
            .map(|i| NewEvent::new("backlog.x", &(chunk * 500 + i)).unwrap())
            .collect();
        ids.extend(bus.enqueue_batch(batch).await.unwrap());
    }
    bus.start().await.unwrap();
    eventually("a quarter of the backlog to be handled", || {
        let handled = handled.clone();
        async move { (handled.lock().unwrap().len() >= 500).then_some(()) }
    })
    .await;
    bus.shutdown().await.unwrap();
    let by = statuses(h, &ids).await;
    assert_eq!(
        by.get(&EventStatus::Processing),
        None,
        "queued and claimed-ahead events are released at shutdown: {by:?}"
    );

    let bus = h.builder().await.concurrency(4).build().await.unwrap();
    subscribe(&bus).await;
    bus.start().await.unwrap();
    let all = ids.len();
    eventually("the whole backlog to be handled", || {
        let handled = handled.clone();
        async move { (handled.lock().unwrap().len() == all).then_some(()) }
    })
    .await;
    bus.shutdown().await.unwrap();
    let twice: Vec<_> = handled
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n != 1)
        .map(|(id, n)| (*id, *n))
        .collect();
    assert!(twice.is_empty(), "handled more than once: {twice:?}");
    let by = statuses(h, &ids).await;
    assert_eq!(by.get(&EventStatus::Done), Some(&ids.len()), "{by:?}");
}

pub async fn a_claim_ahead_that_fails_is_reported_to_the_error_hook(h: &Harness) {
    type Heard = Arc<std::sync::Mutex<Vec<(durabus::ErrorSource, durabus::ErrorKind)>>>;
    let heard: Heard = Arc::default();
    let sink = heard.clone();
    // One slot and a prefetch of 1: the first claim takes 2 (full, so a backlog), and the
    // loop may claim ahead only once the second event runs and the queue is empty.
    let bus = h
        .builder()
        .await
        .concurrency(1)
        .prefetch(1)
        .shutdown_timeout(Duration::from_millis(20))
        .on_error(move |e: &durabus::BusError<'_>| {
            sink.lock().unwrap().push((e.source.clone(), e.kind()))
        })
        .build()
        .await
        .unwrap();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (g, s) = (gate.clone(), started.clone());
    bus.subscribe(
        "ahead.*",
        move |_e: Event| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                g.acquire().await.unwrap().forget();
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    let batch: Vec<_> = (0..6)
        .map(|i| NewEvent::new("ahead.x", &i).unwrap())
        .collect();
    bus.enqueue_batch(batch).await.unwrap();
    bus.start().await.unwrap();
    let running = |n: usize| {
        let started = started.clone();
        async move {
            eventually("the next handler to start", || {
                let started = started.clone();
                async move { (started.load(Ordering::SeqCst) == n).then_some(()) }
            })
            .await
        }
    };
    running(1).await;
    // The database goes away; the first handler finishes, the second starts and holds the
    // only slot, so the loop cannot make an ordinary claim: a failed claim is the one ahead.
    bus.store().close().await.unwrap();
    gate.add_permits(1);
    running(2).await;
    eventually("the hook to hear the failed claim ahead", || {
        let heard = heard.clone();
        async move {
            heard
                .lock()
                .unwrap()
                .contains(&(durabus::ErrorSource::Claim, durabus::ErrorKind::Closed))
                .then_some(())
        }
    })
    .await;
    assert_eq!(started.load(Ordering::SeqCst), 2, "the second still runs");
    gate.add_permits(100);
    let _ = bus.shutdown().await;
}

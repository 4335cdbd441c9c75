//! Replay: selections (time range, ids, types, statuses), re-published events carrying
//! `replayOf`, dry runs, the frozen selection, the rate limit on the injected clock, cancel,
//! a kill mid-replay resumed exactly once, handler replays, the started/completed events.

mod running;
mod selection;
pub use running::*;
pub use selection::*;

use std::collections::HashMap;

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use std::time::Duration;

use durabus::replay::{COMPLETED, REPLAY_OF, REPLAY_OPERATION, STARTED};

use durabus::{
    ErrorKind, Event, EventBus, EventId, EventStatus, OperationStatus, ReplayHooks, ReplayRequest,
    ReplaySelection, RunOptions, SubscribeOptions, Timestamp,
};

use super::dead_letters::ann;

use crate::support::*;

/// Every stored event, system ones included, oldest first.
async fn all_events(bus: &EventBus) -> Vec<Event> {
    let store = bus.store();
    let every = ReplaySelection {
        all: true,
        types: vec!["*".into(), "system.*".into()],
        ..ReplaySelection::default()
    };
    let bound = store.walk_bound(bus.clock().now()).await.unwrap();
    store
        .walk(&every, &bound, &Default::default(), 100_000)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

/// The re-published events, by the id of the event they replay.
async fn replays_of(bus: &EventBus) -> HashMap<EventId, Vec<Event>> {
    let mut out: HashMap<EventId, Vec<Event>> = HashMap::new();
    for e in all_events(bus).await {
        if let Some(of) = e.metadata.get(REPLAY_OF) {
            out.entry(of.parse().unwrap()).or_default().push(e);
        }
    }
    out
}

/// Events of `event_type`, oldest first.
async fn of_type(bus: &EventBus, event_type: &str) -> Vec<Event> {
    all_events(bus)
        .await
        .into_iter()
        .filter(|e| e.event_type == event_type)
        .collect()
}

fn options(holder: &str, chunk: usize) -> RunOptions {
    RunOptions {
        chunk: Some(chunk),
        holder: holder.into(),
        ..RunOptions::default()
    }
}

/// A bus whose `order.*` handler records the payloads it sees.
async fn order_bus(h: &Harness) -> (EventBus, Seen) {
    let bus = h.bus().await;
    let seen = Seen::default();
    let s = seen.clone();
    bus.subscribe(
        "order.*",
        move |e: Event| {
            let s = s.clone();
            async move {
                let tag = match e.metadata.get(REPLAY_OF) {
                    Some(_) => format!("replay {}", e.payload),
                    None => format!("live {}", e.payload),
                };
                s.push(tag);
                Ok(())
            }
        },
        SubscribeOptions::default(),
    )
    .await
    .unwrap();
    (bus, seen)
}

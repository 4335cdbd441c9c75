//! The loop that publishes periodic events' ticks: it reads the definitions, publishes each
//! due tick (once per tick across processes: the tick's event id is fixed), records it, and
//! sleeps until the earliest next tick, a registration in this process, a clock jump or at
//! most [`MAX_WAIT`] (so pauses, resumes and registrations in other processes are seen).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tracing::Instrument;

use super::PeriodicRow;
use crate::clock::Timestamp;
use crate::dispatch::Dispatcher;
use crate::error::{ErrorKind, Result};
use crate::hook::ErrorSource;
use crate::shutdown::Shutdown;
use crate::store::InsertMode;

/// The longest the loop sleeps between two readings of the definitions.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(30);
/// How long it waits after failing to read the definitions (the store is down, say).
const ERROR_WAIT: Duration = Duration::from_secs(1);

/// Runs until `shutdown`; `changed` wakes it after a registration in this process.
pub(crate) async fn run(dispatcher: Arc<Dispatcher>, changed: Arc<Notify>, mut shutdown: Shutdown) {
    let clock = dispatcher.clock().clone();
    let mut jumps = clock.jumps();
    loop {
        let wait = match pass(&dispatcher).await {
            Ok(next) => next
                .map_or(MAX_WAIT, |t| clock.now().until(t))
                .min(MAX_WAIT),
            Err(e) if e.kind() == ErrorKind::Closed => return,
            Err(e) => {
                tracing::warn!(error = %e, "could not read the periodic events");
                let source = ErrorSource::Periodic(String::new());
                dispatcher.config().on_error.report(source, &e, true);
                ERROR_WAIT
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.recv() => return,
            _ = changed.notified() => {}
            _ = crate::scheduler::jumped(&mut jumps) => {}
        }
    }
}

/// Publishes every due tick; returns the earliest next tick of a running definition.
async fn pass(d: &Dispatcher) -> Result<Option<Timestamp>> {
    // The time first, then the definitions: a pause made before a tick came due is always
    // seen (read the other way round, a pass could list a definition just before its pause
    // and then find the clock past the tick).
    let now = d.clock().now();
    let rows = d.store().periodic_list().await?;
    let mut next: Option<Timestamp> = None;
    for row in rows {
        let Ok(schedule) = row.parsed() else {
            // Written by a version that knows an expression this one does not: left alone.
            continue;
        };
        let mut cursor = row.cursor;
        if let Some(tick) = row.due(&schedule, now) {
            match publish(d, &row, tick, now).await {
                Ok(()) => cursor = cursor.max(tick),
                Err(e) if e.kind() == ErrorKind::Closed => return Err(e),
                Err(e) => {
                    tracing::warn!(periodic = %row.name, error = %e, "could not publish a periodic event; trying again");
                    let source = ErrorSource::Periodic(row.name.clone());
                    d.config().on_error.report(source, &e, true);
                    next = Some(next.map_or(now, |n| n.min(now)).max(now.plus(ERROR_WAIT)));
                    continue;
                }
            }
        }
        if !row.paused
            && let Some(t) = schedule.next_after(cursor.max(now))
        {
            next = Some(next.map_or(t, |n| n.min(t)));
        }
    }
    Ok(next)
}

/// Publishes `tick` of `row` (stored once, whoever else publishes it) and records it.
async fn publish(d: &Dispatcher, row: &PeriodicRow, tick: Timestamp, now: Timestamp) -> Result<()> {
    let mut event = row.event(tick)?;
    let span = crate::published::Published::span("periodic", std::slice::from_mut(&mut event));
    store_tick(d, row, event, tick, now).instrument(span).await
}

/// [`publish`] inside its span.
async fn store_tick(
    d: &Dispatcher,
    row: &PeriodicRow,
    event: crate::event::NewEvent,
    tick: Timestamp,
    now: Timestamp,
) -> Result<()> {
    let id = event.id;
    let snapshots = d.published().snapshots(std::slice::from_ref(&event), now)?;
    let event_type = event.event_type.clone();
    let stored = d
        .store()
        .insert_with(vec![event], snapshots, InsertMode::Pending, now)
        .await?;
    d.published().count([event_type.as_str()], &stored);
    d.store().periodic_advance(&row.name, tick, id).await?;
    if stored.first().is_some_and(|s| s.is_new()) {
        tracing::info!(periodic = %row.name, tick = %tick, event_id = %id, "published a periodic event");
    }
    Ok(())
}

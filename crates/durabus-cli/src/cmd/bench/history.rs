//! The hot path on a full table: publish, drain (claim and complete a backlog) and end to end on
//! an empty database and on one holding many completed events, or many events scheduled for
//! next month.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::EventBus;

use super::harness::{Bench, Counter, batches, enqueue_concurrently, median};

const LIMIT: Duration = Duration::from_secs(600);

/// Medians of the three figures on one kind of database, events/s.
#[derive(Debug, Default, Clone, Copy)]
pub struct Figures {
    pub publish_eps: f64,
    pub drain_eps: f64,
    pub e2e_eps: f64,
}

/// What fills the full database of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fill {
    /// Events delivered through it: all `done`.
    History,
    /// Events scheduled for 30 days later: all `scheduled`.
    Scheduled,
}

/// Measures [`Figures`] `runs` times on fresh empty databases and `runs` times on one database
/// that first got `rows` events as `fill` says, each run pushing `n` events with `callers`
/// concurrent publishers. Returns (empty, full).
pub async fn compare(
    b: &Bench,
    fill: Fill,
    rows: u64,
    n: u64,
    callers: usize,
    runs: usize,
) -> anyhow::Result<(Figures, Figures)> {
    let big = b.path();
    {
        let bus = b.builder_at(&big).build().await?;
        let counter = Arc::new(Counter::default());
        counter.subscribe(&bus).await?;
        bus.start().await?;
        let later = Duration::from_secs(30 * 86_400);
        for events in batches(0, rows) {
            let events = match fill {
                Fill::History => events?,
                Fill::Scheduled => events?.into_iter().map(|e| e.delay(later)).collect(),
            };
            bus.enqueue_batch(events).await?;
        }
        if fill == Fill::History {
            counter.wait_for(rows, LIMIT).await?;
        }
        bus.shutdown().await?;
    }
    let mut empty = Vec::new();
    let mut full = Vec::new();
    // Warm-up on each, then interleaved runs so drift in the disk's speed hits both alike.
    one_run(b, &b.path(), n, callers).await?;
    one_run(b, &big, n, callers).await?;
    for _ in 0..runs {
        let fresh = b.path();
        empty.push(one_run(b, &fresh, n, callers).await?);
        let _ = std::fs::remove_file(&fresh);
        full.push(one_run(b, &big, n, callers).await?);
    }
    b.cleanup();
    Ok((medians(&empty), medians(&full)))
}

fn medians(v: &[Figures]) -> Figures {
    Figures {
        publish_eps: median(v.iter().map(|f| f.publish_eps).collect()),
        drain_eps: median(v.iter().map(|f| f.drain_eps).collect()),
        e2e_eps: median(v.iter().map(|f| f.e2e_eps).collect()),
    }
}

/// On the database at `path`: `n` events from `callers` concurrent publishers with no worker
/// running (publish), then the bus started on that backlog until all are handled (drain),
/// then `n` more events in batches while the bus runs (end to end).
async fn one_run(b: &Bench, path: &Path, n: u64, callers: usize) -> anyhow::Result<Figures> {
    let bus = Arc::new(b.builder_at(path).build().await?);
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;

    let (published, publish_eps) = enqueue_concurrently(&bus, n, callers).await?;

    let start = Instant::now();
    bus.start().await?;
    counter.wait_for(published, LIMIT).await?;
    let drain_eps = published as f64 / start.elapsed().as_secs_f64();

    let start = Instant::now();
    push(&bus, n).await?;
    counter.wait_for(published + n, LIMIT).await?;
    let e2e_eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(Figures {
        publish_eps,
        drain_eps,
        e2e_eps,
    })
}

async fn push(bus: &EventBus, n: u64) -> anyhow::Result<()> {
    for events in batches(0, n) {
        bus.enqueue_batch(events?).await?;
    }
    Ok(())
}

//! Ordering keys: end to end with every event under one of 1,000 ordering keys, against end
//! to end without keys, in the same run and on the same store, alternating.

use std::sync::Arc;
use std::time::{Duration, Instant};

use durabus::{BusBuilder, NewEvent};
use serde::Serialize;

use super::harness::{Bench, Counter, event, median};

/// The figures of the `ordering` group.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Figures {
    /// Distinct ordering keys of the keyed runs.
    pub ordering_keys: u64,
    /// Events per run.
    pub ordering_events: u64,
    /// End to end without keys, and with every event under one of the keys (medians, ev/s).
    pub unkeyed_e2e_eps: f64,
    pub keyed_e2e_eps: f64,
}

/// Events per second from the first publish until a no-op handler has seen all `n`, on a bus
/// from `builder`, each event under one of `keys` ordering keys (round robin) or none.
pub async fn end_to_end(builder: BusBuilder, n: u64, keys: Option<u64>) -> anyhow::Result<f64> {
    let bus = builder.build().await?;
    let counter = Arc::new(Counter::default());
    counter.subscribe(&bus).await?;
    bus.start().await?;
    let start = Instant::now();
    for from in (0..n).step_by(1000) {
        let events = (from..(from + 1000).min(n))
            .map(|i| -> anyhow::Result<NewEvent> {
                let e = event(i)?;
                Ok(match keys {
                    Some(k) => e.ordering_key(format!("order-{}", i % k)),
                    None => e,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        bus.enqueue_batch(events).await?;
    }
    counter.wait_for(n, Duration::from_secs(600)).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    bus.shutdown().await?;
    Ok(eps)
}

/// Runs the group on fresh SQLite databases: `runs` of each, alternating.
pub async fn run(b: &Bench, n: u64, keys: u64, runs: usize) -> anyhow::Result<Figures> {
    let (mut plain, mut keyed) = (Vec::new(), Vec::new());
    for run in 0..runs {
        b.say(&format!("end to end without keys (run {})", run + 1));
        plain.push(end_to_end(b.builder(), n, None).await?);
        b.say(&format!(
            "end to end with {keys} ordering keys (run {})",
            run + 1
        ));
        keyed.push(end_to_end(b.builder(), n, Some(keys)).await?);
    }
    b.cleanup();
    Ok(Figures {
        ordering_keys: keys,
        ordering_events: n,
        unkeyed_e2e_eps: median(plain),
        keyed_e2e_eps: median(keyed),
    })
}

/// The group on PostgreSQL, through `workers` worker processes: `runs` of each on fresh
/// schemas of `db` (dropped afterwards), alternating. Also the doubles and the lost events.
pub async fn pg_run(
    db: &crate::cmd::Db,
    workers: usize,
    n: u64,
    keys: u64,
    runs: usize,
    say: impl Fn(&str),
) -> anyhow::Result<(Figures, super::pg_workers::EndToEnd)> {
    use super::pg_workers::{drop_schema, fresh};
    let (mut plain, mut keyed) = (Vec::new(), Vec::new());
    let mut checks = super::pg_workers::EndToEnd {
        eps: 0.0,
        doubles: 0,
        lost: 0,
        latencies_us: Vec::new(),
    };
    for run in 0..runs {
        for (with, into) in [(None, &mut plain), (Some(keys), &mut keyed)] {
            say(&format!(
                "end to end with {workers} worker processes, {} (run {})",
                with.map_or("no ordering keys".to_owned(), |k| format!(
                    "{k} ordering keys"
                )),
                run + 1
            ));
            let target = fresh(db);
            let outcome = pg_end_to_end(&target, workers, n, with).await;
            let cleanup = drop_schema(&target).await;
            let e = outcome?;
            cleanup?;
            into.push(e.eps);
            checks.doubles += e.doubles;
            checks.lost += e.lost;
        }
    }
    Ok((
        Figures {
            ordering_keys: keys,
            ordering_events: n,
            unkeyed_e2e_eps: median(plain),
            keyed_e2e_eps: median(keyed),
        },
        checks,
    ))
}

/// One run through the worker processes: `n` events published from this process in batches,
/// under `keys` ordering keys or none, until all are completed.
async fn pg_end_to_end(
    db: &crate::cmd::Db,
    workers: usize,
    n: u64,
    keys: Option<u64>,
) -> anyhow::Result<super::pg_workers::EndToEnd> {
    use super::pg_workers::{publisher_and_workers, tally, wait_completed};
    let (bus, pool, mut procs) = publisher_and_workers(db, workers).await?;
    let start = Instant::now();
    for from in (0..n).step_by(1000) {
        let events = (from..(from + 1000).min(n))
            .map(|i| -> anyhow::Result<NewEvent> {
                let e = event(i)?;
                Ok(match keys {
                    Some(k) => e.ordering_key(format!("order-{}", i % k)),
                    None => e,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        bus.enqueue_batch(events).await?;
    }
    wait_completed(&pool, db, i64::try_from(n)?, Duration::from_secs(600)).await?;
    let eps = n as f64 / start.elapsed().as_secs_f64();
    procs.stop()?;
    bus.shutdown().await?;
    pool.close().await;
    Ok(super::pg_workers::EndToEnd {
        eps,
        ..tally(&procs, n)?
    })
}

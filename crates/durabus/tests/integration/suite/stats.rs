//! The statistics snapshot: computed by the `refresh-stats` job (or by hand), kept in the
//! store, read back unchanged until the next refresh.

use std::time::Duration;

use durabus::{InsertMode, NewEvent, StatsSnapshot};

use crate::support::*;

pub async fn the_stats_snapshot_is_kept_until_the_next_refresh(h: &Harness) {
    let bus = h.bus().await;
    let store = bus.store();
    assert_eq!(
        StatsSnapshot::last(store.as_ref()).await.unwrap(),
        None,
        "a new database has none"
    );
    let now = h.clock.now();
    let evs: Vec<_> = (0..3).map(|i| NewEvent::new("st.a", &i).unwrap()).collect();
    store.insert(evs, InsertMode::Pending, now).await.unwrap();

    // The first reader counts, and keeps what it counted.
    let first = StatsSnapshot::last_or_refresh(store.as_ref(), &h.clock)
        .await
        .unwrap();
    assert_eq!(first.computed_at, now);
    assert_eq!((first.stats.total, first.stats.by_status.pending), (3, 3));
    assert_eq!(
        StatsSnapshot::last(store.as_ref()).await.unwrap(),
        Some(first.clone())
    );

    // New events do not change the snapshot: readers see it as of its time.
    let evs: Vec<_> = (0..2).map(|i| NewEvent::new("st.b", &i).unwrap()).collect();
    store.insert(evs, InsertMode::Pending, now).await.unwrap();
    h.clock.advance(Duration::from_secs(60));
    let kept = StatsSnapshot::last_or_refresh(store.as_ref(), &h.clock)
        .await
        .unwrap();
    assert_eq!(kept, first);

    // The job refreshes it, once across every caller.
    let report = bus
        .scheduler()
        .unwrap()
        .run_now("refresh-stats")
        .await
        .unwrap();
    assert_eq!(report.status, "ok", "{report:?}");
    assert!(report.message.contains("5 event(s)"), "{}", report.message);
    let fresh = StatsSnapshot::last(store.as_ref()).await.unwrap().unwrap();
    assert_eq!(fresh.computed_at, h.clock.now());
    assert_eq!(fresh.stats.total, 5);
    assert_eq!(fresh.stats.by_type["st.b"].pending, 2);
    assert_eq!(
        fresh.stats,
        durabus::StoreStats::collect(store.as_ref()).await.unwrap(),
        "the kept snapshot reads back exactly what was counted"
    );
    bus.shutdown().await.unwrap();
}

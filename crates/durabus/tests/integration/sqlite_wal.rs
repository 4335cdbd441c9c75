//! The SQLite store keeps its WAL bounded even while readers never stop: an idle store past
//! `SqliteOptions::wal_limit` empties it with a `TRUNCATE` checkpoint. (The `RESTART` a busy
//! writer runs from half the limit is tested in `store/sqlite/checkpoint.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use durabus::{
    Error, EventStore, InsertMode, NewEvent, SqliteOptions, SqliteStore, StoreLifecycle, Timestamp,
};
use rusqlite::Connection;

fn wal_len(path: &std::path::Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |m| m.len())
}

/// A thread that reads `path` without pause, one short read transaction after another, as a
/// busy dispatcher and dashboard do, until `stop`; returns how many reads it made.
fn endless_reader(path: &std::path::Path, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let path = path.to_owned();
    std::thread::spawn(move || {
        let conn = Connection::open(&path).unwrap();
        conn.busy_timeout(Duration::from_secs(5)).unwrap();
        let mut reads = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let _: i64 = conn
                .query_row("SELECT count(*) FROM durabus_events", [], |r| r.get(0))
                .unwrap();
            reads += 1;
        }
        reads
    })
}

/// Payload text that does not compress: `n` pseudo-random hex strings of 2 KB.
fn noise(seed: &mut u64, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| {
            (0..1024)
                .map(|_| {
                    *seed ^= *seed << 13;
                    *seed ^= *seed >> 7;
                    *seed ^= *seed << 17;
                    format!("{:x}", *seed & 0xff)
                })
                .collect::<String>()
        })
        .collect()
}

#[tokio::test]
async fn the_wal_is_emptied_past_its_limit_while_readers_never_stop() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let limit: u64 = 1 << 20;
    let store = SqliteStore::open(
        &path,
        SqliteOptions {
            wal_limit: limit,
            ..SqliteOptions::default()
        },
    )
    .await
    .unwrap();

    // Another connection reads without pause: a passive checkpoint never finds the WAL unused.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = endless_reader(&path, stop.clone());

    // About 8 MiB of events, eight times the limit, in payloads that do not compress.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..32 {
        let events = (0..32)
            .map(|_| NewEvent::new("wal.fill", &noise(&mut seed, 4)).unwrap())
            .collect();
        store
            .insert(events, InsertMode::Pending, Timestamp::now())
            .await
            .unwrap();
    }

    // The checkpoint thread looks every 100 ms; give it a few seconds to get the WAL down.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut len = wal_len(&path);
    while len > limit && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        len = wal_len(&path);
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();
    assert!(reads > 0, "the reader must have been reading");
    assert!(
        len <= limit,
        "the WAL is {len} bytes, past its {limit}-byte limit, while a reader kept reading"
    );
    // Nothing was lost on the way.
    let conn = Connection::open(&path).unwrap();
    let n: i64 = conn
        .query_row("SELECT count(*) FROM durabus_events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 32 * 32);
    store.close().await.unwrap();
}

#[tokio::test]
async fn a_wal_limit_below_one_mebibyte_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = SqliteStore::open(
        dir.path().join("t.db"),
        SqliteOptions {
            wal_limit: 1000,
            ..SqliteOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err:?}");
    assert!(err.to_string().contains("wal_limit"), "{err}");
}

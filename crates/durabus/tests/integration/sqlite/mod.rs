//! Behaviour specific to the SQLite store: WAL, files that are not databases, schema versions,
//! and locks held by other processes.

mod files;
mod keys;
mod locks;
mod memory;
mod schema;
mod snapshots;
mod unreadable;

use std::time::{Duration, Instant};

use durabus::store::sqlite::{ListFilter, Sql};

use durabus::{
    Error, EventBus, EventQuery, EventStatus, EventStore, InsertMode, NewEvent, QueryStore,
    SqliteOptions, SqliteStore, Store, StoreLifecycle, Timestamp,
};

use rusqlite::Connection;

fn temp() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    (dir, path)
}

/// Holds the write lock from another connection (another process, as far as SQLite can tell).
fn hold_write_lock(path: &std::path::Path, hold: Duration) -> std::thread::JoinHandle<()> {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    std::thread::spawn(move || {
        std::thread::sleep(hold);
        conn.execute_batch("COMMIT").unwrap();
    })
}

/// Takes the write lock of the database at `path` on another connection and holds it until
/// the returned sender is used (or dropped).
fn hold_write_lock_until_told(
    path: &std::path::Path,
) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let conn = Connection::open(path).unwrap();
    conn.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _ = rx.recv();
        conn.execute_batch("COMMIT").unwrap();
    });
    (tx, holder)
}

fn get_dlq_count(path: &std::path::Path, id: durabus::EventId) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row(
            "SELECT dlq_count FROM durabus_events WHERE id = ?1",
            [id.to_string()],
            |r| r.get(0),
        )
        .unwrap()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

fn file_holds(path: &std::path::Path, needle: &[u8]) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    [path.to_path_buf(), std::path::PathBuf::from(wal)]
        .iter()
        .any(|p| std::fs::read(p).is_ok_and(|bytes| contains(&bytes, needle)))
}

fn fastrand_byte() -> u8 {
    use std::cell::Cell;
    thread_local!(static S: Cell<u64> = const { Cell::new(0x9e37_79b9_7f4a_7c15) });
    S.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        (x >> 24) as u8
    })
}

async fn insert_one(store: &SqliteStore, event_type: &str) -> durabus::EventId {
    let event = NewEvent::new(event_type, &serde_json::json!({"n": 1})).unwrap();
    let id = event.id;
    store
        .insert(vec![event], InsertMode::Pending, Timestamp::now())
        .await
        .unwrap();
    id
}

async fn count(store: &SqliteStore) -> u64 {
    store.counts().await.unwrap().iter().map(|c| c.count).sum()
}

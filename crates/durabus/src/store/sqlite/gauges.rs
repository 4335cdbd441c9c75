//! The metrics' store gauges on SQLite: each an indexed lookup (a partial index, or the
//! failure groups kept as records change), never a scan of the event table.

use rusqlite::Connection;

use super::SqliteStore;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::StoreGauges;

/// The gauge statements, in the order the store runs them (public for the query-plan test).
pub fn statements(p: &str) -> Vec<String> {
    vec![
        format!("SELECT count(*) FROM {p}events WHERE status = 'pending'"),
        format!("SELECT count(*) FROM {p}events WHERE status = 'processing'"),
        format!("SELECT min(next_attempt_at) FROM {p}events WHERE status = 'pending'"),
        // One row per failure group: its open count is kept as records change.
        format!("SELECT coalesce(sum(open), 0) FROM {p}dead_letter_groups"),
        format!("SELECT count(*) FROM {p}dead_letters WHERE status = 'retrying'"),
        format!(
            "SELECT created_at FROM {p}dead_letters WHERE status = 'pending' ORDER BY seq LIMIT 1"
        ),
        // The failure groups again (`?1`: the start of the window of new groups).
        format!("SELECT coalesce(sum(count), 0) FROM {p}dead_letter_groups"),
        format!("SELECT count(*) FROM {p}dead_letter_groups WHERE first_seen >= ?1"),
        // Scheduled events are lane 1 of the waiting table (its partial index).
        format!("SELECT count(*) FROM {p}waiting WHERE lane = 1"),
        format!("SELECT min(due) FROM {p}waiting WHERE lane = 1"),
        // Ordering keys held by a dead letter (a small table of their own).
        format!("SELECT count(*) FROM {p}key_holds"),
        format!("SELECT min(held_since) FROM {p}key_holds"),
        // Dead-letter records by type and status, kept by triggers (a small table).
        format!("SELECT event_type, status, count FROM {p}dead_letter_types WHERE count > 0"),
    ]
}

fn read(conn: &Connection, prefix: &str, now: Timestamp) -> rusqlite::Result<StoreGauges> {
    let s = statements(prefix);
    let count = |i: usize| -> rusqlite::Result<u64> {
        conn.prepare_cached(&s[i])?
            .query_row([], |r| r.get::<_, i64>(0))
            .map(|n| u64::try_from(n).unwrap_or(0))
    };
    let since = now.minus(crate::store::NEW_GROUP_WINDOW).as_millis();
    let failure_groups_new = conn
        .prepare_cached(&s[7])?
        .query_row([since], |r| r.get::<_, i64>(0))
        .map(|n| u64::try_from(n).unwrap_or(0))?;
    let time = |i: usize| -> rusqlite::Result<Option<Timestamp>> {
        let mut stmt = conn.prepare_cached(&s[i])?;
        let mut rows = stmt.query([])?;
        Ok(match rows.next()? {
            Some(r) => r.get::<_, Option<i64>>(0)?.map(Timestamp),
            None => None,
        })
    };
    let open = count(3)?;
    let retrying = count(4)?;
    let dead_letter_types = conn
        .prepare_cached(&s[12])?
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(StoreGauges {
        pending: count(0)?,
        scheduled: count(8)?,
        next_scheduled_at: time(9)?,
        processing: count(1)?,
        oldest_due_at: time(2)?,
        dead_letters_pending: open.saturating_sub(retrying),
        dead_letters_retrying: retrying,
        oldest_pending_dead_letter_at: time(5)?,
        pool: None,
        wal_bytes: None,
        live_workers: None,
        dead_letter_records: count(6)?,
        failure_groups_new,
        held_keys: count(10)?,
        oldest_held_key_at: time(11)?,
        failure_groups: Vec::new(),
        dead_letter_types,
        pauses: Vec::new(),
        breakers: Vec::new(),
        concurrency: Vec::new(),
    })
}

impl SqliteStore {
    /// The gauges, read on a reader connection (the WAL size from the file beside the
    /// database).
    pub(super) async fn read_gauges(&self, now: Timestamp) -> Result<StoreGauges> {
        let prefix = self.sql.prefix.clone();
        // An in-memory database has no WAL: its size is 0.
        let wal = (!self.target.memory).then(|| {
            let mut p = self.path.clone().into_os_string();
            p.push("-wal");
            std::path::PathBuf::from(p)
        });
        self.read(move |c| {
            let mut g = read(c, &prefix, now)?;
            // No file: nothing written since the last checkpoint truncated it.
            g.wal_bytes = Some(wal.map_or(0, |wal| std::fs::metadata(&wal).map_or(0, |m| m.len())));
            Ok(g)
        })
        .await
    }
}

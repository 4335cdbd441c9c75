//! The hot path on SQLite: insert, claim, record, release, recover. Each is a typed write op.

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::outcomes::Record;
use super::row_writes::{insert_with_snapshots, metadata_texts, waiting};
use super::rows::{Undecoded, undecoded_from_row};
use super::set_aside::{self, SetAside};
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{Event, EventId, EventStatus, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::recovery::{Interruption, interrupted};
use crate::store::{EventStore, InsertMode, Outcome, Stored};

struct Insert {
    events: Vec<NewEvent>,
    /// The events' metadata as JSON, written out before the op reaches the writer's thread.
    metadata: Vec<Option<String>>,
    snapshots: Vec<NewSnapshot>,
    mode: InsertMode,
}

impl WriteOp for Insert {
    type Reply = Vec<Stored>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Vec<Stored>> {
        let status = match self.mode {
            InsertMode::Pending => EventStatus::Pending,
            InsertMode::Claimed => EventStatus::Processing,
        };
        let stored = insert_with_snapshots(
            conn,
            sql,
            &self.events,
            &self.metadata,
            &self.snapshots,
            status,
            now,
        )?;
        crate::fail_point!("insert.before_commit");
        Ok(stored)
    }

    fn wakes(&self, stored: &Vec<Stored>) -> bool {
        self.mode == InsertMode::Pending && stored.iter().any(|s| s.is_new())
    }
}

struct Claim(usize);

impl WriteOp for Claim {
    type Reply = Vec<Undecoded>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Vec<Undecoded>> {
        // Scheduled events that are due become pending first; then plain indexed SELECTs, by
        // priority (positive, 0, negative), each earliest due first; then an UPDATE per row by
        // key, all in the same write transaction (so atomic).
        let now_ms = now.as_millis();
        promote(conn, sql, now_ms)?;
        let mut events = Vec::new();
        for select in [&sql.claim_high, &sql.claim_select, &sql.claim_low] {
            let room = self.0.saturating_sub(events.len());
            if room == 0 {
                break;
            }
            let mut stmt = conn.prepare_cached(select)?;
            let rows = stmt.query_map(
                params![now_ms, i64::try_from(room).unwrap_or(i64::MAX)],
                undecoded_from_row,
            )?;
            for row in rows {
                events.push(row?);
            }
        }
        let mut update = conn.prepare_cached(&sql.claim_update)?;
        for e in events.iter_mut().map(Undecoded::event_mut) {
            update.execute(params![e.id.to_string(), now_ms])?;
            if e.priority != 0 {
                // Out of its lane while it runs.
                waiting(conn, &sql.waiting_delete, e.id)?;
            }
            e.status = EventStatus::Processing;
            e.updated_at = now;
        }
        Ok(events)
    }
}

/// Makes the scheduled events that are due at `now_ms` pending (at most a chunk of
/// [`PROMOTE_CHUNK`](crate::store::PROMOTE_CHUNK), earliest due first), keeping their due time:
/// those with a priority move to lane 2 of the waiting table, the others leave it.
fn promote(conn: &Connection, sql: &Sql, now_ms: i64) -> Result<()> {
    let due: Vec<(String, i16, i64)> = conn
        .prepare_cached(&sql.due_scheduled)?
        .query_map(params![now_ms, crate::store::PROMOTE_CHUNK], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    for (id, priority, at) in due {
        conn.prepare_cached(&sql.promote)?.execute([&id])?;
        if priority == 0 {
            conn.prepare_cached(&sql.waiting_delete)?.execute([&id])?;
        } else {
            conn.prepare_cached(&sql.waiting_put)?
                .execute(params![id, 2, priority, at])?;
        }
    }
    Ok(())
}

struct Release(Vec<EventId>);

impl WriteOp for Release {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let mut stmt = conn.prepare_cached(&sql.release)?;
        let mut n = 0u64;
        for id in &self.0 {
            n += stmt.execute(params![id.to_string(), now.as_millis()])? as u64;
            waiting(conn, &sql.waiting_pending, *id)?;
            super::keys::settle(&mut super::prepared::Prepared::new(conn), sql, *id, now)?;
        }
        Ok(n)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

/// Crash recovery; the store's set-aside events, which it makes pending with the rest.
struct Recover(Arc<SetAside>);

impl WriteOp for Recover {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let cost = interrupted(Interruption::ProcessStopped);
        // Those with a priority wait in lane 2 again, due now.
        conn.prepare_cached(&sql.waiting_recovered)?
            .execute([now.as_millis()])?;
        // Events cancelled during their interrupted attempt let their keys move on.
        let cancelled = super::keys::cancelled_by_recovery(conn, sql)?;
        let n = conn.execute(
            &sql.recover,
            params![now.as_millis(), cost.retry_increment, cost.note],
        )?;
        super::keys::settle_all(conn, sql, &cancelled, now)?;
        Ok(n as u64)
    }

    fn committed(&self, _: &mut u64) {
        // An event a completion set aside between the give-back before this recovery and the
        // recovery itself is pending now: it must not be claimed from memory as well.
        drop(self.0.take_all());
        self.0.forget_all();
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

#[async_trait]
impl EventStore for SqliteStore {
    async fn insert_with(
        &self,
        events: Vec<NewEvent>,
        snapshots: Vec<NewSnapshot>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<Stored>> {
        let metadata = metadata_texts(&events)?;
        self.write(
            Insert {
                events,
                metadata,
                snapshots,
                mode,
            },
            now,
        )
        .await
    }

    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>> {
        // The rows' JSON is parsed here, off the writer's thread. A row that does not decode
        // (written by hand, say) is left out and logged: it stays claimed until the next start's
        // recovery, and the others are delivered.
        // The next events of ordering keys, claimed by their predecessors' completions, come
        // first (see `SetAside::take_first`); then due events from the table if room is left;
        // then more set-aside events, if room is still left.
        let mut rows = self.set_aside.take_first(limit, now);
        let room = limit - rows.len();
        if room > 0 {
            let changes = self.set_aside.table_changes();
            match self.write(Claim(room), now).await {
                Ok(claimed) => {
                    self.set_aside.looked(changes, claimed.len() < room, now);
                    rows.extend(claimed);
                }
                Err(e) => {
                    self.set_aside.put_back(rows);
                    return Err(e);
                }
            }
            let room = limit - rows.len();
            rows.extend(self.set_aside.take(room));
        }
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let id = row.id();
            match row.decode() {
                Ok(event) => events.push(event),
                Err(e) => tracing::error!(
                    event_id = %id,
                    error = %e,
                    "a claimed event's row could not be read; it is not delivered and stays claimed until the bus restarts"
                ),
            }
        }
        Ok(events)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.next_due)?
                .query_row([], |r| r.get::<_, Option<i64>>(0))
                .optional()
                .map(|v| v.flatten().map(Timestamp))
        })
        .await
    }

    async fn snoozes(&self, id: EventId, key: &str) -> Result<u32> {
        let sql = self.sql.clone();
        let key = key.to_owned();
        self.read(move |c| {
            c.prepare_cached(&sql.snooze_count)?
                .query_row(params![id.to_string(), key], |r| r.get::<_, u32>(0))
                .optional()
                .map(Option::unwrap_or_default)
        })
        .await
    }

    async fn record_many_with(
        &self,
        outcomes: Vec<Outcome>,
        snapshots: Vec<NewSnapshot>,
        now: Timestamp,
    ) -> Result<Vec<bool>> {
        if outcomes.is_empty() {
            return Ok(Vec::new());
        }
        let recorded = self
            .write(
                Record(
                    outcomes,
                    snapshots,
                    std::sync::atomic::AtomicBool::new(false),
                    self.set_aside.clone(),
                ),
                now,
            )
            .await?;
        Ok(recorded.applied)
    }

    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.set_aside.forget(ids.iter().copied());
        self.write(Release(ids), now).await
    }

    async fn give_back_set_aside(&self, now: Timestamp) -> Result<u64> {
        let rows = self.set_aside.take_all();
        if rows.is_empty() {
            return Ok(0);
        }
        let back = set_aside::GiveBack::of(&rows);
        match self.write(back, now).await {
            Ok(n) => Ok(n),
            Err(e) => {
                self.set_aside.put_back(rows);
                Err(e)
            }
        }
    }

    async fn recover_processing(&self, now: Timestamp) -> Result<u64> {
        // Set-aside events never ran: they go back without an attempt counted (and any set
        // aside after this give-back is dropped from memory when the recovery commits).
        self.give_back_set_aside(now).await?;
        self.write(Recover(self.set_aside.clone()), now).await
    }
}

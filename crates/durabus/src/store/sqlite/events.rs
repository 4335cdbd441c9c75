//! The hot path on SQLite: insert, claim, record, release, recover. Each is a typed write op.

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::row_writes::{insert_with_snapshots, metadata_texts, of_stored, waiting};
use super::rows::{Undecoded, json_list, undecoded_from_row};
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

/// Writes one outcome; a completion that claims the next event of its ordering key pushes the
/// event's row onto `next`.
fn record_one(
    conn: &Connection,
    sql: &Sql,
    outcome: &Outcome,
    now: Timestamp,
    woke: &std::sync::atomic::AtomicBool,
    next: &mut Vec<Undecoded>,
) -> Result<bool> {
    let now_ms = now.as_millis();
    let n = match outcome {
        Outcome::Done { id, delivered } => {
            let (id_text, list) = (id.to_string(), json_list(delivered)?);
            match conn
                .prepare_cached(&sql.record_done)?
                .execute(params![id_text, list, now_ms])?
            {
                0 => {
                    // Not an ordinary event: a revived dead letter resolves its record; an
                    // event with an ordering key lets its key move on.
                    type Other = (bool, Option<String>, Option<String>);
                    let other: Option<Other> = conn
                        .prepare_cached(&sql.record_done_other_read)?
                        .query_row([&id_text], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()?;
                    let Some((dead_letter, key, ahead)) = other else {
                        return Ok(false);
                    };
                    conn.prepare_cached(&sql.record_done_other)?
                        .execute(params![id_text, list, now_ms])?;
                    if dead_letter {
                        super::dead_letter_writes::write_delivered(conn, sql, *id, now)?;
                    }
                    if let Some(key) = key
                        && super::keys::moved_on(
                            conn,
                            sql,
                            &id_text,
                            &key,
                            ahead.as_deref(),
                            now,
                            next,
                        )?
                    {
                        // The next event of its key is claimed or due: the dispatcher must look.
                        woke.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    1
                }
                n => n,
            }
        }
        Outcome::Retry {
            id,
            retry_count,
            errors,
            delivered,
            next_attempt_at,
        } => {
            let n = conn
                .prepare_cached(&sql.record_retry)?
                .execute(params![
                    id.to_string(),
                    retry_count,
                    json_list(errors)?,
                    json_list(delivered)?,
                    now_ms,
                    next_attempt_at.as_millis()
                ])
                .inspect(|_| crate::fail_point!("retry.schedule"))?;
            // Back to pending: with a priority, it waits in lane 2 (cancelled meanwhile, it
            // lets its ordering key move on).
            waiting(conn, &sql.waiting_pending, *id)?;
            super::keys::settle(conn, sql, *id, now)?;
            n
        }
        Outcome::Snooze {
            id,
            delivered,
            next_attempt_at,
            subscriptions,
        } => {
            let id_text = id.to_string();
            let n = conn.prepare_cached(&sql.record_snooze)?.execute(params![
                id_text,
                json_list(delivered)?,
                now_ms,
                next_attempt_at.as_millis()
            ])?;
            if n == 1 {
                waiting(conn, &sql.waiting_pending, *id)?;
                super::keys::settle(conn, sql, *id, now)?;
                let mut up = conn.prepare_cached(&sql.snooze_count_up)?;
                for key in subscriptions {
                    up.execute(params![id_text, key])?;
                }
            }
            n
        }
        Outcome::Dead {
            id,
            retry_count,
            errors,
            delivered,
            death,
        } => {
            let died: Option<(u32, bool, Option<String>)> = conn
                .prepare_cached(&sql.record_dead)?
                .query_row(
                    params![
                        id.to_string(),
                        retry_count,
                        json_list(errors)?,
                        json_list(delivered)?,
                        now_ms
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            // Cancelled during the attempt: no dead letter.
            match &died {
                Some((_, false, key)) => {
                    crate::fail_point!("dlq.move");
                    super::dead_letter_writes::write_death(conn, sql, *id, death, now)?;
                    if let Some(key) = key {
                        super::keys::died(conn, sql, *id, key, death.hold_key, now)?;
                    }
                }
                Some((_, true, Some(_))) => {
                    super::keys::leave(conn, sql, *id, now)?;
                }
                _ => {}
            }
            usize::from(died.is_some())
        }
    };
    Ok(n == 1)
}

/// Outcomes to write, their snapshots, whether writing them made an event of an ordering key
/// due, and where the events their completions claim are set aside.
struct Record(
    Vec<Outcome>,
    Vec<NewSnapshot>,
    std::sync::atomic::AtomicBool,
    Arc<SetAside>,
);

/// What [`Record`] wrote: one flag per outcome, and the events its completions claimed (set
/// aside once the transaction has committed).
struct Recorded {
    applied: Vec<bool>,
    next: Vec<Undecoded>,
}

impl WriteOp for Record {
    type Reply = Recorded;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Recorded> {
        let mut next = Vec::new();
        let applied = self
            .0
            .iter()
            .map(|o| record_one(conn, sql, o, now, &self.2, &mut next))
            .collect::<Result<Vec<bool>>>()?;
        if !self.1.is_empty() {
            let ids = self
                .0
                .iter()
                .zip(&applied)
                .filter(|(_, a)| **a)
                .map(|(o, _)| o.id());
            super::payloads::put(conn, sql, of_stored(&self.1, ids))?;
        }
        Ok(Recorded { applied, next })
    }

    fn committed(&self, reply: &mut Recorded) {
        self.3.put(std::mem::take(&mut reply.next));
    }

    fn wakes(&self, reply: &Recorded) -> bool {
        let applied = &reply.applied;
        // A retry scheduled, or a death that may have announced a new dead letter with a
        // `system.dead_letter` event (a later round of a record announces nothing, and the
        // wake finds nothing new: harmless).
        self.2.load(std::sync::atomic::Ordering::Relaxed)
            || self.0.iter().zip(applied).any(|(o, ok)| {
                *ok && match o {
                    Outcome::Retry { .. } | Outcome::Snooze { .. } => true,
                    Outcome::Dead { death, .. } => death.announcement.is_some(),
                    Outcome::Done { .. } => false,
                }
            })
    }
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
            super::keys::settle(conn, sql, *id, now)?;
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

//! Concurrency limits on SQLite (see [`crate::concurrency`]): slots and the waiting line,
//! changed by the writer one step at a time.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::{ConcurrencyLimit, SlotTake, WAIT_MARK, may_take, to_wake};
use crate::error::Result;
use crate::event::EventId;
use crate::store::ConcurrencyStore;

/// `template` on this store's tables.
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix)
}

/// Slots of `subscription` whose lease has not run out at `now`.
fn live(conn: &Connection, sql: &Sql, subscription: &str, now: Timestamp) -> rusqlite::Result<u64> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT count(*) FROM {p}slots WHERE subscription = ?1 AND expires_at > ?2",
    ))?
    .query_row(params![subscription, now.as_millis()], |r| r.get(0))
}

/// The limits (all, or `only` one) with their slots and waiting lines at `now`.
fn limits(
    conn: &Connection,
    sql: &Sql,
    only: Option<&str>,
    now: Timestamp,
) -> rusqlite::Result<Vec<ConcurrencyLimit>> {
    let rows: Vec<(String, u32, Option<u32>, String, String, i64)> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT subscription, max_in_flight, per_process, set_by, set_by_kind, set_at
             FROM {p}concurrency_limits WHERE ?1 IS NULL OR subscription = ?1 ORDER BY subscription",
        ))?
        .query_map([only], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (subscription, max, per_process, by, kind, at) in rows {
        let waiting: u64 = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT count(*) FROM {p}slot_waiters WHERE subscription = ?1",
            ))?
            .query_row([&subscription], |r| r.get(0))?;
        out.push(ConcurrencyLimit {
            in_flight: live(conn, sql, &subscription, now)?,
            waiting,
            max_in_flight: max,
            per_process,
            set_by: Actor::new(
                by,
                ActorKind::parse(&kind)
                    .ok_or_else(|| corrupt(4, format!("unknown actor kind {kind:?}")))?,
            ),
            set_at: Timestamp(at),
            subscription,
        });
    }
    Ok(out)
}

/// Makes at most `n` events waiting for a slot of `subscription` due at `now`, first come
/// first: those still parked (pending at the waiting mark) leave the line; an entry whose
/// event is no longer waiting (finished, cancelled, gone) is dropped. Returns how many woke.
fn wake(conn: &Connection, sql: &Sql, subscription: &str, n: u64, now: Timestamp) -> Result<u64> {
    if n == 0 {
        return Ok(0);
    }
    let line: Vec<(i64, String, Option<String>, Option<i64>)> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT w.seq, w.event_id, e.status, e.next_attempt_at FROM {p}slot_waiters AS w
             LEFT JOIN {p}events AS e ON e.id = w.event_id
             WHERE w.subscription = ?1 ORDER BY w.seq LIMIT ?2",
        ))?
        .query_map(params![subscription, scan(n)], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut woke = 0;
    for (seq, id, status, due) in line {
        if woke >= n {
            break;
        }
        match (status.as_deref(), due) {
            // Still running its attempt: it parks itself after; leave it in line.
            (Some("processing"), _) => continue,
            (Some("pending"), Some(d)) if d == WAIT_MARK.as_millis() => {
                conn.prepare_cached(&stmt(
                    sql,
                    "UPDATE {p}events SET next_attempt_at = ?2, updated_at = ?2 WHERE id = ?1",
                ))?
                .execute(params![id, now.as_millis()])?;
                conn.prepare_cached(&stmt(
                    sql,
                    "UPDATE {p}waiting SET due = ?2 WHERE event_id = ?1 AND lane = 2",
                ))?
                .execute(params![id, now.as_millis()])?;
                woke += 1;
            }
            // Pending for another reason (a breaker, a retry): it asks again when it comes.
            (Some("pending" | "scheduled"), _) => continue,
            _ => {}
        }
        conn.prepare_cached(&stmt(sql, "DELETE FROM {p}slot_waiters WHERE seq = ?1"))?
            .execute([seq])?;
    }
    Ok(woke)
}

/// How far down the line a wake of `n` looks (entries still running are passed over; the
/// next wake looks again).
fn scan(n: u64) -> i64 {
    i64::try_from(n.saturating_mul(4).saturating_add(16)).unwrap_or(i64::MAX)
}

struct Set {
    subscription: String,
    max: u32,
    per_process: Option<u32>,
    actor: Actor,
}

impl WriteOp for Set {
    type Reply = ConcurrencyLimit;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<ConcurrencyLimit> {
        conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}concurrency_limits
                 (subscription, max_in_flight, per_process, set_by, set_by_kind, set_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (subscription) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                 per_process = excluded.per_process, set_by = excluded.set_by,
                 set_by_kind = excluded.set_by_kind, set_at = excluded.set_at",
        ))?
        .execute(params![
            self.subscription,
            self.max,
            self.per_process,
            self.actor.name,
            self.actor.kind.as_str(),
            now.as_millis()
        ])?;
        let held = live(conn, sql, &self.subscription, now)?;
        wake(conn, sql, &self.subscription, to_wake(held, self.max), now)?;
        limits(conn, sql, Some(&self.subscription), now)?
            .pop()
            .ok_or_else(|| crate::error::Error::NotFound {
                what: format!("the concurrency limit of {:?}", self.subscription),
            })
    }

    fn wakes(&self, _: &ConcurrencyLimit) -> bool {
        true
    }
}

struct Remove(String);

impl WriteOp for Remove {
    type Reply = Option<ConcurrencyLimit>;

    fn apply(
        &self,
        conn: &Connection,
        sql: &Sql,
        now: Timestamp,
    ) -> Result<Option<ConcurrencyLimit>> {
        let gone = limits(conn, sql, Some(&self.0), now)?.pop();
        if gone.is_some() {
            wake(conn, sql, &self.0, u64::MAX, now)?;
        }
        for table in ["concurrency_limits", "slots", "slot_waiters"] {
            conn.prepare_cached(&stmt(
                sql,
                &format!("DELETE FROM {{p}}{table} WHERE subscription = ?1"),
            ))?
            .execute([&self.0])?;
        }
        Ok(gone)
    }

    fn wakes(&self, gone: &Option<ConcurrencyLimit>) -> bool {
        gone.is_some()
    }
}

struct Take {
    subscription: String,
    id: EventId,
    holder: String,
    lease_until: Timestamp,
}

impl WriteOp for Take {
    type Reply = SlotTake;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<SlotTake> {
        let max: Option<u32> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT max_in_flight FROM {p}concurrency_limits WHERE subscription = ?1",
            ))?
            .query_row([&self.subscription], |r| r.get(0))
            .optional()?;
        let Some(max) = max else {
            return Ok(SlotTake::Unlimited);
        };
        let id = self.id.to_string();
        let held = live(conn, sql, &self.subscription, now)?;
        if may_take(held, max) {
            conn.prepare_cached(&stmt(
                sql,
                "INSERT OR REPLACE INTO {p}slots (subscription, event_id, holder, expires_at)
                 VALUES (?1, ?2, ?3, ?4)",
            ))?
            .execute(params![
                self.subscription,
                id,
                self.holder,
                self.lease_until.as_millis()
            ])?;
            conn.prepare_cached(&stmt(
                sql,
                "DELETE FROM {p}slot_waiters WHERE subscription = ?1 AND event_id = ?2",
            ))?
            .execute(params![self.subscription, id])?;
            return Ok(SlotTake::Granted);
        }
        conn.prepare_cached(&stmt(
            sql,
            "INSERT OR IGNORE INTO {p}slot_waiters (subscription, event_id) VALUES (?1, ?2)",
        ))?
        .execute(params![self.subscription, id])?;
        Ok(SlotTake::Wait)
    }
}

struct Release {
    subscription: String,
    id: EventId,
}

impl WriteOp for Release {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}slots WHERE subscription = ?1 AND event_id = ?2",
        ))?
        .execute(params![self.subscription, self.id.to_string()])?;
        let max: Option<u32> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT max_in_flight FROM {p}concurrency_limits WHERE subscription = ?1",
            ))?
            .query_row([&self.subscription], |r| r.get(0))
            .optional()?;
        let Some(max) = max else { return Ok(0) };
        let held = live(conn, sql, &self.subscription, now)?;
        wake(
            conn,
            sql,
            &self.subscription,
            to_wake(held, max).min(1),
            now,
        )
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

struct Sweep;

impl WriteOp for Sweep {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        conn.prepare_cached(&stmt(sql, "DELETE FROM {p}slots WHERE expires_at <= ?1"))?
            .execute([now.as_millis()])?;
        let all: Vec<(String, u32)> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT subscription, max_in_flight FROM {p}concurrency_limits",
            ))?
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut woke = 0;
        for (sub, max) in all {
            let held = live(conn, sql, &sub, now)?;
            woke += wake(conn, sql, &sub, to_wake(held, max), now)?;
        }
        Ok(woke)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

#[async_trait]
impl ConcurrencyStore for SqliteStore {
    async fn concurrency_set(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<ConcurrencyLimit> {
        let op = Set {
            subscription: subscription.to_owned(),
            max: max_in_flight,
            per_process,
            actor: actor.clone(),
        };
        self.write(op, now).await
    }

    async fn concurrency_remove(
        &self,
        subscription: &str,
        now: Timestamp,
    ) -> Result<Option<ConcurrencyLimit>> {
        self.write(Remove(subscription.to_owned()), now).await
    }

    async fn concurrency_list(&self, now: Timestamp) -> Result<Vec<ConcurrencyLimit>> {
        let sql = self.sql.clone();
        self.read(move |c| limits(c, &sql, None, now)).await
    }

    async fn concurrency_take(
        &self,
        subscription: &str,
        id: EventId,
        holder: &str,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<SlotTake> {
        let op = Take {
            subscription: subscription.to_owned(),
            id,
            holder: holder.to_owned(),
            lease_until,
        };
        self.write(op, now).await
    }

    async fn concurrency_release(
        &self,
        subscription: &str,
        id: EventId,
        now: Timestamp,
    ) -> Result<()> {
        let op = Release {
            subscription: subscription.to_owned(),
            id,
        };
        self.write(op, now).await.map(drop)
    }

    async fn concurrency_sweep(&self, now: Timestamp) -> Result<u64> {
        // Most refreshes find no limit: a read answers them without a write.
        let sql = self.sql.clone();
        let any: bool = self
            .read(move |c| {
                c.prepare_cached(&stmt(&sql, "SELECT 1 FROM {p}concurrency_limits LIMIT 1"))?
                    .query_row([], |_| Ok(()))
                    .optional()
                    .map(|r| r.is_some())
            })
            .await?;
        if !any {
            return Ok(0);
        }
        self.write(Sweep, now).await
    }
}

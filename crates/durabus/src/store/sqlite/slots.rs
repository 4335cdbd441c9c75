//! Concurrency limits on SQLite (see [`crate::concurrency`]): slots and the waiting line,
//! changed by the writer one step at a time.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::slot_rows::{carry_out, held, limit_row, limits, line, queued_ahead, stmt, wake_all};
use super::sql::Sql;
use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::concurrency::line::{Reach, Room, StoredLimit, may_take, plan, scan, wake_elsewhere};
use crate::concurrency::{ConcurrencyLimit, PartitionLimit, SlotAsk, SlotTake};
use crate::error::Result;
use crate::event::EventId;
use crate::store::ConcurrencyStore;

struct Set {
    subscription: String,
    max: u32,
    per_process: Option<u32>,
    partition: Option<PartitionLimit>,
    actor: Actor,
}

impl WriteOp for Set {
    type Reply = ConcurrencyLimit;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<ConcurrencyLimit> {
        let split = self.partition.as_ref().map(|p| p.by.to_string());
        let each = self.partition.as_ref().map(|p| p.max_in_flight);
        conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}concurrency_limits
                 (subscription, max_in_flight, per_process, set_by, set_by_kind, set_at,
                  partition_by, per_partition)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT (subscription) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                 per_process = excluded.per_process, set_by = excluded.set_by,
                 set_by_kind = excluded.set_by_kind, set_at = excluded.set_at,
                 partition_by = excluded.partition_by, per_partition = excluded.per_partition",
        ))?
        .execute(params![
            self.subscription,
            self.max,
            self.per_process,
            self.actor.name,
            self.actor.kind.as_str(),
            now.as_millis(),
            split,
            each
        ])?;
        let limit = StoredLimit {
            max: self.max,
            per_partition: each,
            by: self.partition.as_ref().map(|p| p.by.clone()),
        };
        wake_all(conn, sql, &self.subscription, &limit, now)?;
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
            let (waiters, ids) = line(conn, sql, &self.0, Reach::All, i64::MAX)?;
            carry_out(
                conn,
                sql,
                &ids,
                &plan(&waiters, &mut Room::unbounded(), u64::MAX),
                now,
            )?;
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
    ask: SlotAsk,
    holder: String,
    lease_until: Timestamp,
}

impl WriteOp for Take {
    type Reply = SlotTake;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<SlotTake> {
        let Some(limit) = limit_row(conn, sql, &self.subscription)? else {
            return Ok(SlotTake::Unlimited);
        };
        let id = self.ask.id.to_string();
        let part = self.ask.partition(limit.by.as_ref());
        let room = limit.room(held(conn, sql, &self.subscription, now, false)?);
        let ahead = limit.partitioned() && queued_ahead(conn, sql, &self.subscription, &part, &id)?;
        if may_take(&room, &part, ahead) {
            conn.prepare_cached(&stmt(
                sql,
                "INSERT OR REPLACE INTO {p}slots (subscription, event_id, holder, expires_at, part)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            ))?
            .execute(params![
                self.subscription,
                id,
                self.holder,
                self.lease_until.as_millis(),
                part
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
            "INSERT INTO {p}slot_waiters (subscription, event_id, part) VALUES (?1, ?2, ?3)
             ON CONFLICT (subscription, event_id) DO UPDATE SET woken = 0",
        ))?
        .execute(params![self.subscription, id, part])?;
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
        let id = self.id.to_string();
        let part: Option<String> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT part FROM {p}slots WHERE subscription = ?1 AND event_id = ?2",
            ))?
            .query_row(params![self.subscription, id], |r| r.get(0))
            .optional()?;
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}slots WHERE subscription = ?1 AND event_id = ?2",
        ))?
        .execute(params![self.subscription, id])?;
        let Some(limit) = limit_row(conn, sql, &self.subscription)? else {
            return Ok(0);
        };
        let partitioned = limit.partitioned();
        let mut room = limit.room(held(conn, sql, &self.subscription, now, partitioned)?);
        if room.free() == 0 {
            return Ok(0);
        }
        // The first waiting of the slot's own partition; with none that may run and the
        // whole limit full before, the first of a partition with room.
        let part = part.unwrap_or_default();
        let (waiters, ids) = line(
            conn,
            sql,
            &self.subscription,
            Reach::Partition(&part),
            scan(1),
        )?;
        let first = plan(&waiters, &mut room, 1);
        let woke = carry_out(conn, sql, &ids, &first, now)?;
        if !wake_elsewhere(&room, woke) {
            return Ok(woke);
        }
        let (waiters, ids) = line(conn, sql, &self.subscription, Reach::EachPartition, 1)?;
        let other = plan(&waiters, &mut room, 1);
        carry_out(conn, sql, &ids, &other, now)
    }

    fn wakes(&self, n: &u64) -> bool {
        *n > 0
    }
}

struct Parked(Vec<EventId>);

impl WriteOp for Parked {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let mut lines: Vec<(String, String)> = Vec::new();
        for id in &self.0 {
            let found: Vec<(String, String)> = conn
                .prepare_cached(&stmt(
                    sql,
                    "SELECT subscription, part FROM {p}slot_waiters WHERE event_id = ?1",
                ))?
                .query_map([id.to_string()], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            for entry in found {
                if !lines.contains(&entry) {
                    lines.push(entry);
                }
            }
        }
        let mut woke = 0;
        for (sub, part) in lines {
            let Some(limit) = limit_row(conn, sql, &sub)? else {
                continue;
            };
            let partitioned = limit.partitioned();
            let mut room = limit.room(held(conn, sql, &sub, now, partitioned)?);
            if !room.admits(&part) {
                continue;
            }
            let (waiters, ids) = line(
                conn,
                sql,
                &sub,
                Reach::Partition(&part),
                scan(room.free().min(64)),
            )?;
            let plan = plan(&waiters, &mut room, u64::MAX);
            woke += carry_out(conn, sql, &ids, &plan, now)?;
        }
        Ok(woke)
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
        let all: Vec<String> = conn
            .prepare_cached(&stmt(sql, "SELECT subscription FROM {p}concurrency_limits"))?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut woke = 0;
        for sub in all {
            if let Some(limit) = limit_row(conn, sql, &sub)? {
                woke += wake_all(conn, sql, &sub, &limit, now)?;
            }
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
        partition: Option<&PartitionLimit>,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<ConcurrencyLimit> {
        let op = Set {
            subscription: subscription.to_owned(),
            max: max_in_flight,
            per_process,
            partition: partition.cloned(),
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

    async fn concurrency_waiting(&self, subscription: &str, most: u32) -> Result<Vec<String>> {
        let sql = self.sql.clone();
        let sub = subscription.to_owned();
        self.read(move |c| {
            c.prepare_cached(&stmt(
                &sql,
                "SELECT DISTINCT part FROM {p}slot_waiters
                 WHERE subscription = ?1 AND woken = 0 LIMIT ?2",
            ))?
            .query_map(params![sub, most], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()
        })
        .await
    }

    async fn concurrency_take(
        &self,
        subscription: &str,
        ask: &SlotAsk,
        holder: &str,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<SlotTake> {
        let op = Take {
            subscription: subscription.to_owned(),
            ask: ask.clone(),
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

    async fn concurrency_parked(&self, ids: &[EventId], now: Timestamp) -> Result<u64> {
        self.write(Parked(ids.to_vec()), now).await
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

//! Concurrency limits on SQLite (see [`crate::concurrency`]): slots and the waiting line,
//! changed by the writer one step at a time.

use std::collections::HashMap;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::line::{InLine, Plan, Room, Waiter, may_take, plan, scan, wake_elsewhere};
use crate::concurrency::{ConcurrencyLimit, PartitionBy, PartitionLimit, SlotAsk, SlotTake};
use crate::error::Result;
use crate::event::EventId;
use crate::store::ConcurrencyStore;

/// `template` on this store's tables.
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix)
}

/// A limit's row: its limits and what splits its events into partitions.
struct LimitRow {
    max: u32,
    per_partition: Option<u32>,
    by: Option<PartitionBy>,
}

impl LimitRow {
    /// The room under this limit with `held` slots held (see [`held`]).
    fn room(&self, held: (u64, HashMap<String, u64>)) -> Room {
        Room::new(self.max, held.0, self.per_partition, held.1)
    }
}

/// Reads what splits a limit's events (stored as text).
fn partition_by(text: Option<String>, col: usize) -> rusqlite::Result<Option<PartitionBy>> {
    text.map(|t| {
        t.parse()
            .map_err(|e: crate::error::Error| corrupt(col, e.to_string()))
    })
    .transpose()
}

/// The limit of `subscription`, if it has one.
fn limit_row(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
) -> rusqlite::Result<Option<LimitRow>> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT max_in_flight, per_partition, partition_by
         FROM {p}concurrency_limits WHERE subscription = ?1",
    ))?
    .query_row([subscription], |r| {
        Ok(LimitRow {
            max: r.get(0)?,
            per_partition: r.get(1)?,
            by: partition_by(r.get(2)?, 2)?,
        })
    })
    .optional()
}

/// Slots of `subscription` whose lease has not run out at `now`: in all, and by partition;
/// with `woken`, the entries woken from its line and not yet in a slot count too.
fn held(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
    now: Timestamp,
    woken: bool,
) -> rusqlite::Result<(u64, HashMap<String, u64>)> {
    let by_part: HashMap<String, u64> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT part, count(*) FROM (
                 SELECT part FROM {p}slots WHERE subscription = ?1 AND expires_at > ?2
                 UNION ALL
                 SELECT part FROM {p}slot_waiters WHERE subscription = ?1 AND woken = 1 AND ?3)
             GROUP BY part",
        ))?
        .query_map(params![subscription, now.as_millis(), woken], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok((by_part.values().sum(), by_part))
}

/// The limits (all, or `only` one) with their slots and waiting lines at `now`.
fn limits(
    conn: &Connection,
    sql: &Sql,
    only: Option<&str>,
    now: Timestamp,
) -> rusqlite::Result<Vec<ConcurrencyLimit>> {
    type Row = (
        String,
        u32,
        Option<u32>,
        String,
        String,
        i64,
        Option<u32>,
        Option<String>,
    );
    let rows: Vec<Row> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT subscription, max_in_flight, per_process, set_by, set_by_kind, set_at,
                 per_partition, partition_by
             FROM {p}concurrency_limits WHERE ?1 IS NULL OR subscription = ?1 ORDER BY subscription",
        ))?
        .query_map([only], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for (subscription, max, per_process, by, kind, at, per_partition, split) in rows {
        let waiting: u64 = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT count(*) FROM {p}slot_waiters WHERE subscription = ?1",
            ))?
            .query_row([&subscription], |r| r.get(0))?;
        let partition = match (partition_by(split, 7)?, per_partition) {
            (Some(by), Some(max)) => Some(PartitionLimit::new(by, max)),
            _ => None,
        };
        out.push(ConcurrencyLimit {
            in_flight: held(conn, sql, &subscription, now, false)?.0,
            waiting,
            max_in_flight: max,
            per_process,
            partition,
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

/// Whether an event of `part` waits in `subscription`'s line, not yet woken, ahead of event
/// `id` (ahead of every entry when `id` has none).
fn queued_ahead(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
    part: &str,
    id: &str,
) -> rusqlite::Result<bool> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT 1 FROM {p}slot_waiters
         WHERE subscription = ?1 AND part = ?2 AND woken = 0
           AND seq < coalesce((SELECT seq FROM {p}slot_waiters
                               WHERE subscription = ?1 AND event_id = ?3), 9223372036854775807)
         LIMIT 1",
    ))?
    .query_row(params![subscription, part, id], |_| Ok(()))
    .optional()
    .map(|r| r.is_some())
}

/// Which part of `subscription`'s line a wake reads.
enum Reach<'a> {
    /// The first entries of one partition.
    Partition(&'a str),
    /// The first entries of each partition.
    EachPartition,
    /// The first entries of the whole line.
    All,
}

/// Reads at most `rows` entries of `subscription`'s line (of each partition, for
/// [`Reach::EachPartition`]), in line order, with the standing of their events.
fn line(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
    reach: Reach<'_>,
    rows: i64,
) -> rusqlite::Result<(Vec<Waiter>, Vec<String>)> {
    let (template, part) = match reach {
        Reach::Partition(part) => (
            "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
             FROM {p}slot_waiters AS w LEFT JOIN {p}events AS e ON e.id = w.event_id
             WHERE w.subscription = ?1 AND w.part = ?3 ORDER BY w.seq LIMIT ?2",
            Some(part),
        ),
        Reach::EachPartition => (
            "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
             FROM (SELECT seq, part, event_id, woken,
                       row_number() OVER (PARTITION BY part ORDER BY seq) AS n
                   FROM {p}slot_waiters WHERE subscription = ?1) AS w
             LEFT JOIN {p}events AS e ON e.id = w.event_id
             WHERE w.n <= ?2 AND ?3 IS NULL ORDER BY w.seq",
            None,
        ),
        Reach::All => (
            "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
             FROM {p}slot_waiters AS w LEFT JOIN {p}events AS e ON e.id = w.event_id
             WHERE w.subscription = ?1 AND ?3 IS NULL ORDER BY w.seq LIMIT ?2",
            None,
        ),
    };
    conn.prepare_cached(&stmt(sql, template))?
        .query_map(params![subscription, rows, part], |r| {
            let status: Option<String> = r.get(3)?;
            Ok((
                Waiter {
                    seq: r.get(0)?,
                    partition: r.get(1)?,
                    state: InLine::of(status.as_deref(), r.get(4)?),
                    woken: r.get(5)?,
                },
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()
        .map(|rows| rows.into_iter().unzip())
}

/// Carries out `plan` on the line of events `ids`: the woken events are due at `now`, and the
/// dropped entries leave the line. Returns how many woke.
fn carry_out(
    conn: &Connection,
    sql: &Sql,
    ids: &[String],
    plan: &Plan,
    now: Timestamp,
) -> Result<u64> {
    for &i in &plan.wake {
        let id = &ids[i];
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
    }
    for seq in &plan.drop {
        conn.prepare_cached(&stmt(sql, "DELETE FROM {p}slot_waiters WHERE seq = ?1"))?
            .execute([seq])?;
    }
    for seq in &plan.woken {
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}slot_waiters SET woken = 1 WHERE seq = ?1",
        ))?
        .execute([seq])?;
    }
    Ok(plan.wake.len() as u64)
}

/// Wakes as many events waiting for a slot of `subscription` (limited by `limit`) as it has
/// room for at `now`, first come first within each partition. Returns how many woke.
fn wake_all(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
    limit: &LimitRow,
    now: Timestamp,
) -> Result<u64> {
    let partitioned = limit.per_partition.is_some();
    let mut room = limit.room(held(conn, sql, subscription, now, partitioned)?);
    if room.free() == 0 {
        return Ok(0);
    }
    let (waiters, ids) = match limit.per_partition {
        Some(each) => line(
            conn,
            sql,
            subscription,
            Reach::EachPartition,
            scan(u64::from(each)),
        )?,
        None => line(conn, sql, subscription, Reach::All, scan(room.free()))?,
    };
    let plan = plan(&waiters, &mut room, u64::MAX);
    carry_out(conn, sql, &ids, &plan, now)
}

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
        let limit = LimitRow {
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
        let ahead = limit.per_partition.is_some()
            && queued_ahead(conn, sql, &self.subscription, &part, &id)?;
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
        let partitioned = limit.per_partition.is_some();
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
            let partitioned = limit.per_partition.is_some();
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

//! The rows of concurrency limits on SQLite (see [`crate::concurrency`]): a limit as the
//! writer reads it, the slots held, the waiting line read and changed as a
//! [`Plan`](crate::concurrency::line::Plan) says.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::line::{InLine, Plan, Reach, StoredLimit, Waiter, plan, scan};
use crate::concurrency::{ConcurrencyLimit, PartitionBy, PartitionLimit};
use crate::error::Result;

/// `template` on this store's tables.
pub(super) fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix)
}

/// Reads what splits a limit's events (stored as text).
pub(super) fn partition_by(
    text: Option<String>,
    col: usize,
) -> rusqlite::Result<Option<PartitionBy>> {
    text.map(|t| {
        t.parse()
            .map_err(|e: crate::error::Error| corrupt(col, e.to_string()))
    })
    .transpose()
}

/// The limit of `subscription`, if it has one.
pub(super) fn limit_row(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
) -> rusqlite::Result<Option<StoredLimit>> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT max_in_flight, per_partition, partition_by
         FROM {p}concurrency_limits WHERE subscription = ?1",
    ))?
    .query_row([subscription], |r| {
        Ok(StoredLimit {
            max: r.get(0)?,
            per_partition: r.get(1)?,
            by: partition_by(r.get(2)?, 2)?,
        })
    })
    .optional()
}

/// Slots of `subscription` whose lease has not run out at `now`: in all, and by partition;
/// with `woken`, the entries woken from its line and not yet in a slot count too.
pub(super) fn held(
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
pub(super) fn limits(
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
pub(super) fn queued_ahead(
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

/// Reads at most `rows` entries of `subscription`'s line (of each partition, for
/// [`Reach::EachPartition`]), in line order, with the standing of their events.
pub(super) fn line(
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
pub(super) fn carry_out(
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
pub(super) fn wake_all(
    conn: &Connection,
    sql: &Sql,
    subscription: &str,
    limit: &StoredLimit,
    now: Timestamp,
) -> Result<u64> {
    let partitioned = limit.partitioned();
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

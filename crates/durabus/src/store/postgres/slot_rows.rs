//! The rows of concurrency limits on PostgreSQL (see [`crate::concurrency`]): a limit read
//! with its row locked, the slots held, the waiting line read and changed as a
//! [`Plan`](crate::concurrency::line::Plan) says.

use std::collections::HashMap;

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{PgStore, q};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::line::{InLine, Plan, Reach, StoredLimit, Waiter, plan, scan};
use crate::concurrency::{ConcurrencyLimit, PartitionBy, PartitionLimit};
use crate::error::{Error, Result};
use crate::event::EventId;

impl PgStore {
    /// `template` on this store's schema (`{s}`).
    pub(super) fn slot_sql(&self, template: &str) -> String {
        template.replace("{s}", &self.sql.schema)
    }

    /// The limit of `subscription`, its row locked, if it has one.
    pub(super) async fn slot_limit_locked(
        &self,
        c: &mut PgConnection,
        subscription: &str,
    ) -> Result<Option<StoredLimit>> {
        q(&self.slot_sql(
            "SELECT max_in_flight, per_partition, partition_by
             FROM {s}.concurrency_limits WHERE subscription = $1 FOR UPDATE",
        ))
        .bind(subscription)
        .fetch_optional(&mut *c)
        .await?
        .map(|r| {
            Ok(StoredLimit {
                max: count32(r.try_get("max_in_flight")?),
                per_partition: r.try_get::<Option<i32>, _>("per_partition")?.map(count32),
                by: split(r.try_get("partition_by")?)?,
            })
        })
        .transpose()
    }

    /// Slots of `subscription` whose lease has not run out at `now`: in all, and by
    /// partition; with `woken`, the entries woken from its line and not yet in a slot count
    /// too.
    pub(super) async fn slots_held(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        now: Timestamp,
        woken: bool,
    ) -> Result<(u64, HashMap<String, u64>)> {
        let rows = q(&self.slot_sql(
            "SELECT part, count(*) AS n FROM (
                 SELECT part FROM {s}.slots WHERE subscription = $1 AND expires_at > $2
                 UNION ALL
                 SELECT part FROM {s}.slot_waiters WHERE subscription = $1 AND woken AND $3) AS h
             GROUP BY part",
        ))
        .bind(subscription)
        .bind(now.as_millis())
        .bind(woken)
        .fetch_all(&mut *c)
        .await?;
        let by_part = rows
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<String, _>("part")?,
                    u64::try_from(r.try_get::<i64, _>("n")?).unwrap_or(0),
                ))
            })
            .collect::<Result<HashMap<_, _>>>()?;
        Ok((by_part.values().sum(), by_part))
    }

    /// The limits (all, or `only` one) with their slots and lines at `now`.
    pub(super) async fn slot_limits(
        &self,
        c: &mut PgConnection,
        only: Option<&str>,
        now: Timestamp,
    ) -> Result<Vec<ConcurrencyLimit>> {
        let rows = q(&self.slot_sql(
            "SELECT l.subscription, l.max_in_flight, l.per_process, l.set_by, l.set_by_kind, l.set_at,
                 l.per_partition, l.partition_by,
                 (SELECT count(*) FROM {s}.slots AS s
                  WHERE s.subscription = l.subscription AND s.expires_at > $2) AS in_flight,
                 (SELECT count(*) FROM {s}.slot_waiters AS w
                  WHERE w.subscription = l.subscription) AS waiting
             FROM {s}.concurrency_limits AS l
             WHERE $1::text IS NULL OR l.subscription = $1 ORDER BY l.subscription",
        ))
        .bind(only)
        .bind(now.as_millis())
        .fetch_all(&mut *c)
        .await?;
        rows.iter()
            .map(|r| {
                let kind: String = r.try_get("set_by_kind")?;
                let partition = match (
                    split(r.try_get("partition_by")?)?,
                    r.try_get::<Option<i32>, _>("per_partition")?,
                ) {
                    (Some(by), Some(each)) => Some(PartitionLimit::new(by, count32(each))),
                    _ => None,
                };
                Ok(ConcurrencyLimit {
                    subscription: r.try_get("subscription")?,
                    max_in_flight: count32(r.try_get("max_in_flight")?),
                    per_process: r.try_get::<Option<i32>, _>("per_process")?.map(count32),
                    partition,
                    in_flight: u64::try_from(r.try_get::<i64, _>("in_flight")?).unwrap_or(0),
                    waiting: u64::try_from(r.try_get::<i64, _>("waiting")?).unwrap_or(0),
                    set_by: Actor::new(
                        r.try_get::<String, _>("set_by")?,
                        ActorKind::parse(&kind).ok_or_else(|| {
                            Error::Internal(format!("unknown actor kind {kind:?}"))
                        })?,
                    ),
                    set_at: Timestamp(r.try_get("set_at")?),
                })
            })
            .collect()
    }

    /// Whether an event of `part` waits in `subscription`'s line, not yet woken, ahead of
    /// event `id` (ahead of every entry when `id` has none).
    pub(super) async fn slot_queued_ahead(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        part: &str,
        id: EventId,
    ) -> Result<bool> {
        Ok(q(&self.slot_sql(
            "SELECT 1 FROM {s}.slot_waiters
             WHERE subscription = $1 AND part = $2 AND NOT woken
               AND seq < coalesce((SELECT seq FROM {s}.slot_waiters
                                   WHERE subscription = $1 AND event_id = $3),
                                  9223372036854775807)
             LIMIT 1",
        ))
        .bind(subscription)
        .bind(part)
        .bind(id.0)
        .fetch_optional(&mut *c)
        .await?
        .is_some())
    }

    /// Reads at most `rows` entries of `subscription`'s line (of each partition, for
    /// [`Reach::EachPartition`]), in line order, with the standing of their events.
    pub(super) async fn slot_line(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        reach: Reach<'_>,
        rows: i64,
    ) -> Result<(Vec<Waiter>, Vec<Uuid>)> {
        let (template, part) = match reach {
            Reach::Partition(part) => (
                "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
                 FROM {s}.slot_waiters AS w LEFT JOIN {s}.events AS e ON e.id = w.event_id
                 WHERE w.subscription = $1 AND w.part = $3 ORDER BY w.seq LIMIT $2",
                Some(part),
            ),
            Reach::EachPartition => (
                "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
                 FROM (SELECT seq, part, event_id, woken,
                           row_number() OVER (PARTITION BY part ORDER BY seq) AS n
                       FROM {s}.slot_waiters WHERE subscription = $1) AS w
                 LEFT JOIN {s}.events AS e ON e.id = w.event_id
                 WHERE w.n <= $2 AND $3::text IS NULL ORDER BY w.seq",
                None,
            ),
            Reach::All => (
                "SELECT w.seq, w.part, w.event_id, e.status, e.next_attempt_at, w.woken
                 FROM {s}.slot_waiters AS w LEFT JOIN {s}.events AS e ON e.id = w.event_id
                 WHERE w.subscription = $1 AND $3::text IS NULL ORDER BY w.seq LIMIT $2",
                None,
            ),
        };
        let found = q(&self.slot_sql(template))
            .bind(subscription)
            .bind(rows)
            .bind(part)
            .fetch_all(&mut *c)
            .await?;
        found
            .iter()
            .map(|r| {
                let status: Option<String> = r.try_get("status")?;
                Ok((
                    Waiter {
                        seq: r.try_get("seq")?,
                        partition: r.try_get("part")?,
                        state: InLine::of(status.as_deref(), r.try_get("next_attempt_at")?),
                        woken: r.try_get("woken")?,
                    },
                    r.try_get::<Uuid, _>("event_id")?,
                ))
            })
            .collect::<Result<Vec<_>>>()
            .map(|rows| rows.into_iter().unzip())
    }

    /// Carries out `plan` on the line of events `ids`: the woken events are due at `now`, the
    /// dropped entries leave the line, and the workers hear of it. Returns how many woke.
    pub(super) async fn slot_carry_out(
        &self,
        c: &mut PgConnection,
        ids: &[Uuid],
        plan: &Plan,
        now: Timestamp,
    ) -> Result<u64> {
        let woken: Vec<Uuid> = plan.wake.iter().map(|&i| ids[i]).collect();
        if !woken.is_empty() {
            q(&self.slot_sql(
                "UPDATE {s}.events SET next_attempt_at = $2, updated_at = $2 WHERE id = ANY($1)",
            ))
            .bind(&woken)
            .bind(now.as_millis())
            .execute(&mut *c)
            .await?;
        }
        if !plan.drop.is_empty() {
            q(&self.slot_sql("DELETE FROM {s}.slot_waiters WHERE seq = ANY($1)"))
                .bind(&plan.drop)
                .execute(&mut *c)
                .await?;
        }
        if !plan.woken.is_empty() {
            q(&self.slot_sql("UPDATE {s}.slot_waiters SET woken = true WHERE seq = ANY($1)"))
                .bind(&plan.woken)
                .execute(&mut *c)
                .await?;
        }
        if !woken.is_empty() {
            q("SELECT pg_notify($1, '')")
                .bind(&self.channel)
                .execute(&mut *c)
                .await?;
        }
        Ok(woken.len() as u64)
    }

    /// Wakes as many events waiting for a slot of `subscription` (limited by `limit`) as it
    /// has room for at `now`, first come first within each partition. Returns how many woke.
    pub(super) async fn slot_wake_all(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        limit: &StoredLimit,
        now: Timestamp,
    ) -> Result<u64> {
        let partitioned = limit.partitioned();
        let mut room = limit.room(self.slots_held(c, subscription, now, partitioned).await?);
        if room.free() == 0 {
            return Ok(0);
        }
        let (waiters, ids) = match limit.per_partition {
            Some(each) => {
                self.slot_line(c, subscription, Reach::EachPartition, scan(u64::from(each)))
                    .await?
            }
            None => {
                self.slot_line(c, subscription, Reach::All, scan(room.free()))
                    .await?
            }
        };
        let plan = plan(&waiters, &mut room, u64::MAX);
        self.slot_carry_out(c, &ids, &plan, now).await
    }
}

/// A stored count (never negative).
fn count32(n: i32) -> u32 {
    u32::try_from(n).unwrap_or(0)
}

/// Reads what splits a limit's events (stored as text).
fn split(text: Option<String>) -> Result<Option<PartitionBy>> {
    text.map(|t| {
        t.parse()
            .map_err(|e: Error| Error::corrupt("a concurrency limit's partition_by", e))
    })
    .transpose()
}

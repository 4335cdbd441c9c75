//! Concurrency limits on PostgreSQL (see [`crate::concurrency`]): every step on a
//! subscription's slots and line runs with its limit's row locked, so processes taking and
//! giving back slots of one subscription at once do it one after another.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{PgStore, q, tx};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::line::{InLine, Plan, Room, Waiter, may_take, plan, scan, wake_elsewhere};
use crate::concurrency::{ConcurrencyLimit, PartitionBy, PartitionLimit, SlotAsk, SlotTake};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::ConcurrencyStore;

impl PgStore {
    /// `template` on this store's schema (`{s}`).
    fn slot_sql(&self, template: &str) -> String {
        template.replace("{s}", &self.sql.schema)
    }

    /// The limit of `subscription`, its row locked, if it has one.
    async fn slot_limit_locked(
        &self,
        c: &mut PgConnection,
        subscription: &str,
    ) -> Result<Option<LimitRow>> {
        q(&self.slot_sql(
            "SELECT max_in_flight, per_partition, partition_by
             FROM {s}.concurrency_limits WHERE subscription = $1 FOR UPDATE",
        ))
        .bind(subscription)
        .fetch_optional(&mut *c)
        .await?
        .map(|r| {
            Ok(LimitRow {
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
    async fn slots_held(
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
    async fn slot_limits(
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
    async fn slot_queued_ahead(
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
    async fn slot_line(
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
    async fn slot_carry_out(
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
    async fn slot_wake_all(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        limit: &LimitRow,
        now: Timestamp,
    ) -> Result<u64> {
        let partitioned = limit.per_partition.is_some();
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

/// A limit's row: its limits and what splits its events into partitions.
struct LimitRow {
    max: u32,
    per_partition: Option<u32>,
    by: Option<PartitionBy>,
}

impl LimitRow {
    /// The room under this limit with `held` slots held.
    fn room(&self, held: (u64, HashMap<String, u64>)) -> Room {
        Room::new(self.max, held.0, self.per_partition, held.1)
    }
}

/// Which part of a subscription's line a wake reads.
enum Reach<'a> {
    /// The first entries of one partition.
    Partition(&'a str),
    /// The first entries of each partition.
    EachPartition,
    /// The first entries of the whole line.
    All,
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

#[async_trait]
impl ConcurrencyStore for PgStore {
    async fn concurrency_set(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        partition: Option<&PartitionLimit>,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<ConcurrencyLimit> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let stored = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            q(&self.slot_sql(
                "INSERT INTO {s}.concurrency_limits
                     (subscription, max_in_flight, per_process, set_by, set_by_kind, set_at,
                      partition_by, per_partition)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
                 ON CONFLICT (subscription) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                     per_process = excluded.per_process, set_by = excluded.set_by,
                     set_by_kind = excluded.set_by_kind, set_at = excluded.set_at,
                     partition_by = excluded.partition_by, per_partition = excluded.per_partition",
            ))
            .bind(subscription)
            .bind(stored(max_in_flight))
            .bind(per_process.map(stored))
            .bind(&actor.name)
            .bind(actor.kind.as_str())
            .bind(now.as_millis())
            .bind(partition.map(|p| p.by.to_string()))
            .bind(partition.map(|p| stored(p.max_in_flight)))
            .execute(&mut *tx)
            .await?;
            if let Some(limit) = self.slot_limit_locked(&mut tx, subscription).await? {
                self.slot_wake_all(&mut tx, subscription, &limit, now)
                    .await?;
            }
            let limit = self
                .slot_limits(&mut tx, Some(subscription), now)
                .await?
                .pop()
                .ok_or_else(|| Error::NotFound {
                    what: format!("the concurrency limit of {subscription:?}"),
                })?;
            tx.commit().await?;
            Ok(limit)
        })
        .await
    }

    async fn concurrency_remove(
        &self,
        subscription: &str,
        now: Timestamp,
    ) -> Result<Option<ConcurrencyLimit>> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            if self
                .slot_limit_locked(&mut tx, subscription)
                .await?
                .is_none()
            {
                return Ok(None);
            }
            let gone = self
                .slot_limits(&mut tx, Some(subscription), now)
                .await?
                .pop();
            let (waiters, ids) = self
                .slot_line(&mut tx, subscription, Reach::All, i64::MAX)
                .await?;
            let all = plan(&waiters, &mut Room::unbounded(), u64::MAX);
            self.slot_carry_out(&mut tx, &ids, &all, now).await?;
            for table in ["concurrency_limits", "slots", "slot_waiters"] {
                q(&self.slot_sql(&format!(
                    "DELETE FROM {{s}}.{table} WHERE subscription = $1"
                )))
                .bind(subscription)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(gone)
        })
        .await
    }

    async fn concurrency_list(&self, now: Timestamp) -> Result<Vec<ConcurrencyLimit>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            self.slot_limits(&mut conn, None, now).await
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
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let Some(limit) = self.slot_limit_locked(&mut tx, subscription).await? else {
                return Ok(SlotTake::Unlimited);
            };
            let part = ask.partition(limit.by.as_ref());
            let room = limit.room(self.slots_held(&mut tx, subscription, now, false).await?);
            let ahead = limit.per_partition.is_some()
                && self
                    .slot_queued_ahead(&mut tx, subscription, &part, ask.id)
                    .await?;
            let took = if may_take(&room, &part, ahead) {
                q(&self.slot_sql(
                    "INSERT INTO {s}.slots (subscription, event_id, holder, expires_at, part)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (subscription, event_id) DO UPDATE
                         SET holder = excluded.holder, expires_at = excluded.expires_at,
                             part = excluded.part",
                ))
                .bind(subscription)
                .bind(ask.id.0)
                .bind(holder)
                .bind(lease_until.as_millis())
                .bind(&part)
                .execute(&mut *tx)
                .await?;
                q(&self.slot_sql(
                    "DELETE FROM {s}.slot_waiters WHERE subscription = $1 AND event_id = $2",
                ))
                .bind(subscription)
                .bind(ask.id.0)
                .execute(&mut *tx)
                .await?;
                SlotTake::Granted
            } else {
                q(&self.slot_sql(
                    "INSERT INTO {s}.slot_waiters (subscription, event_id, part) VALUES ($1, $2, $3)
                     ON CONFLICT (subscription, event_id) DO UPDATE SET woken = false",
                ))
                .bind(subscription)
                .bind(ask.id.0)
                .bind(&part)
                .execute(&mut *tx)
                .await?;
                SlotTake::Wait
            };
            tx.commit().await?;
            Ok(took)
        })
        .await
    }

    async fn concurrency_release(
        &self,
        subscription: &str,
        id: EventId,
        now: Timestamp,
    ) -> Result<()> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let limit = self.slot_limit_locked(&mut tx, subscription).await?;
            let part: Option<String> = q(&self.slot_sql(
                "DELETE FROM {s}.slots WHERE subscription = $1 AND event_id = $2 RETURNING part",
            ))
            .bind(subscription)
            .bind(id.0)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
            if let Some(limit) = limit {
                let partitioned = limit.per_partition.is_some();
                let mut room = limit.room(
                    self.slots_held(&mut tx, subscription, now, partitioned)
                        .await?,
                );
                // The first waiting of the slot's own partition; with none that may run and
                // the whole limit full before, the first of a partition with room.
                let part = part.unwrap_or_default();
                let (waiters, ids) = self
                    .slot_line(&mut tx, subscription, Reach::Partition(&part), scan(1))
                    .await?;
                let first = plan(&waiters, &mut room, 1);
                let woke = self.slot_carry_out(&mut tx, &ids, &first, now).await?;
                if wake_elsewhere(&room, woke) {
                    let (waiters, ids) = self
                        .slot_line(&mut tx, subscription, Reach::EachPartition, 1)
                        .await?;
                    let other = plan(&waiters, &mut room, 1);
                    self.slot_carry_out(&mut tx, &ids, &other, now).await?;
                }
            }
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn concurrency_parked(&self, ids: &[EventId], now: Timestamp) -> Result<u64> {
        self.noted(async {
            self.check()?;
            let raw: Vec<Uuid> = ids.iter().map(|id| id.0).collect();
            let mut conn = self.pool.acquire().await?;
            let lines: Vec<(String, String)> = q(&self.slot_sql(
                "SELECT DISTINCT subscription, part FROM {s}.slot_waiters
                 WHERE event_id = ANY($1) ORDER BY subscription, part",
            ))
            .bind(&raw)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_>>()?;
            drop(conn);
            let mut woke = 0;
            for (sub, part) in lines {
                let mut tx = tx::begin(&self.pool).await?;
                let Some(limit) = self.slot_limit_locked(&mut tx, &sub).await? else {
                    continue;
                };
                let partitioned = limit.per_partition.is_some();
                let mut room = limit.room(self.slots_held(&mut tx, &sub, now, partitioned).await?);
                if room.admits(&part) {
                    let (waiters, ids) = self
                        .slot_line(
                            &mut tx,
                            &sub,
                            Reach::Partition(&part),
                            scan(room.free().min(64)),
                        )
                        .await?;
                    let plan = plan(&waiters, &mut room, u64::MAX);
                    woke += self.slot_carry_out(&mut tx, &ids, &plan, now).await?;
                }
                tx.commit().await?;
            }
            Ok(woke)
        })
        .await
    }

    async fn concurrency_sweep(&self, now: Timestamp) -> Result<u64> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            let subs: Vec<String> = q(&self
                .slot_sql("SELECT subscription FROM {s}.concurrency_limits ORDER BY subscription"))
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?;
            drop(conn);
            let mut woke = 0;
            for sub in subs {
                let mut tx = tx::begin(&self.pool).await?;
                let Some(limit) = self.slot_limit_locked(&mut tx, &sub).await? else {
                    continue;
                };
                q(&self.slot_sql(
                    "DELETE FROM {s}.slots WHERE subscription = $1 AND expires_at <= $2",
                ))
                .bind(&sub)
                .bind(now.as_millis())
                .execute(&mut *tx)
                .await?;
                woke += self.slot_wake_all(&mut tx, &sub, &limit, now).await?;
                tx.commit().await?;
            }
            Ok(woke)
        })
        .await
    }
}

//! Concurrency limits on PostgreSQL (see [`crate::concurrency`]): every step on a
//! subscription's slots and line runs with its limit's row locked, so processes taking and
//! giving back slots of one subscription at once do it one after another.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::{PgStore, q, tx};
use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::concurrency::line::{Reach, Room, may_take, plan, scan, wake_elsewhere};
use crate::concurrency::{ConcurrencyLimit, PartitionLimit, SlotAsk, SlotTake};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::ConcurrencyStore;

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

    async fn concurrency_waiting(&self, subscription: &str, most: u32) -> Result<Vec<String>> {
        self.noted(async {
            self.check()?;
            let mut conn = self.pool.acquire().await?;
            q(&self.slot_sql(
                "SELECT DISTINCT part FROM {s}.slot_waiters
                 WHERE subscription = $1 AND NOT woken LIMIT $2",
            ))
            .bind(subscription)
            .bind(i64::from(most))
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()
            .map_err(Into::into)
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
            let ahead = limit.partitioned()
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
                let partitioned = limit.partitioned();
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
                let partitioned = limit.partitioned();
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

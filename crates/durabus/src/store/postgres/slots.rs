//! Concurrency limits on PostgreSQL (see [`crate::concurrency`]): every step on a
//! subscription's slots and line runs with its limit's row locked, so processes taking and
//! giving back slots of one subscription at once do it one after another.

use async_trait::async_trait;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::{PgStore, q, tx};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::concurrency::{ConcurrencyLimit, SlotTake, WAIT_MARK, may_take, to_wake};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::ConcurrencyStore;

impl PgStore {
    /// `template` on this store's schema (`{s}`).
    fn slot_sql(&self, template: &str) -> String {
        template.replace("{s}", &self.sql.schema)
    }

    /// Slots of `subscription` whose lease has not run out at `now`.
    async fn slots_live(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        now: Timestamp,
    ) -> Result<u64> {
        let n: i64 = q(&self.slot_sql(
            "SELECT count(*) FROM {s}.slots WHERE subscription = $1 AND expires_at > $2",
        ))
        .bind(subscription)
        .bind(now.as_millis())
        .fetch_one(&mut *c)
        .await?
        .try_get(0)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }

    /// The limit of `subscription`, its row locked: `max_in_flight`.
    async fn slot_limit_locked(
        &self,
        c: &mut PgConnection,
        subscription: &str,
    ) -> Result<Option<u32>> {
        Ok(q(&self.slot_sql(
            "SELECT max_in_flight FROM {s}.concurrency_limits WHERE subscription = $1 FOR UPDATE",
        ))
        .bind(subscription)
        .fetch_optional(&mut *c)
        .await?
        .map(|r| r.try_get::<i32, _>(0))
        .transpose()?
        .map(|n| u32::try_from(n).unwrap_or(0)))
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
                Ok(ConcurrencyLimit {
                    subscription: r.try_get("subscription")?,
                    max_in_flight: u32::try_from(r.try_get::<i32, _>("max_in_flight")?)
                        .unwrap_or(0),
                    per_process: r
                        .try_get::<Option<i32>, _>("per_process")?
                        .map(|n| u32::try_from(n).unwrap_or(0)),
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

    /// Makes at most `n` events waiting for a slot of `subscription` due at `now`, first
    /// come first (see the SQLite store's `wake`). Returns how many woke.
    async fn slot_wake(
        &self,
        c: &mut PgConnection,
        subscription: &str,
        n: u64,
        now: Timestamp,
    ) -> Result<u64> {
        if n == 0 {
            return Ok(0);
        }
        let scan = i64::try_from(n.saturating_mul(4).saturating_add(16)).unwrap_or(i64::MAX);
        let line = q(&self.slot_sql(
            "SELECT w.seq, w.event_id, e.status, e.next_attempt_at FROM {s}.slot_waiters AS w
             LEFT JOIN {s}.events AS e ON e.id = w.event_id
             WHERE w.subscription = $1 ORDER BY w.seq LIMIT $2",
        ))
        .bind(subscription)
        .bind(scan)
        .fetch_all(&mut *c)
        .await?;
        let mut woke = 0u64;
        let mut gone: Vec<i64> = Vec::new();
        for r in &line {
            if woke >= n {
                break;
            }
            let seq: i64 = r.try_get("seq")?;
            let id: Uuid = r.try_get("event_id")?;
            let status: Option<String> = r.try_get("status")?;
            let due: Option<i64> = r.try_get("next_attempt_at")?;
            match (status.as_deref(), due) {
                (Some("processing"), _) => continue,
                (Some("pending"), Some(d)) if d == WAIT_MARK.as_millis() => {
                    q(&self.slot_sql(
                        "UPDATE {s}.events SET next_attempt_at = $2, updated_at = $2 WHERE id = $1",
                    ))
                    .bind(id)
                    .bind(now.as_millis())
                    .execute(&mut *c)
                    .await?;
                    woke += 1;
                }
                (Some("pending" | "scheduled"), _) => continue,
                _ => {}
            }
            gone.push(seq);
        }
        if !gone.is_empty() {
            q(&self.slot_sql("DELETE FROM {s}.slot_waiters WHERE seq = ANY($1)"))
                .bind(&gone)
                .execute(&mut *c)
                .await?;
        }
        if woke > 0 {
            q("SELECT pg_notify($1, '')")
                .bind(&self.channel)
                .execute(&mut *c)
                .await?;
        }
        Ok(woke)
    }
}

#[async_trait]
impl ConcurrencyStore for PgStore {
    async fn concurrency_set(
        &self,
        subscription: &str,
        max_in_flight: u32,
        per_process: Option<u32>,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<ConcurrencyLimit> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            q(&self.slot_sql(
                "INSERT INTO {s}.concurrency_limits
                     (subscription, max_in_flight, per_process, set_by, set_by_kind, set_at)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (subscription) DO UPDATE SET max_in_flight = excluded.max_in_flight,
                     per_process = excluded.per_process, set_by = excluded.set_by,
                     set_by_kind = excluded.set_by_kind, set_at = excluded.set_at",
            ))
            .bind(subscription)
            .bind(i32::try_from(max_in_flight).unwrap_or(i32::MAX))
            .bind(per_process.map(|n| i32::try_from(n).unwrap_or(i32::MAX)))
            .bind(&actor.name)
            .bind(actor.kind.as_str())
            .bind(now.as_millis())
            .execute(&mut *tx)
            .await?;
            self.slot_limit_locked(&mut tx, subscription).await?;
            let held = self.slots_live(&mut tx, subscription, now).await?;
            self.slot_wake(&mut tx, subscription, to_wake(held, max_in_flight), now)
                .await?;
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
            self.slot_wake(&mut tx, subscription, u64::MAX / 8, now)
                .await?;
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
        id: EventId,
        holder: &str,
        now: Timestamp,
        lease_until: Timestamp,
    ) -> Result<SlotTake> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let Some(max) = self.slot_limit_locked(&mut tx, subscription).await? else {
                return Ok(SlotTake::Unlimited);
            };
            let held = self.slots_live(&mut tx, subscription, now).await?;
            let took = if may_take(held, max) {
                q(&self.slot_sql(
                    "INSERT INTO {s}.slots (subscription, event_id, holder, expires_at)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (subscription, event_id) DO UPDATE
                         SET holder = excluded.holder, expires_at = excluded.expires_at",
                ))
                .bind(subscription)
                .bind(id.0)
                .bind(holder)
                .bind(lease_until.as_millis())
                .execute(&mut *tx)
                .await?;
                q(&self.slot_sql(
                    "DELETE FROM {s}.slot_waiters WHERE subscription = $1 AND event_id = $2",
                ))
                .bind(subscription)
                .bind(id.0)
                .execute(&mut *tx)
                .await?;
                SlotTake::Granted
            } else {
                q(&self.slot_sql(
                    "INSERT INTO {s}.slot_waiters (subscription, event_id) VALUES ($1, $2)
                     ON CONFLICT (subscription, event_id) DO NOTHING",
                ))
                .bind(subscription)
                .bind(id.0)
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
            let max = self.slot_limit_locked(&mut tx, subscription).await?;
            q(&self.slot_sql("DELETE FROM {s}.slots WHERE subscription = $1 AND event_id = $2"))
                .bind(subscription)
                .bind(id.0)
                .execute(&mut *tx)
                .await?;
            if let Some(max) = max {
                let held = self.slots_live(&mut tx, subscription, now).await?;
                self.slot_wake(&mut tx, subscription, to_wake(held, max).min(1), now)
                    .await?;
            }
            tx.commit().await?;
            Ok(())
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
                let Some(max) = self.slot_limit_locked(&mut tx, &sub).await? else {
                    continue;
                };
                q(&self.slot_sql(
                    "DELETE FROM {s}.slots WHERE subscription = $1 AND expires_at <= $2",
                ))
                .bind(&sub)
                .bind(now.as_millis())
                .execute(&mut *tx)
                .await?;
                let held = self.slots_live(&mut tx, &sub, now).await?;
                woke += self
                    .slot_wake(&mut tx, &sub, to_wake(held, max), now)
                    .await?;
                tx.commit().await?;
            }
            Ok(woke)
        })
        .await
    }
}

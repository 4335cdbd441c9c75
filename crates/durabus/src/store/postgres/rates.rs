//! Rate limits on PostgreSQL (see [`crate::rate`]): a slot is taken with the limit's row
//! locked, so processes taking slots of one subscription at once take them one after another.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::{PgStore, q, tx};
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::rate::{RateLimit, RateTake, TakePlan, plan_take};
use crate::store::RateStore;

const COLUMNS: &str = "subscription, per, interval_ms, set_by, set_by_kind, set_at";

fn limit(r: &PgRow) -> Result<RateLimit> {
    let kind: String = r.try_get("set_by_kind")?;
    Ok(RateLimit {
        subscription: r.try_get("subscription")?,
        per: u32::try_from(r.try_get::<i32, _>("per")?).unwrap_or(0),
        interval_ms: u64::try_from(r.try_get::<i64, _>("interval_ms")?).unwrap_or(0),
        set_by: Actor::new(
            r.try_get::<String, _>("set_by")?,
            ActorKind::parse(&kind)
                .ok_or_else(|| Error::Internal(format!("unknown actor kind {kind:?}")))?,
        ),
        set_at: Timestamp(r.try_get("set_at")?),
    })
}

impl PgStore {
    /// `template` on this store's schema (`{s}`) with the columns (`{c}`).
    fn rate_sql(&self, template: &str) -> String {
        template
            .replace("{s}", &self.sql.schema)
            .replace("{c}", COLUMNS)
    }
}

#[async_trait]
impl RateStore for PgStore {
    async fn rate_set(
        &self,
        subscription: &str,
        per: u32,
        interval_ms: u64,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<RateLimit> {
        self.noted(async {
            self.check()?;
            let row = q(&self.rate_sql(
                "INSERT INTO {s}.rate_limits ({c}, next_slot_us) VALUES ($1, $2, $3, $4, $5, $6, 0)
                 ON CONFLICT (subscription) DO UPDATE SET per = excluded.per,
                     interval_ms = excluded.interval_ms, set_by = excluded.set_by,
                     set_by_kind = excluded.set_by_kind, set_at = excluded.set_at
                 RETURNING {c}",
            ))
            .bind(subscription)
            .bind(i32::try_from(per).unwrap_or(i32::MAX))
            .bind(i64::try_from(interval_ms).unwrap_or(i64::MAX))
            .bind(&actor.name)
            .bind(actor.kind.as_str())
            .bind(now.as_millis())
            .fetch_one(&mut *self.pool.acquire().await?)
            .await?;
            limit(&row)
        })
        .await
    }

    async fn rate_remove(&self, subscription: &str) -> Result<Option<RateLimit>> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let gone =
                q(&self
                    .rate_sql("DELETE FROM {s}.rate_limits WHERE subscription = $1 RETURNING {c}"))
                .bind(subscription)
                .fetch_optional(&mut *tx)
                .await?;
            q(&self.rate_sql("DELETE FROM {s}.rate_reservations WHERE subscription = $1"))
                .bind(subscription)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            gone.as_ref().map(limit).transpose()
        })
        .await
    }

    async fn rate_list(&self) -> Result<Vec<RateLimit>> {
        self.noted(async {
            self.check()?;
            q(&self.rate_sql("SELECT {c} FROM {s}.rate_limits ORDER BY subscription"))
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(limit)
                .collect()
        })
        .await
    }

    async fn rate_take(
        &self,
        id: EventId,
        subscription: &str,
        now: Timestamp,
    ) -> Result<Option<RateTake>> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            let reserved: Option<i64> = q(&self.rate_sql(
                "SELECT slot_us FROM {s}.rate_reservations WHERE event_id = $1 AND subscription = $2",
            ))
            .bind(id.0)
            .bind(subscription)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
            let limit = match reserved {
                Some(_) => None,
                None => q(&self.rate_sql(
                    "SELECT per, interval_ms, next_slot_us FROM {s}.rate_limits
                     WHERE subscription = $1 FOR UPDATE",
                ))
                .bind(subscription)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| -> Result<(u32, u64, i64)> {
                    Ok((
                        u32::try_from(r.try_get::<i32, _>(0)?).unwrap_or(1),
                        u64::try_from(r.try_get::<i64, _>(1)?).unwrap_or(1),
                        r.try_get(2)?,
                    ))
                })
                .transpose()?,
            };
            let plan = plan_take(reserved, limit, now);
            match plan {
                TakePlan::Unlimited | TakePlan::WaitReserved(_) => {}
                TakePlan::RunReserved => {
                    q(&self.rate_sql(
                        "DELETE FROM {s}.rate_reservations WHERE event_id = $1 AND subscription = $2",
                    ))
                    .bind(id.0)
                    .bind(subscription)
                    .execute(&mut *tx)
                    .await?;
                }
                TakePlan::Take { next, run, slot } => {
                    q(&self.rate_sql(
                        "UPDATE {s}.rate_limits SET next_slot_us = $2 WHERE subscription = $1",
                    ))
                    .bind(subscription)
                    .bind(next)
                    .execute(&mut *tx)
                    .await?;
                    if !run {
                        q(&self.rate_sql(
                            "INSERT INTO {s}.rate_reservations (event_id, subscription, slot_us)
                             VALUES ($1, $2, $3)
                             ON CONFLICT (event_id, subscription) DO UPDATE SET slot_us = excluded.slot_us",
                        ))
                        .bind(id.0)
                        .bind(subscription)
                        .bind(slot)
                        .execute(&mut *tx)
                        .await?;
                    }
                }
            }
            tx.commit().await?;
            Ok(plan.answer())
        })
        .await
    }
}

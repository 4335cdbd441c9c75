//! Rate limits on SQLite (see [`crate::rate`]): every slot is taken by the writer, one at a
//! time.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::actor::{Actor, ActorKind};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::rate::{RateLimit, RateTake, TakePlan, plan_take};
use crate::store::RateStore;

const COLUMNS: &str = "subscription, per, interval_ms, set_by, set_by_kind, set_at";

/// `template` on this store's tables (`{c}`: the columns).
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix).replace("{c}", COLUMNS)
}

fn limit(r: &Row<'_>) -> rusqlite::Result<RateLimit> {
    let kind: String = r.get(4)?;
    Ok(RateLimit {
        subscription: r.get(0)?,
        per: r.get(1)?,
        interval_ms: r.get(2)?,
        set_by: Actor::new(
            r.get::<_, String>(3)?,
            ActorKind::parse(&kind)
                .ok_or_else(|| corrupt(4, format!("unknown actor kind {kind:?}")))?,
        ),
        set_at: Timestamp(r.get(5)?),
    })
}

fn get(conn: &Connection, sql: &Sql, subscription: &str) -> rusqlite::Result<Option<RateLimit>> {
    conn.prepare_cached(&stmt(
        sql,
        "SELECT {c} FROM {p}rate_limits WHERE subscription = ?1",
    ))?
    .query_row([subscription], limit)
    .optional()
}

struct Set {
    subscription: String,
    per: u32,
    interval_ms: u64,
    actor: Actor,
}

impl WriteOp for Set {
    type Reply = RateLimit;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<RateLimit> {
        conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}rate_limits ({c}, next_slot_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)
             ON CONFLICT (subscription) DO UPDATE SET per = excluded.per,
                 interval_ms = excluded.interval_ms, set_by = excluded.set_by,
                 set_by_kind = excluded.set_by_kind, set_at = excluded.set_at",
        ))?
        .execute(params![
            self.subscription,
            self.per,
            self.interval_ms,
            self.actor.name,
            self.actor.kind.as_str(),
            now.as_millis()
        ])?;
        get(conn, sql, &self.subscription)?.ok_or_else(|| crate::error::Error::NotFound {
            what: format!("the rate limit of {:?}", self.subscription),
        })
    }
}

struct Remove(String);

impl WriteOp for Remove {
    type Reply = Option<RateLimit>;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<Option<RateLimit>> {
        let gone = get(conn, sql, &self.0)?;
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}rate_limits WHERE subscription = ?1",
        ))?
        .execute([&self.0])?;
        conn.prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}rate_reservations WHERE subscription = ?1",
        ))?
        .execute([&self.0])?;
        Ok(gone)
    }
}

struct Take {
    id: EventId,
    subscription: String,
}

impl WriteOp for Take {
    type Reply = Option<RateTake>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Option<RateTake>> {
        let id = self.id.to_string();
        let reserved: Option<i64> = conn
            .prepare_cached(&stmt(
                sql,
                "SELECT slot_us FROM {p}rate_reservations WHERE event_id = ?1 AND subscription = ?2",
            ))?
            .query_row(params![id, self.subscription], |r| r.get(0))
            .optional()?;
        let limit: Option<(u32, u64, i64)> =
            if reserved.is_some() {
                None
            } else {
                conn.prepare_cached(&stmt(
                sql,
                "SELECT per, interval_ms, next_slot_us FROM {p}rate_limits WHERE subscription = ?1",
            ))?
            .query_row([&self.subscription], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .optional()?
            };
        let plan = plan_take(reserved, limit, now);
        match plan {
            TakePlan::Unlimited | TakePlan::WaitReserved(_) => {}
            TakePlan::RunReserved => {
                conn.prepare_cached(&stmt(
                    sql,
                    "DELETE FROM {p}rate_reservations WHERE event_id = ?1 AND subscription = ?2",
                ))?
                .execute(params![id, self.subscription])?;
            }
            TakePlan::Take { next, run, slot } => {
                conn.prepare_cached(&stmt(
                    sql,
                    "UPDATE {p}rate_limits SET next_slot_us = ?2 WHERE subscription = ?1",
                ))?
                .execute(params![self.subscription, next])?;
                if !run {
                    conn.prepare_cached(&stmt(
                        sql,
                        "INSERT OR REPLACE INTO {p}rate_reservations (event_id, subscription, slot_us)
                         VALUES (?1, ?2, ?3)",
                    ))?
                    .execute(params![id, self.subscription, slot])?;
                }
            }
        }
        Ok(plan.answer())
    }
}

#[async_trait]
impl RateStore for SqliteStore {
    async fn rate_set(
        &self,
        subscription: &str,
        per: u32,
        interval_ms: u64,
        actor: &Actor,
        now: Timestamp,
    ) -> Result<RateLimit> {
        let op = Set {
            subscription: subscription.to_owned(),
            per,
            interval_ms,
            actor: actor.clone(),
        };
        self.write(op, now).await
    }

    async fn rate_remove(&self, subscription: &str) -> Result<Option<RateLimit>> {
        self.write(Remove(subscription.to_owned()), Timestamp(0))
            .await
    }

    async fn rate_list(&self) -> Result<Vec<RateLimit>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&stmt(
                &sql,
                "SELECT {c} FROM {p}rate_limits ORDER BY subscription",
            ))?
            .query_map([], limit)?
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
        let op = Take {
            id,
            subscription: subscription.to_owned(),
        };
        self.write(op, now).await
    }
}

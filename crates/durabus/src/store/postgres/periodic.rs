//! Periodic-event definitions on PostgreSQL.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use super::{PgStore, q};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::periodic::PeriodicRow;
use crate::store::PeriodicStore;

const COLUMNS: &str = "name, schedule, timezone, event_type, payload, priority, paused, cursor, \
     last_tick, last_event_id, created_at, updated_at";

fn row(r: &PgRow) -> Result<PeriodicRow> {
    Ok(PeriodicRow {
        name: r.try_get(0)?,
        schedule: r.try_get(1)?,
        timezone: r.try_get(2)?,
        event_type: r.try_get(3)?,
        payload: r.try_get(4)?,
        priority: r.try_get(5)?,
        paused: r.try_get(6)?,
        cursor: Timestamp(r.try_get(7)?),
        last_tick: r.try_get::<Option<i64>, _>(8)?.map(Timestamp),
        last_event_id: r.try_get::<Option<Uuid>, _>(9)?.map(EventId),
        created_at: Timestamp(r.try_get(10)?),
        updated_at: Timestamp(r.try_get(11)?),
    })
}

impl PgStore {
    /// `template` on this store's schema (`{s}`) with the columns (`{c}`).
    fn periodic_sql(&self, template: &str) -> String {
        template
            .replace("{s}", &self.sql.schema)
            .replace("{c}", COLUMNS)
    }
}

#[async_trait]
impl PeriodicStore for PgStore {
    async fn periodic_save(&self, r: PeriodicRow) -> Result<PeriodicRow> {
        self.noted(async {
            self.check()?;
            let sql = self.periodic_sql(
                "INSERT INTO {s}.periodic ({c}) VALUES ($1, $2, $3, $4, $5, $6, false, $7, NULL, NULL, $8, $8)
                 ON CONFLICT (name) DO UPDATE SET schedule = excluded.schedule,
                     timezone = excluded.timezone, event_type = excluded.event_type,
                     payload = excluded.payload, priority = excluded.priority,
                     updated_at = excluded.updated_at
                 RETURNING {c}",
            );
            let stored = q(&sql)
                .bind(&r.name)
                .bind(&r.schedule)
                .bind(&r.timezone)
                .bind(&r.event_type)
                .bind(&r.payload)
                .bind(r.priority)
                .bind(r.cursor.as_millis())
                .bind(r.updated_at.as_millis())
                .fetch_one(&mut *self.pool.acquire().await?)
                .await?;
            row(&stored)
        })
        .await
    }

    async fn periodic_list(&self) -> Result<Vec<PeriodicRow>> {
        self.noted(async {
            self.check()?;
            let sql = self.periodic_sql("SELECT {c} FROM {s}.periodic ORDER BY name");
            q(&sql)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(row)
                .collect()
        })
        .await
    }

    async fn periodic_pause(
        &self,
        name: &str,
        paused: bool,
        now: Timestamp,
    ) -> Result<Option<PeriodicRow>> {
        self.noted(async {
            self.check()?;
            let sql = self.periodic_sql(
                "UPDATE {s}.periodic SET paused = $2, updated_at = $3,
                     cursor = CASE WHEN paused AND NOT $2 THEN GREATEST(cursor, $3) ELSE cursor END
                 WHERE name = $1 RETURNING {c}",
            );
            q(&sql)
                .bind(name)
                .bind(paused)
                .bind(now.as_millis())
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?
                .as_ref()
                .map(row)
                .transpose()
        })
        .await
    }

    async fn periodic_remove(&self, name: &str) -> Result<Option<PeriodicRow>> {
        self.noted(async {
            self.check()?;
            let sql = self.periodic_sql("DELETE FROM {s}.periodic WHERE name = $1 RETURNING {c}");
            q(&sql)
                .bind(name)
                .fetch_optional(&mut *self.pool.acquire().await?)
                .await?
                .as_ref()
                .map(row)
                .transpose()
        })
        .await
    }

    async fn periodic_advance(&self, name: &str, tick: Timestamp, event_id: EventId) -> Result<()> {
        self.noted(async {
            self.check()?;
            let sql = self.periodic_sql(
                "UPDATE {s}.periodic SET cursor = GREATEST(cursor, $2),
                     last_event_id = CASE WHEN last_tick IS NULL OR last_tick < $2 THEN $3 ELSE last_event_id END,
                     last_tick = GREATEST(coalesce(last_tick, $2), $2)
                 WHERE name = $1",
            );
            q(&sql)
                .bind(name)
                .bind(tick.as_millis())
                .bind(event_id.0)
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }
}

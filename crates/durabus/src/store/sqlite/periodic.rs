//! Periodic-event definitions on SQLite.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::periodic::PeriodicRow;
use crate::store::PeriodicStore;

const COLUMNS: &str = "name, schedule, timezone, event_type, payload, priority, paused, cursor, \
     last_tick, last_event_id, created_at, updated_at";

/// `template` on this store's tables (`{p}` is the prefix, `{c}` the columns).
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix).replace("{c}", COLUMNS)
}

fn row(r: &Row<'_>) -> rusqlite::Result<PeriodicRow> {
    let last_event_id: Option<String> = r.get(9)?;
    Ok(PeriodicRow {
        name: r.get(0)?,
        schedule: r.get(1)?,
        timezone: r.get(2)?,
        event_type: r.get(3)?,
        payload: r.get(4)?,
        priority: r.get(5)?,
        paused: r.get(6)?,
        cursor: Timestamp(r.get(7)?),
        last_tick: r.get::<_, Option<i64>>(8)?.map(Timestamp),
        last_event_id: last_event_id.and_then(|s| s.parse::<EventId>().ok()),
        created_at: Timestamp(r.get(10)?),
        updated_at: Timestamp(r.get(11)?),
    })
}

fn get(conn: &Connection, sql: &Sql, name: &str) -> Result<Option<PeriodicRow>> {
    Ok(conn
        .prepare_cached(&stmt(sql, "SELECT {c} FROM {p}periodic WHERE name = ?1"))?
        .query_row([name], row)
        .optional()?)
}

struct Save(PeriodicRow);

impl WriteOp for Save {
    type Reply = PeriodicRow;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<PeriodicRow> {
        let r = &self.0;
        conn.prepare_cached(&stmt(
            sql,
            "INSERT INTO {p}periodic ({c}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, NULL, NULL, ?8, ?8)
             ON CONFLICT (name) DO UPDATE SET schedule = excluded.schedule,
                 timezone = excluded.timezone, event_type = excluded.event_type,
                 payload = excluded.payload, priority = excluded.priority,
                 updated_at = excluded.updated_at",
        ))?
        .execute(params![
            r.name,
            r.schedule,
            r.timezone,
            r.event_type,
            r.payload,
            r.priority,
            r.cursor.as_millis(),
            r.updated_at.as_millis()
        ])?;
        get(conn, sql, &r.name)?.ok_or_else(|| crate::error::Error::NotFound {
            what: format!("periodic event {:?}", r.name),
        })
    }
}

struct Pause {
    name: String,
    paused: bool,
}

impl WriteOp for Pause {
    type Reply = Option<PeriodicRow>;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Option<PeriodicRow>> {
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}periodic SET paused = ?2, updated_at = ?3,
                 cursor = CASE WHEN paused AND NOT ?2 THEN max(cursor, ?3) ELSE cursor END
             WHERE name = ?1",
        ))?
        .execute(params![self.name, self.paused, now.as_millis()])?;
        get(conn, sql, &self.name)
    }
}

struct Remove(String);

impl WriteOp for Remove {
    type Reply = Option<PeriodicRow>;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<Option<PeriodicRow>> {
        let gone = get(conn, sql, &self.0)?;
        conn.prepare_cached(&stmt(sql, "DELETE FROM {p}periodic WHERE name = ?1"))?
            .execute([&self.0])?;
        Ok(gone)
    }
}

struct Advance {
    name: String,
    tick: Timestamp,
    event_id: EventId,
}

impl WriteOp for Advance {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}periodic SET cursor = max(cursor, ?2),
                 last_event_id = CASE WHEN last_tick IS NULL OR last_tick < ?2 THEN ?3 ELSE last_event_id END,
                 last_tick = max(coalesce(last_tick, ?2), ?2)
             WHERE name = ?1",
        ))?
        .execute(params![
            self.name,
            self.tick.as_millis(),
            self.event_id.to_string()
        ])?;
        Ok(())
    }
}

#[async_trait]
impl PeriodicStore for SqliteStore {
    async fn periodic_save(&self, row: PeriodicRow) -> Result<PeriodicRow> {
        let now = row.updated_at;
        self.write(Save(row), now).await
    }

    async fn periodic_list(&self) -> Result<Vec<PeriodicRow>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&stmt(&sql, "SELECT {c} FROM {p}periodic ORDER BY name"))?
                .query_map([], row)?
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
        let op = Pause {
            name: name.to_owned(),
            paused,
        };
        self.write(op, now).await
    }

    async fn periodic_remove(&self, name: &str) -> Result<Option<PeriodicRow>> {
        self.write(Remove(name.to_owned()), Timestamp(0)).await
    }

    async fn periodic_advance(&self, name: &str, tick: Timestamp, event_id: EventId) -> Result<()> {
        let op = Advance {
            name: name.to_owned(),
            tick,
            event_id,
        };
        self.write(op, tick).await
    }
}

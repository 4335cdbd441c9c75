//! Dedup windows on SQLite: the key is looked up and taken in the transaction that stores the
//! event (the writer's, or the application's for the outbox), so a rollback gives it back.

use rusqlite::{Connection, OptionalExtension, params};

use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{EventId, NewEvent};

/// The id of the event that holds `e`'s dedup key within its window, if one does (and `e` is
/// not that event: a second insert of one id is a known id, not a duplicate).
pub(super) fn holder(
    conn: &Connection,
    sql: &Sql,
    e: &NewEvent,
    now: Timestamp,
) -> Result<Option<EventId>> {
    let Some(d) = e.options.dedup_value() else {
        return Ok(None);
    };
    let first: Option<String> = conn
        .prepare_cached(&sql.dedup_get)?
        .query_row(params![d.key, now.as_millis()], |r| r.get(0))
        .optional()?;
    match first {
        Some(id) => {
            let id: EventId = id.parse()?;
            Ok((id != e.id).then_some(id))
        }
        None => Ok(None),
    }
}

/// Event `e`, just stored, takes its dedup key (if it has one) until its window closes.
pub(super) fn take(conn: &Connection, sql: &Sql, e: &NewEvent, now: Timestamp) -> Result<()> {
    if let Some(d) = e.options.dedup_value() {
        conn.prepare_cached(&sql.dedup_put)?.execute(params![
            d.key,
            e.id.to_string(),
            d.expires(now).as_millis()
        ])?;
    }
    Ok(())
}

//! Ordering keys on SQLite: the queue of each key's unfinished events (`keyed`), in publish
//! order. The head of a key is delivered like any event; the others wait with no due time
//! until the head finishes (done, dead-lettered without holding its key, cancelled), when the
//! next becomes due. The writer serialises every change, so a key never has two heads.

use rusqlite::{Connection, OptionalExtension, params};

use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{EventId, EventStatus};

/// `template` on this store's tables.
fn stmt(sql: &Sql, template: &str) -> String {
    template.replace("{p}", &sql.prefix)
}

/// Whether `key` has unfinished events: a new event of the key waits behind them.
pub(super) fn busy(conn: &Connection, sql: &Sql, key: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached(&stmt(sql, "SELECT 1 FROM {p}keyed WHERE key = ?1 LIMIT 1"))?
        .query_row([key], |_| Ok(()))
        .optional()?
        .is_some())
}

/// Event `id` joins the back of `key`'s queue.
pub(super) fn join(conn: &Connection, sql: &Sql, key: &str, id: EventId) -> Result<()> {
    conn.prepare_cached(&stmt(
        sql,
        "INSERT INTO {p}keyed (key, event_id) VALUES (?1, ?2)",
    ))?
    .execute(params![key, id.to_string()])?;
    Ok(())
}

/// Event `id` leaves its key's queue (it finished, or was cancelled or purged); if it was the
/// head, the next event of the key becomes due at `now`. Nothing for an event without a row.
/// Returns whether an event became due (the dispatcher should look).
pub(super) fn leave(conn: &Connection, sql: &Sql, id: EventId, now: Timestamp) -> Result<bool> {
    let key: Option<String> = conn
        .prepare_cached(&stmt(
            sql,
            "DELETE FROM {p}keyed WHERE event_id = ?1 RETURNING key",
        ))?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()?;
    match key {
        Some(key) => wake_head(conn, sql, &key, now),
        None => Ok(false),
    }
}

/// Makes the head of `key` due if it is waiting (a head that runs, retries or is dead stays as
/// it is): pending at its publish time, or scheduled at its due time if that is still ahead,
/// in its waiting lane.
fn wake_head(conn: &Connection, sql: &Sql, key: &str, now: Timestamp) -> Result<bool> {
    let head: Option<String> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT event_id FROM {p}keyed WHERE key = ?1 ORDER BY seq LIMIT 1",
        ))?
        .query_row([key], |r| r.get(0))
        .optional()?;
    let Some(head) = head else {
        return Ok(false);
    };
    let woke: Option<(String, i16, i64)> = conn
        .prepare_cached(&stmt(
            sql,
            "UPDATE {p}events SET
                 status = CASE WHEN coalesce(deliver_at, 0) > ?2 THEN 'scheduled' ELSE 'pending' END,
                 next_attempt_at = CASE WHEN coalesce(deliver_at, 0) > ?2 THEN deliver_at ELSE created_at END
             WHERE id = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL
             RETURNING status, priority, next_attempt_at",
        ))?
        .query_row(params![head, now.as_millis()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    if let Some((status, priority, due)) = woke {
        let lane = if status == EventStatus::Scheduled.as_str() {
            Some(1)
        } else {
            (priority != 0).then_some(2)
        };
        if let Some(lane) = lane {
            conn.prepare_cached(&sql.waiting_put)?
                .execute(params![head, lane, priority, due])?;
        }
        return Ok(true);
    }
    Ok(false)
}

/// After a transition that may have ended event `id` cancelled (a retry, a snooze, a release,
/// a cancel): a cancelled event leaves its key.
pub(super) fn settle(conn: &Connection, sql: &Sql, id: EventId, now: Timestamp) -> Result<()> {
    let cancelled = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT 1 FROM {p}events WHERE id = ?1 AND ordering_key IS NOT NULL AND status = 'cancelled'",
        ))?
        .query_row([id.to_string()], |_| Ok(()))
        .optional()?
        .is_some();
    if cancelled {
        leave(conn, sql, id, now)?;
    }
    Ok(())
}

/// After a crash recovery: every keyed event it ended cancelled leaves its key.
pub(super) fn settle_all(conn: &Connection, sql: &Sql, now: Timestamp) -> Result<()> {
    let gone: Vec<String> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT k.event_id FROM {p}keyed AS k JOIN {p}events AS e ON e.id = k.event_id
             WHERE e.status = 'cancelled'",
        ))?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in gone {
        leave(conn, sql, id.parse()?, now)?;
    }
    Ok(())
}

/// Event `id`, with `key`, was just dead-lettered: it holds its key (`hold`) or lets it move
/// on. Returns how many later events of the key were waiting.
pub(super) fn died(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    key: &str,
    hold: bool,
    now: Timestamp,
) -> Result<u64> {
    let waiting: u64 = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT count(*) FROM {p}keyed WHERE key = ?1 AND event_id <> ?2",
        ))?
        .query_row(params![key, id.to_string()], |r| r.get(0))?;
    if hold {
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}keyed SET held_since = ?2 WHERE event_id = ?1",
        ))?
        .execute(params![id.to_string(), now.as_millis()])?;
    } else {
        leave(conn, sql, id, now)?;
    }
    conn.prepare_cached(&stmt(
        sql,
        "UPDATE {p}dead_letters SET ordering_key = ?2, key_waiting = ?3 WHERE event_id = ?1",
    ))?
    .execute(params![id.to_string(), key, waiting])?;
    Ok(waiting)
}

/// Dead event `id` was just sent back for delivery: if it still holds its key it is the head
/// and runs; if its key moved on, it joins the back of the key's queue (and waits if the key
/// is busy).
pub(super) fn rejoin(conn: &Connection, sql: &Sql, id: EventId) -> Result<()> {
    let key: Option<Option<String>> = conn
        .prepare_cached(&stmt(
            sql,
            "SELECT ordering_key FROM {p}events WHERE id = ?1",
        ))?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()?;
    let Some(Some(key)) = key else {
        return Ok(());
    };
    let held = conn
        .prepare_cached(&stmt(
            sql,
            "UPDATE {p}keyed SET held_since = NULL WHERE event_id = ?1",
        ))?
        .execute([id.to_string()])?
        == 1;
    if held {
        return Ok(());
    }
    let wait = busy(conn, sql, &key)?;
    join(conn, sql, &key, id)?;
    if wait {
        conn.prepare_cached(&stmt(
            sql,
            "UPDATE {p}events SET next_attempt_at = NULL WHERE id = ?1 AND status = 'pending'",
        ))?
        .execute([id.to_string()])?;
        conn.prepare_cached(&sql.waiting_delete)?
            .execute([id.to_string()])?;
    }
    Ok(())
}

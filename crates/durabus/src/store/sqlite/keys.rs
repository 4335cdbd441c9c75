//! Ordering keys on SQLite: the queue of each key's unfinished events, in publish order, is
//! a list through the events' rows: an event in its key's queue has a `key_queued` and points at
//! the event ahead of it (`key_prev`, NULL for the head; read back through a partial index),
//! and the key's last event is a row of `key_tails` (one row per busy key). Joining costs the
//! insert a tail lookup, an index entry and the tail's row; leaving costs the outcome's update
//! two columns and the next event's update one. Ids grow with publish time, so the index over
//! `key_prev` is written near its two ends, whatever the number of keys (an index over the
//! key's name, which this replaced, rewrote a page of itself for each key a commit touched). A
//! head that died holding its key is a row of `key_holds`. The head of a key is delivered like
//! any event; the others wait with no due time until the head finishes (done, dead-lettered
//! without holding its key, cancelled), when the next becomes due; after a completion, the
//! common case, the next is claimed at once and set aside for the next claim
//! ([`set_aside`](super::set_aside)). The writer serialises every change, so a key never has
//! two heads.

use rusqlite::{Connection, OptionalExtension, params};

use super::prepared::Prepared;
use super::rows::{Undecoded, undecoded_from_row};
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{EventId, EventStatus};

/// The last event of `key`'s queue, for an event joining it: `Some(id)` when the key has
/// unfinished events (the new event waits behind that one), `None` when it has none (the new
/// event is its head).
pub(super) fn back<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    key: &str,
) -> Result<Option<String>> {
    Ok(p.get(&sql.key_tail)?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

/// Event `id` joined the back of `key`'s queue (its row says which event is ahead of it).
pub(super) fn joined<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    key: &str,
    id: &str,
) -> Result<()> {
    p.get(&sql.key_tail_set)?.execute([key, id])?;
    Ok(())
}

/// Event `id` leaves its key's queue (it finished, or was cancelled or purged); if it was the
/// head, the next event of the key becomes due at `now`. Nothing for an event without a
/// place. Returns whether an event became due (the dispatcher should look).
pub(super) fn leave<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: EventId,
    now: Timestamp,
) -> Result<bool> {
    let id = id.to_string();
    let place: Option<(String, Option<String>)> = p
        .get(&sql.key_place)?
        .query_row([&id], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((key, ahead)) = place else {
        return Ok(false);
    };
    p.get(&sql.key_drop)?.execute([&id])?;
    p.get(&sql.key_unhold)?.execute([&id])?;
    unlink(p, sql, &id, &key, ahead.as_deref(), now, None)
}

/// Event `id` of `key`, the head of its queue, finished and gave up its place in the update
/// that recorded it (a completion; `ahead` is what its row said was ahead of it, normally
/// nothing): the next event of the key, if it waits, is claimed at `now` and pushed onto
/// `next` when it is due now with priority 0 (the common case: the worker gets it from the
/// store's set-aside events, see [`set_aside`](super::set_aside)), else it becomes due in its
/// lane. Returns whether an event became due in the table (a claimed one wakes the dispatcher
/// when it is set aside).
pub(super) fn moved_on<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: &str,
    key: &str,
    ahead: Option<&str>,
    now: Timestamp,
    next: &mut Vec<Undecoded>,
) -> Result<bool> {
    unlink(p, sql, id, key, ahead, now, Some(next))
}

/// Takes event `id` out of `key`'s list (its own row already gave up its place): the event
/// behind it now stands behind `ahead`, and wakes as the head if `ahead` is `None`; with
/// nothing behind it, `ahead` becomes the key's last event (or the key has none).
fn unlink<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: &str,
    key: &str,
    ahead: Option<&str>,
    now: Timestamp,
    hand: Option<&mut Vec<Undecoded>>,
) -> Result<bool> {
    let behind: Option<Head> = p.get(&sql.key_next)?.query_row([id], head_of).optional()?;
    match (behind, ahead) {
        (Some(head), None) => wake_head(p, sql, head, now, hand),
        (Some(head), Some(ahead)) => {
            p.get(&sql.key_link)?.execute(params![head.rowid, ahead])?;
            Ok(false)
        }
        (None, Some(ahead)) => {
            p.get(&sql.key_tail_back)?.execute([key, id, ahead])?;
            Ok(false)
        }
        (None, None) => {
            p.get(&sql.key_tail_drop)?.execute([key, id])?;
            Ok(false)
        }
    }
}

/// The event behind one that leaves its key's queue, read whole (a completion hands it over
/// without reading it again).
struct Head {
    /// Its columns.
    row: Undecoded,
    /// Its row.
    rowid: i64,
    /// Whether it waits for its key: pending or scheduled, with no due time.
    waiting: bool,
}

/// A [`Head`] from a row of the `key_next` statement.
fn head_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Head> {
    Ok(Head {
        row: undecoded_from_row(r)?,
        rowid: r.get(18)?,
        waiting: r.get(19)?,
    })
}

/// Where a waiting head goes at `now`: scheduled at its delivery time if that is still ahead,
/// else pending at its publish time (its place among the due events). `None` for a head that
/// is not waiting (it runs, retries or is dead).
fn woken(head: &Head, now: Timestamp) -> Option<(EventStatus, i64)> {
    let event = head.row.event();
    let deliver_at = event.deliver_at.map_or(0, Timestamp::as_millis);
    if !head.waiting {
        None
    } else if deliver_at > now.as_millis() {
        Some((EventStatus::Scheduled, deliver_at))
    } else {
        Some((EventStatus::Pending, event.created_at.as_millis()))
    }
}

/// `head` is the head of its key now: it is made due if it is waiting (a head that runs,
/// retries or is dead stays as it is), in its waiting lane; or, given `hand` and the head due
/// now with priority 0, claimed and its row pushed onto `hand` (one update of the row instead
/// of the wake's and then a claim's). Either way it points at no event ahead any more.
fn wake_head<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    mut head: Head,
    now: Timestamp,
    hand: Option<&mut Vec<Undecoded>>,
) -> Result<bool> {
    let priority = head.row.event().priority;
    let Some((status, due)) = woken(&head, now) else {
        p.get(&sql.key_link)?
            .execute(params![head.rowid, None::<String>])?;
        return Ok(false);
    };
    if let Some(next) = hand
        && status == EventStatus::Pending
        && priority == 0
    {
        let claimed = p
            .get(&sql.key_hand)?
            .execute(params![head.rowid, due, now.as_millis()])?;
        if claimed == 1 {
            // What the update changed, on the row read before it.
            let event = head.row.event_mut();
            event.status = EventStatus::Processing;
            event.next_attempt_at = Some(Timestamp(due));
            event.updated_at = now;
            next.push(head.row);
        } else {
            p.get(&sql.key_link)?
                .execute(params![head.rowid, None::<String>])?;
        }
        return Ok(false);
    }
    p.get(&sql.key_wake)?
        .execute(params![head.rowid, status.as_str(), due])?;
    let lane = if status == EventStatus::Scheduled {
        Some(1)
    } else {
        (priority != 0).then_some(2)
    };
    if let Some(lane) = lane {
        p.get(&sql.waiting_put)?.execute(params![
            head.row.id().to_string(),
            lane,
            priority,
            due
        ])?;
    }
    Ok(true)
}

/// After a transition that may have ended event `id` cancelled (a retry, a snooze, a release,
/// a cancel): a cancelled event leaves its key.
pub(super) fn settle<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: EventId,
    now: Timestamp,
) -> Result<()> {
    leave_if(p, sql, &sql.key_cancelled, id, now).map(|_| ())
}

/// Dead event `id` is about to be deleted without its record (the purge of dead events that
/// have none): a key it held moves on. Nothing for an event that is not dead (it stays).
/// Returns whether an event became due.
pub(super) fn leave_if_dead<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: EventId,
    now: Timestamp,
) -> Result<bool> {
    leave_if(p, sql, &sql.key_dead, id, now)
}

/// Event `id` leaves its key if `check` (a statement on its id) finds a row. Returns whether
/// an event became due.
fn leave_if<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    check: &'s str,
    id: EventId,
    now: Timestamp,
) -> Result<bool> {
    let found = p
        .get(check)?
        .query_row([id.to_string()], |_| Ok(()))
        .optional()?
        .is_some();
    if found {
        return leave(p, sql, id, now);
    }
    Ok(false)
}

/// Before a crash recovery: the running events in a key's queue that it will end cancelled,
/// for [`settle_all`] after it.
pub(super) fn cancelled_by_recovery(conn: &Connection, sql: &Sql) -> Result<Vec<EventId>> {
    let ids: Vec<String> = conn
        .prepare_cached(&sql.key_cancelled_all)?
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.iter().map(|id| id.parse()).collect()
}

/// After a crash recovery: the keyed events it ended cancelled (`ids`, read before it by
/// [`cancelled_by_recovery`]) leave their keys.
pub(super) fn settle_all(
    conn: &Connection,
    sql: &Sql,
    ids: &[EventId],
    now: Timestamp,
) -> Result<()> {
    let mut p = Prepared::new(conn);
    for id in ids {
        settle(&mut p, sql, *id, now)?;
    }
    Ok(())
}

/// Event `id`, with `key`, was just dead-lettered: it holds its key (`hold`) or lets it move
/// on. Returns how many later events of the key were waiting.
pub(super) fn died<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    id: EventId,
    key: &str,
    hold: bool,
    now: Timestamp,
) -> Result<u64> {
    let waiting: u64 = p
        .get(&sql.key_waiting)?
        .query_row([id.to_string()], |r| r.get(0))?;
    if hold {
        p.get(&sql.key_hold)?
            .execute(params![id.to_string(), now.as_millis()])?;
    } else {
        leave(p, sql, id, now)?;
    }
    p.get(&sql.key_dead_letter)?
        .execute(params![id.to_string(), key, waiting])?;
    Ok(waiting)
}

/// Dead event `id` was just sent back for delivery: if it still holds its key it is the head
/// and runs; if its key moved on, it joins the back of the key's queue (and waits if the key
/// is busy).
pub(super) fn rejoin<'s>(p: &mut Prepared<'_, 's>, sql: &'s Sql, id: EventId) -> Result<()> {
    let key: Option<Option<String>> = p
        .get(&sql.key_of)?
        .query_row([id.to_string()], |r| r.get(0))
        .optional()?;
    let Some(Some(key)) = key else {
        return Ok(());
    };
    p.get(&sql.key_unhold)?.execute([id.to_string()])?;
    let held = p
        .get(&sql.key_in_queue)?
        .query_row([id.to_string()], |_| Ok(()))
        .optional()?
        .is_some();
    if held {
        return Ok(());
    }
    let ahead = back(p, sql, &key)?;
    let id_text = id.to_string();
    p.get(&sql.key_join)?.execute(params![id_text, ahead])?;
    joined(p, sql, &key, &id_text)?;
    if ahead.is_some() {
        p.get(&sql.key_undue)?.execute([id.to_string()])?;
        p.get(&sql.waiting_delete)?.execute([id.to_string()])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads, through `key_next`, the event behind `d`: a row with `status`, due time `due`,
    /// delivery time `deliver_at` and publish time 100.
    fn read(status: &str, due: Option<i64>, deliver_at: Option<i64>) -> Result<Head> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(
            "CREATE TABLE durabus_events (id TEXT PRIMARY KEY, type TEXT, payload TEXT,
                 status TEXT, retry_count INTEGER DEFAULT 0, last_error TEXT, metadata TEXT,
                 delivered TEXT, created_at INTEGER, updated_at INTEGER, next_attempt_at INTEGER,
                 dlq_at INTEGER, dlq_count INTEGER DEFAULT 0, priority INTEGER DEFAULT 0,
                 deliver_at INTEGER, cancelled TEXT, cancel_requested INTEGER DEFAULT 0,
                 ordering_key TEXT, key_queued INTEGER, key_prev TEXT)",
        )?;
        conn.execute(
            "INSERT INTO durabus_events (id, type, payload, status, created_at, updated_at,
                 next_attempt_at, deliver_at, ordering_key, key_queued, key_prev)
             VALUES (?1, 't', '{}', ?2, 100, 100, ?3, ?4, 'k', 1, 'd')",
            params![EventId::new().to_string(), status, due, deliver_at],
        )?;
        let sql = Sql::default_tables();
        Ok(conn.prepare(&sql.key_next)?.query_row(["d"], head_of)?)
    }

    #[test]
    fn a_waiting_head_wakes_pending_at_its_publish_time_or_scheduled_at_its_delivery_time()
    -> Result<()> {
        let now = Timestamp(1_000);
        assert_eq!(
            woken(&read("pending", None, None)?, now),
            Some((EventStatus::Pending, 100))
        );
        // Delivery time passed while it waited: due now, in publish order.
        assert_eq!(
            woken(&read("scheduled", None, Some(900))?, now),
            Some((EventStatus::Pending, 100))
        );
        assert_eq!(
            woken(&read("scheduled", None, Some(5_000))?, now),
            Some((EventStatus::Scheduled, 5_000))
        );
        Ok(())
    }

    #[test]
    fn only_a_pending_or_scheduled_head_without_a_due_time_waits() -> Result<()> {
        for status in [EventStatus::Pending, EventStatus::Scheduled] {
            assert!(read(status.as_str(), None, None)?.waiting, "{status:?}");
        }
        // Already due (a retry), running, dead or cancelled: it stays as it is.
        assert!(!read(EventStatus::Pending.as_str(), Some(5), None)?.waiting);
        for status in [
            EventStatus::Processing,
            EventStatus::Dlq,
            EventStatus::Cancelled,
        ] {
            let h = read(status.as_str(), None, None)?;
            assert!(!h.waiting, "{status:?}");
            assert_eq!(woken(&h, Timestamp(1_000)), None, "{status:?}");
        }
        Ok(())
    }
}

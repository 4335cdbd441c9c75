//! Event row writers shared by the SQLite store's capability files: the hot path (`events.rs`),
//! operations (`operations.rs`), the dead-letter writers (`dead_letter_writes.rs`) and the
//! outbox all insert through these, each inside its own transaction; this file imports none
//! of them.

use rusqlite::{Connection, params};

use super::prepared::Prepared;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::Stored;

/// Inserts `events` with `status` on `conn` (the writer's transaction, or an application's for
/// the outbox), skipping ids already stored and dedup keys taken: one [`Stored`] per event.
pub(crate) fn insert_events(
    conn: &Connection,
    sql: &Sql,
    events: &[NewEvent],
    status: EventStatus,
    now: Timestamp,
) -> Result<Vec<Stored>> {
    let metadata = metadata_texts(events)?;
    insert_marking(conn, sql, events, &metadata, status, now, |_| false)
}

/// Each event's metadata as the JSON text its row stores (`None` for none). The hot path
/// writes it out before its insert reaches the writer's thread, which every write shares.
pub(crate) fn metadata_texts(events: &[NewEvent]) -> Result<Vec<Option<String>>> {
    events.iter().map(NewEvent::metadata_json).collect()
}

/// [`insert_events`] with the events' [`metadata_texts`], marking the events for which `shared`
/// says their `published` snapshot is their own stored payload.
pub(super) fn insert_marking(
    conn: &Connection,
    sql: &Sql,
    events: &[NewEvent],
    metadata: &[Option<String>],
    status: EventStatus,
    now: Timestamp,
    shared: impl Fn(EventId) -> bool,
) -> Result<Vec<Stored>> {
    let now_ms = now.as_millis();
    let mut stmt = conn.prepare_cached(&sql.insert)?;
    // The statements of keys and lanes, taken once for the batch.
    let mut p = Prepared::new(conn);
    let mut inserted = Vec::with_capacity(events.len());
    if metadata.len() != events.len() {
        // Never by construction (every caller takes them from `metadata_texts(events)`); a
        // zip would drop the events past the shorter list.
        return Err(Error::invalid(
            "metadata",
            format!("{} texts for {} events", metadata.len(), events.len()),
            "one text per event",
        ));
    }
    for (e, metadata) in events.iter().zip(metadata) {
        if let Some(first) = super::dedup::holder(conn, sql, e, now)? {
            inserted.push(Stored::Duplicate(first));
            continue;
        }
        // A scheduled event waits for its time whatever `status` the caller asked for; an
        // event with an ordering key is never stored claimed (its key may be busy).
        let key = e.options.ordering_key_value();
        let status = match (key, status) {
            (Some(_), EventStatus::Processing) => EventStatus::Pending,
            (_, status) => status,
        };
        let scheduled = e.due_at(now);
        let (status, mut due) = match scheduled {
            Some(at) => (EventStatus::Scheduled, Some(at.as_millis())),
            None => (status, (status == EventStatus::Pending).then_some(now_ms)),
        };
        // Its place in its key's queue; behind unfinished events of its key, it waits with no
        // due time, in no lane.
        let back = match key {
            Some(k) => super::keys::back(&mut p, sql, k)?,
            None => None,
        };
        let behind = back.is_some();
        let key_queued = key.map(|_| 1);
        if behind {
            due = None;
        }
        let priority = e.options.priority_value();
        // Its lane in the waiting table, if any: 1 scheduled, 2 pending with a priority.
        let lane = match status {
            _ if behind => None,
            EventStatus::Scheduled => Some(1),
            EventStatus::Pending if priority != 0 => Some(2),
            _ => None,
        };
        let id = e.id.to_string();
        let n = stmt.execute(params![
            id,
            e.event_type,
            e.payload,
            status.as_str(),
            metadata,
            now_ms,
            due,
            shared(e.id).then_some(1),
            priority,
            scheduled.map(Timestamp::as_millis),
            key,
            key_queued,
            back
        ])?;
        if let (1, Some(lane), Some(due)) = (n, lane, due) {
            p.get(&sql.waiting_put)?
                .execute(params![id, lane, priority, due])?;
        }
        if n == 1 {
            if let Some(k) = key {
                super::keys::joined(&mut p, sql, k, &id)?;
            }
            super::dedup::take(conn, sql, e, now)?;
        }
        inserted.push(if n == 1 { Stored::New } else { Stored::Known });
    }
    Ok(inserted)
}

/// Runs one of the waiting table's statements that take an event's id alone.
pub(super) fn waiting(conn: &Connection, statement: &str, id: EventId) -> Result<()> {
    conn.prepare_cached(statement)?.execute([id.to_string()])?;
    Ok(())
}

/// The snapshots of the events that were stored.
pub(super) fn of_stored<'a>(
    snapshots: &'a [NewSnapshot],
    ids: impl Iterator<Item = EventId> + Clone + 'a,
) -> impl Iterator<Item = &'a NewSnapshot> {
    snapshots
        .iter()
        .filter(move |s| ids.clone().any(|id| id == s.event_id))
}

/// Inserts `events` with `status` and, for those that were stored, their `snapshots` (a shared
/// snapshot is a mark on the event's row, not a row of its own): one flag per event, `true`
/// when it was stored. The hot path's insert and the outbox both write through this.
pub(crate) fn insert_with_snapshots(
    conn: &Connection,
    sql: &Sql,
    events: &[NewEvent],
    metadata: &[Option<String>],
    snapshots: &[NewSnapshot],
    status: EventStatus,
    now: Timestamp,
) -> Result<Vec<Stored>> {
    let stored = if snapshots.iter().any(|s| s.shared) {
        let shared: std::collections::HashSet<EventId> = snapshots
            .iter()
            .filter(|s| s.shared)
            .map(|s| s.event_id)
            .collect();
        insert_marking(conn, sql, events, metadata, status, now, |id| {
            shared.contains(&id)
        })?
    } else {
        insert_marking(conn, sql, events, metadata, status, now, |_| false)?
    };
    let mut own = snapshots.iter().filter(|s| !s.shared).peekable();
    if own.peek().is_some() {
        let ids = events
            .iter()
            .zip(&stored)
            .filter(|(_, s)| s.is_new())
            .map(|(e, _)| e.id);
        if stored.iter().all(|s| s.is_new()) {
            // The usual case: every event is new, so every snapshot is written.
            super::payloads::put(conn, sql, own)?;
        } else {
            let own: Vec<NewSnapshot> = own.cloned().collect();
            super::payloads::put(conn, sql, of_stored(&own, ids))?;
        }
    }
    Ok(stored)
}

//! Row writers shared by the SQLite store's capability files: events, and dead-letter records
//! with their groups. The hot path (`events.rs`), the dead-letter queue (`dead_letters.rs`),
//! operations (`operations.rs`) and the outbox all write through these, each inside its own
//! transaction; this file imports none of them.

use rusqlite::{Connection, OptionalExtension, params};

use super::dead_letter_rows::{dead_letter_from_row, status, ts};
use super::rows::json_list;
use super::sql::Sql;
use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::dlq::{
    Action, Change, DeadLetter, DeadLetterFilter, DeadLetterStatus, Death, ErrorRound, Existing,
    GROUP_TYPES_LISTED, GroupDelta, Head, State, apply, group_delta, plan_death,
};
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::Stored;
use crate::store::recovery::requeue;

/// Inserts `events` with `status` on `conn` (the writer's transaction, or an application's for
/// the outbox), skipping ids already stored and dedup keys taken: one [`Stored`] per event.
pub(crate) fn insert_events(
    conn: &Connection,
    sql: &Sql,
    events: &[NewEvent],
    status: EventStatus,
    now: Timestamp,
) -> Result<Vec<Stored>> {
    insert_marking(conn, sql, events, status, now, |_| false)
}

/// [`insert_events`], marking the events for which `shared` says their `published` snapshot is
/// their own stored payload.
pub(super) fn insert_marking(
    conn: &Connection,
    sql: &Sql,
    events: &[NewEvent],
    status: EventStatus,
    now: Timestamp,
    shared: impl Fn(EventId) -> bool,
) -> Result<Vec<Stored>> {
    let now_ms = now.as_millis();
    let mut stmt = conn.prepare_cached(&sql.insert)?;
    let mut inserted = Vec::with_capacity(events.len());
    for e in events {
        if let Some(first) = super::dedup::holder(conn, sql, e, now)? {
            inserted.push(Stored::Duplicate(first));
            continue;
        }
        let metadata = if e.metadata.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&e.metadata)
                    .map_err(|err| Error::unserialisable("metadata", &err))?,
            )
        };
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
        // Behind unfinished events of its key: it waits with no due time, in no lane.
        let behind = match key {
            Some(k) => super::keys::busy(conn, sql, k)?,
            None => false,
        };
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
            key
        ])?;
        if let (1, Some(lane), Some(due)) = (n, lane, due) {
            conn.prepare_cached(&sql.waiting_put)?
                .execute(params![id, lane, priority, due])?;
        }
        if n == 1 {
            super::dedup::take(conn, sql, e, now)?;
            if let Some(k) = key {
                super::keys::join(conn, sql, k, e.id)?;
            }
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
        insert_marking(conn, sql, events, status, now, |id| shared.contains(&id))?
    } else {
        insert_events(conn, sql, events, status, now)?
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

fn state_of(d: &DeadLetter, rounds: u32) -> State {
    State {
        status: d.status,
        auto_retry_count: d.auto_retry_count,
        manual_retry_count: d.manual_retry_count,
        next_auto_retry_at: d.next_auto_retry_at,
        created_at: d.created_at,
        last_retry_at: d.last_retry_at,
        last_retry_by: d.last_retry_by.clone(),
        resolved_at: d.resolved_at,
        resolved_by: d.resolved_by.clone(),
        resolution_note: d.resolution_note.clone(),
        rounds,
        round_started: false,
    }
}

/// One record and its round count, inside the writer's transaction.
fn load(conn: &Connection, sql: &Sql, id: EventId) -> Result<Option<(DeadLetter, u32)>> {
    Ok(conn
        .prepare_cached(&sql.dl_get)?
        .query_row([id.to_string()], |r| {
            Ok((dead_letter_from_row(r)?, r.get::<_, u32>(21)?))
        })
        .optional()?)
}

fn history_json(history: &[ErrorRound]) -> Result<String> {
    serde_json::to_string(history).map_err(|e| Error::unserialisable("an error history", &e))
}

fn adjust(conn: &Connection, sql: &Sql, d: &GroupDelta) -> Result<()> {
    if d.count == 0 && d.open == 0 {
        return Ok(());
    }
    conn.prepare_cached(&sql.group_adjust)?
        .execute(params![d.fingerprint, d.count, d.open])?;
    if d.count < 0 {
        conn.prepare_cached(&sql.group_prune)?
            .execute([&d.fingerprint])?;
    }
    Ok(())
}

/// Writes the record of event `id`, which just died: a new record, or a new round of its
/// existing one; its group; and, for a new record, the `system.dead_letter` event.
pub(super) fn write_death(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    death: &Death,
    now: Timestamp,
) -> Result<()> {
    let ops = sql;
    let existing = load(conn, ops, id)?.map(|(d, rounds)| Existing {
        state: state_of(&d, rounds),
        fingerprint: d.fingerprint,
        history: d.error_history,
    });
    let fresh = existing.is_none();
    let plan = plan_death(existing, death, now);
    let s = &plan.state;
    let causes = json_list(&death.causes)?;
    let history = history_json(&plan.history)?;
    if fresh {
        conn.prepare_cached(&ops.dl_insert)?.execute(params![
            id.to_string(),
            death.subscription,
            death.error,
            causes,
            history,
            death.fingerprint,
            death.attempts,
            s.status.as_str(),
            s.auto_retry_count,
            s.manual_retry_count,
            s.next_auto_retry_at.map(Timestamp::as_millis),
            now.as_millis(),
            s.last_retry_at.map(Timestamp::as_millis),
            s.last_retry_by,
            s.resolved_at.map(Timestamp::as_millis),
            s.resolved_by,
            s.resolution_note,
            s.rounds,
        ])?;
    } else {
        conn.prepare_cached(&ops.dl_died_again)?.execute(params![
            id.to_string(),
            death.subscription,
            death.error,
            causes,
            history,
            death.fingerprint,
            death.attempts,
            s.status.as_str(),
            s.next_auto_retry_at.map(Timestamp::as_millis),
            s.rounds,
            now.as_millis(),
        ])?;
    }
    if let Some(old) = &plan.old_group {
        adjust(conn, ops, old)?;
    }
    let new_group = death.new_group.is_some()
        && !conn
            .prepare_cached(&ops.group_exists)?
            .query_row(params![death.fingerprint], |r| r.get::<_, bool>(0))?;
    conn.prepare_cached(&ops.group_upsert)?.execute(params![
        death.fingerprint,
        death.subscription,
        death.signature,
        death.error,
        plan.group.count,
        plan.group.open,
        now.as_millis(),
        death.event_type,
        GROUP_TYPES_LISTED as i64,
    ])?;
    // Announced when the record is created, not again at each later round.
    if fresh && let Some(announcement) = &death.announcement {
        insert_events(
            conn,
            sql,
            std::slice::from_ref(announcement),
            EventStatus::Pending,
            now,
        )?;
    }
    // And a group when this death created it.
    if new_group && let Some(event) = &death.new_group {
        insert_events(
            conn,
            sql,
            std::slice::from_ref(event),
            EventStatus::Pending,
            now,
        )?;
    }
    Ok(())
}

fn set_state(conn: &Connection, ops: &Sql, id: EventId, s: &State, now: Timestamp) -> Result<()> {
    conn.prepare_cached(&ops.dl_set_state)?.execute(params![
        id.to_string(),
        s.status.as_str(),
        s.auto_retry_count,
        s.manual_retry_count,
        s.next_auto_retry_at.map(Timestamp::as_millis),
        s.last_retry_at.map(Timestamp::as_millis),
        s.last_retry_by,
        s.resolved_at.map(Timestamp::as_millis),
        s.resolved_by,
        s.resolution_note,
        s.rounds,
        now.as_millis(),
    ])?;
    Ok(())
}

/// A revived dead letter was delivered: its record is resolved by whoever sent it back.
pub(super) fn write_delivered(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    now: Timestamp,
) -> Result<()> {
    let ops = sql;
    let Some((d, rounds)) = load(conn, ops, id)? else {
        return Ok(());
    };
    if d.status != DeadLetterStatus::Retrying {
        return Ok(());
    }
    let after = state_of(&d, rounds).delivered(now);
    set_state(conn, ops, id, &after, now)?;
    adjust(
        conn,
        ops,
        &group_delta(&d.fingerprint, Some(d.status), Some(after.status)),
    )
}

/// What an action needs of a record: its lifecycle, its group, and what a selection looks at.
struct Locked {
    state: State,
    fingerprint: String,
    event_type: String,
    subscription: Option<String>,
}

/// A record's lifecycle, group and selection fields, inside the writer's transaction.
fn load_state(conn: &Connection, sql: &Sql, id: EventId) -> Result<Option<Locked>> {
    Ok(conn
        .prepare_cached(&sql.dl_state)?
        .query_row([id.to_string()], |r| {
            Ok(Locked {
                state: State {
                    status: status(r, 0)?,
                    auto_retry_count: r.get(1)?,
                    manual_retry_count: r.get(2)?,
                    next_auto_retry_at: ts(r.get(3)?),
                    created_at: Timestamp(r.get(4)?),
                    last_retry_at: ts(r.get(5)?),
                    last_retry_by: r.get(6)?,
                    resolved_at: ts(r.get(7)?),
                    resolved_by: r.get(8)?,
                    resolution_note: r.get(9)?,
                    rounds: r.get(10)?,
                    round_started: r.get::<_, Option<String>>(14)?.as_deref()
                        == Some(EventStatus::Processing.as_str()),
                },
                fingerprint: r.get(11)?,
                event_type: r.get(12)?,
                subscription: r.get(13)?,
            })
        })
        .optional()?)
}

/// Applies `action` by `actor` to the record of `id` inside the writer's transaction, under
/// the rules of [`apply`]; a record that no longer matches `still_matching` is refused with
/// [`Error::Conflict`], one that is gone with [`Error::NotFound`]. Returns whether the event
/// went back for delivery.
pub(super) fn apply_action(
    conn: &Connection,
    sql: &Sql,
    id: EventId,
    action: &Action,
    actor: &Actor,
    still_matching: Option<&DeadLetterFilter>,
    now: Timestamp,
) -> Result<bool> {
    let ops = sql;
    let locked = load_state(conn, ops, id)?.ok_or_else(|| Error::NotFound {
        what: format!("dead letter {id}"),
    })?;
    let (before, fingerprint) = (&locked.state, &locked.fingerprint);
    if let Some(filter) = still_matching {
        let head = Head {
            status: before.status,
            event_type: &locked.event_type,
            subscription: locked.subscription.as_deref(),
            fingerprint,
            created_at: before.created_at,
        };
        filter.check(id, &head)?;
    }
    match apply(id, before, action, actor, now)? {
        Change::Update {
            state,
            requeue: send,
            withdraw,
        } => {
            if withdraw {
                let n = conn
                    .prepare_cached(&ops.dl_withdraw)?
                    .execute(params![id.to_string(), now.as_millis()])?;
                if n != 1 {
                    return Err(picked_up(id, before.status));
                }
                waiting(conn, &ops.waiting_delete, id)?;
                // Out of delivery again: out of its key's queue too.
                super::keys::leave(conn, sql, id, now)?;
            }
            if send {
                let reset = requeue();
                let n = conn.prepare_cached(&ops.dl_requeue)?.execute(params![
                    id.to_string(),
                    now.as_millis(),
                    reset.retry_count,
                    reset.clear_errors
                ])?;
                // Back to pending: with a priority, it waits in lane 2; with an ordering key,
                // it runs as its key's head or waits in the key's queue.
                waiting(conn, &ops.waiting_pending, id)?;
                super::keys::rejoin(conn, sql, id)?;
                if n != 1 {
                    return Err(Error::Conflict {
                        what: format!("dead letter {id}"),
                        status: before.status.as_str().to_owned(),
                        message: format!(
                            "dead letter {id} cannot be retried: its event is no longer in the dead-letter queue"
                        ),
                    });
                }
            }
            set_state(conn, ops, id, &state, now)?;
            if matches!(
                state.status,
                DeadLetterStatus::Resolved | DeadLetterStatus::Abandoned
            ) {
                // Closed: a key it held moves on.
                super::keys::leave(conn, sql, id, now)?;
            }
            adjust(
                conn,
                ops,
                &group_delta(fingerprint, Some(before.status), Some(state.status)),
            )?;
            Ok(send)
        }
        Change::Delete => {
            super::keys::leave(conn, sql, id, now)?;
            conn.prepare_cached(&ops.dl_delete)?
                .execute([id.to_string()])?;
            delete_dead_event(conn, sql, id)?;
            adjust(
                conn,
                ops,
                &group_delta(fingerprint, Some(before.status), None),
            )?;
            Ok(false)
        }
    }
}

/// Deletes the row of event `id` if it is still dead, its shared `published` snapshot kept
/// as a row of its own first. Returns whether it was deleted.
pub(super) fn delete_dead_event(conn: &Connection, sql: &Sql, id: EventId) -> Result<bool> {
    super::payloads::keep_shared(conn, sql, &id.to_string())?;
    Ok(conn
        .prepare_cached(&sql.dl_delete_event)?
        .execute([id.to_string()])?
        == 1)
}

/// The refusal of a retry called off too late: a worker picked the event up meanwhile.
pub(super) fn picked_up(id: EventId, status: crate::dlq::DeadLetterStatus) -> Error {
    Error::Conflict {
        what: format!("dead letter {id}"),
        status: status.as_str().to_owned(),
        message: format!(
            "dead letter {id} is {status} and a worker picked its event up meanwhile: wait for that round to end"
        ),
    }
}

//! Dead-letter record writers of the SQLite store, with their failure groups: a death, a
//! delivery that closes a record, an operator's action, a purge. The hot path (`events.rs`),
//! the dead-letter queue (`dead_letters.rs`) and the migration backfill write through these,
//! each inside its own transaction.

use rusqlite::{Connection, OptionalExtension, params};

use super::dead_letter_rows::{dead_letter_from_row, status, ts};
use super::row_writes::{insert_events, waiting};
use super::rows::json_list;
use super::sql::Sql;
use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::dlq::{
    Action, Change, DeadLetter, DeadLetterFilter, DeadLetterStatus, Death, ErrorRound, Existing,
    GROUP_TYPES_LISTED, GroupDelta, Head, State, apply, group_delta, plan_death,
};
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus};
use crate::store::recovery::requeue;

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
/// [`Error::Conflict`], one that is gone with [`Error::NotFound`]. Returns whether an event
/// may have become due: this one went back for delivery, or the next event of a key it held
/// or waited in moved up.
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
            let mut woke = false;
            if withdraw {
                let n = conn
                    .prepare_cached(&ops.dl_withdraw)?
                    .execute(params![id.to_string(), now.as_millis()])?;
                if n != 1 {
                    return Err(picked_up(id, before.status));
                }
                waiting(conn, &ops.waiting_delete, id)?;
                // Out of delivery again: out of its key's queue too.
                woke |=
                    super::keys::leave(&mut super::prepared::Prepared::new(conn), sql, id, now)?;
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
                super::keys::rejoin(&mut super::prepared::Prepared::new(conn), sql, id)?;
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
                woke |=
                    super::keys::leave(&mut super::prepared::Prepared::new(conn), sql, id, now)?;
            }
            adjust(
                conn,
                ops,
                &group_delta(fingerprint, Some(before.status), Some(state.status)),
            )?;
            Ok(send || woke)
        }
        Change::Delete => {
            let woke = super::keys::leave(&mut super::prepared::Prepared::new(conn), sql, id, now)?;
            conn.prepare_cached(&ops.dl_delete)?
                .execute([id.to_string()])?;
            delete_dead_event(conn, sql, id)?;
            adjust(
                conn,
                ops,
                &group_delta(fingerprint, Some(before.status), None),
            )?;
            Ok(woke)
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

//! Dead-letter record writers on PostgreSQL, with their failure groups: a death and a
//! delivery that closes a record, each in the transaction of the outcome that causes it.

use sqlx::{PgConnection, Row};

use super::dead_letter_rows::{i32_of, lock, state_of};
use super::insert::{Notice, Rows, insert_rows};
use super::sql::PgSql;
use super::sql_ops::PgOpsSql;
use super::{json_list, q};
use crate::clock::Timestamp;
use crate::dlq::{
    DeadLetterStatus, Death, ErrorRound, Existing, GROUP_TYPES_LISTED, GroupDelta, State,
    group_delta, plan_death,
};
use crate::error::{Error, Result};
use crate::event::EventId;

pub(super) async fn adjust(conn: &mut PgConnection, ops: &PgOpsSql, d: &GroupDelta) -> Result<()> {
    if d.count == 0 && d.open == 0 {
        return Ok(());
    }
    q(&ops.group_adjust)
        .bind(&d.fingerprint)
        .bind(d.count)
        .bind(d.open)
        .execute(&mut *conn)
        .await?;
    if d.count < 0 {
        q(&ops.group_prune)
            .bind(&d.fingerprint)
            .execute(conn)
            .await?;
    }
    Ok(())
}

pub(super) fn history_json(history: &[ErrorRound]) -> Result<String> {
    serde_json::to_string(history).map_err(|e| Error::unserialisable("an error history", &e))
}

/// Writes the record of event `id`, which just died in the caller's transaction: a new record
/// or a new round of its existing one; its group; for a new record, the `system.dead_letter`
/// event (its `NOTIFY` goes out on commit).
pub(super) async fn write_death(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    id: EventId,
    death: &Death,
    now: Timestamp,
) -> Result<()> {
    let ops = &sql.ops;
    let existing = lock(&mut *conn, ops, id)
        .await?
        .map(|(d, rounds)| Existing {
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
        q(&ops.dl_insert)
            .bind(id.0)
            .bind(&death.subscription)
            .bind(&death.error)
            .bind(causes)
            .bind(history)
            .bind(&death.fingerprint)
            .bind(i32_of(death.attempts))
            .bind(s.status.as_str())
            .bind(i32_of(s.auto_retry_count))
            .bind(i32_of(s.manual_retry_count))
            .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
            .bind(now.as_millis())
            .bind(s.last_retry_at.map(Timestamp::as_millis))
            .bind(&s.last_retry_by)
            .bind(s.resolved_at.map(Timestamp::as_millis))
            .bind(&s.resolved_by)
            .bind(&s.resolution_note)
            .bind(i32_of(s.rounds))
            .execute(&mut *conn)
            .await?;
    } else {
        q(&ops.dl_died_again)
            .bind(id.0)
            .bind(&death.subscription)
            .bind(&death.error)
            .bind(causes)
            .bind(history)
            .bind(&death.fingerprint)
            .bind(i32_of(death.attempts))
            .bind(s.status.as_str())
            .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
            .bind(i32_of(s.rounds))
            .bind(now.as_millis())
            .execute(&mut *conn)
            .await?;
    }
    if let Some(old) = &plan.old_group {
        adjust(&mut *conn, ops, old).await?;
    }
    // `inserted`: this death created the group (read from the row's `xmax`, so two workers
    // racing on one new fingerprint announce it once).
    let inserted: bool = q(&ops.group_upsert)
        .bind(&death.fingerprint)
        .bind(&death.subscription)
        .bind(&death.signature)
        .bind(&death.error)
        .bind(plan.group.count)
        .bind(plan.group.open)
        .bind(now.as_millis())
        .bind(&death.event_type)
        .bind(GROUP_TYPES_LISTED as i32)
        .fetch_one(&mut *conn)
        .await?
        .try_get("inserted")?;
    // Announced when the record is created, not again at each later round.
    if fresh && let Some(a) = &death.announcement {
        let rows = Rows {
            events: vec![a],
            created: vec![now.as_millis()],
            snapshots: Vec::new(),
            parked: Vec::new(),
        };
        insert_rows(&mut *conn, sql, &rows, None, Some(Notice::to_all(channel))).await?;
    }
    // And a group when this death created it.
    if inserted && let Some(e) = &death.new_group {
        let rows = Rows {
            events: vec![e],
            created: vec![now.as_millis()],
            snapshots: Vec::new(),
            parked: Vec::new(),
        };
        insert_rows(conn, sql, &rows, None, Some(Notice::to_all(channel))).await?;
    }
    Ok(())
}

/// A revived dead letter was delivered (in the caller's transaction): its record is resolved
/// by whoever sent it back.
pub(super) async fn write_delivered(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
    now: Timestamp,
) -> Result<()> {
    let Some((d, rounds)) = lock(&mut *conn, ops, id).await? else {
        return Ok(());
    };
    if d.status != DeadLetterStatus::Retrying {
        return Ok(());
    }
    let after = state_of(&d, rounds).delivered(now);
    set_state(&mut *conn, ops, id, &after, now).await?;
    adjust(
        conn,
        ops,
        &group_delta(&d.fingerprint, Some(d.status), Some(after.status)),
    )
    .await
}

pub(super) async fn set_state(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
    s: &State,
    now: Timestamp,
) -> Result<()> {
    q(&ops.dl_set_state)
        .bind(id.0)
        .bind(s.status.as_str())
        .bind(i32_of(s.auto_retry_count))
        .bind(i32_of(s.manual_retry_count))
        .bind(s.next_auto_retry_at.map(Timestamp::as_millis))
        .bind(s.last_retry_at.map(Timestamp::as_millis))
        .bind(&s.last_retry_by)
        .bind(s.resolved_at.map(Timestamp::as_millis))
        .bind(&s.resolved_by)
        .bind(&s.resolution_note)
        .bind(i32_of(s.rounds))
        .bind(now.as_millis())
        .execute(conn)
        .await?;
    Ok(())
}

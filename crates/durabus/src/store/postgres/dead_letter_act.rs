//! Acting on dead-letter records on PostgreSQL, set-based: lock and read many records in one
//! statement, decide each with [`crate::dlq::apply`], write the results in a few.

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::dead_letter_rows::{i32_of, opt_ts, u32_col};
use super::q;
use super::sql_ops::PgOpsSql;
use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::dlq::{Action, Change, DeadLetterFilter, Head, State, apply, group_delta, sum_deltas};
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventId;
use crate::store::recovery::requeue;

/// A record locked for an action: its lifecycle, its group, and what a selection looks at.
pub(super) struct Locked {
    pub(super) id: EventId,
    pub(super) state: State,
    pub(super) fingerprint: String,
    pub(super) event_type: String,
    pub(super) subscription: Option<String>,
}

/// What acting on many records did.
#[derive(Default)]
pub(super) struct Many {
    /// Records acted on.
    pub(super) processed: u64,
    /// Records passed over, with why.
    pub(super) skipped: Vec<(EventId, Error)>,
    /// Whether events went back for delivery.
    pub(super) requeued: bool,
    /// Events sent back for delivery: an ordering key they had takes them back.
    pub(super) rejoin: Vec<EventId>,
    /// Events out of delivery for good (closed, purged, a retry called off): a key they held
    /// moves on.
    pub(super) leave: Vec<EventId>,
}

pub(super) fn opt_i64(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_millis)
}

/// Applies `action` by `actor` to the records of `ids` in the caller's transaction, set-based:
/// the records are locked and read in one statement, [`apply`] decides each in Rust, and the
/// writes go out as one statement each (requeue, new lifecycles, deletes, group counts).
/// Records whose state does not allow the action, that no longer match `still_matching`, or
/// that are gone are skipped with the reason.
pub(super) async fn act_many(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    ids: &[EventId],
    action: &Action,
    actor: &Actor,
    still_matching: Option<&DeadLetterFilter>,
    now: Timestamp,
) -> Result<Many> {
    let mut many = Many::default();
    if ids.is_empty() {
        return Ok(many);
    }
    let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
    let locked: Vec<Locked> = q(&ops.dl_lock_states)
        .bind(&raw)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| {
            Ok(Locked {
                id: EventId(r.try_get::<Uuid, _>("event_id")?),
                state: State {
                    status: r.try_get::<String, _>("status")?.parse()?,
                    auto_retry_count: u32_col(r, "auto_retry_count")?,
                    manual_retry_count: u32_col(r, "manual_retry_count")?,
                    next_auto_retry_at: opt_ts(r, "next_auto_retry_at")?,
                    created_at: Timestamp(r.try_get("created_at")?),
                    last_retry_at: opt_ts(r, "last_retry_at")?,
                    last_retry_by: r.try_get("last_retry_by")?,
                    resolved_at: opt_ts(r, "resolved_at")?,
                    resolved_by: r.try_get("resolved_by")?,
                    resolution_note: r.try_get("resolution_note")?,
                    rounds: u32_col(r, "rounds")?,
                    round_started: r.try_get::<Option<String>, _>("event_status")?.as_deref()
                        == Some("processing"),
                },
                fingerprint: r.try_get("fingerprint")?,
                event_type: r.try_get("event_type")?,
                subscription: r.try_get("subscription")?,
            })
        })
        .collect::<Result<_>>()?;
    let found: std::collections::HashSet<EventId> = locked.iter().map(|l| l.id).collect();
    for id in ids {
        if !found.contains(id) {
            many.skipped.push((
                *id,
                Error::NotFound {
                    what: format!("dead letter {id}"),
                },
            ));
        }
    }
    let mut updates: Vec<(Locked, State, bool)> = Vec::new();
    let mut withdrawn: Vec<EventId> = Vec::new();
    let mut deletes: Vec<Locked> = Vec::new();
    for l in locked {
        let head = Head {
            status: l.state.status,
            event_type: &l.event_type,
            subscription: l.subscription.as_deref(),
            fingerprint: &l.fingerprint,
            created_at: l.state.created_at,
        };
        if let Some(Err(e)) = still_matching.map(|f| f.check(l.id, &head)) {
            many.skipped.push((l.id, e));
            continue;
        }
        match apply(l.id, &l.state, action, actor, now) {
            Ok(Change::Update {
                state,
                requeue,
                withdraw,
            }) => {
                if withdraw {
                    withdrawn.push(l.id);
                }
                updates.push((l, state, requeue))
            }
            Ok(Change::Delete) => deletes.push(l),
            Err(e) if e.kind() == ErrorKind::Conflict => many.skipped.push((l.id, e)),
            Err(e) => return Err(e),
        }
    }
    if !withdrawn.is_empty() {
        // A retry called off: its event leaves delivery only if no worker picked it up.
        let raw: Vec<Uuid> = withdrawn.iter().map(|i| i.0).collect();
        let back: Vec<Uuid> = q(&ops.dl_withdraw_many)
            .bind(&raw)
            .bind(now.as_millis())
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| r.try_get::<Uuid, _>(0))
            .collect::<std::result::Result<_, _>>()?;
        many.leave.extend(back.iter().map(|id| EventId(*id)));
        let (kept, lost): (Vec<_>, Vec<_>) = updates
            .into_iter()
            .partition(|(l, _, _)| !withdrawn.contains(&l.id) || back.contains(&l.id.0));
        updates = kept;
        for (l, _, _) in lost {
            let e = Error::Conflict {
                what: format!("dead letter {}", l.id),
                status: l.state.status.as_str().to_owned(),
                message: format!(
                    "dead letter {} is {} and a worker picked its event up meanwhile: wait for that round to end",
                    l.id, l.state.status
                ),
            };
            many.skipped.push((l.id, e));
        }
    }
    let send: Vec<Uuid> = updates
        .iter()
        .filter(|(_, _, r)| *r)
        .map(|(l, _, _)| l.id.0)
        .collect();
    if !send.is_empty() {
        let reset = requeue();
        // Each event sent back, and whether it has an ordering key: only those rejoin a key,
        // so a chunk without keyed events makes no lookup of keys.
        let sent: Vec<(Uuid, bool)> = q(&ops.dl_requeue_many)
            .bind(&send)
            .bind(now.as_millis())
            .bind(i32_of(reset.retry_count))
            .bind(reset.clear_errors)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(|r| Ok((r.try_get::<Uuid, _>(0)?, r.try_get::<bool, _>(1)?)))
            .collect::<std::result::Result<_, sqlx::Error>>()?;
        many.requeued = !sent.is_empty();
        many.rejoin = sent
            .iter()
            .filter(|(_, keyed)| *keyed)
            .map(|(id, _)| EventId(*id))
            .collect();
        let sent: std::collections::HashSet<Uuid> = sent.into_iter().map(|(id, _)| id).collect();
        let (kept, lost): (Vec<_>, Vec<_>) = updates
            .into_iter()
            .partition(|(l, _, r)| !*r || sent.contains(&l.id.0));
        updates = kept;
        for (l, _, _) in lost {
            let e = Error::Conflict {
                what: format!("dead letter {}", l.id),
                status: l.state.status.as_str().to_owned(),
                message: format!(
                    "dead letter {} cannot be retried: its event is no longer in the dead-letter queue",
                    l.id
                ),
            };
            many.skipped.push((l.id, e));
        }
    }
    if !updates.is_empty() {
        let col = |f: &dyn Fn(&State) -> Option<i64>| -> Vec<Option<i64>> {
            updates.iter().map(|(_, s, _)| f(s)).collect()
        };
        let text = |f: &dyn Fn(&State) -> Option<String>| -> Vec<Option<String>> {
            updates.iter().map(|(_, s, _)| f(s)).collect()
        };
        q(&ops.dl_set_states)
            .bind(updates.iter().map(|(l, _, _)| l.id.0).collect::<Vec<_>>())
            .bind(
                updates
                    .iter()
                    .map(|(_, s, _)| s.status.as_str())
                    .collect::<Vec<_>>(),
            )
            .bind(
                updates
                    .iter()
                    .map(|(_, s, _)| i32_of(s.auto_retry_count))
                    .collect::<Vec<_>>(),
            )
            .bind(
                updates
                    .iter()
                    .map(|(_, s, _)| i32_of(s.manual_retry_count))
                    .collect::<Vec<_>>(),
            )
            .bind(col(&|s| opt_i64(s.next_auto_retry_at)))
            .bind(col(&|s| opt_i64(s.last_retry_at)))
            .bind(text(&|s| s.last_retry_by.clone()))
            .bind(col(&|s| opt_i64(s.resolved_at)))
            .bind(text(&|s| s.resolved_by.clone()))
            .bind(text(&|s| s.resolution_note.clone()))
            .bind(
                updates
                    .iter()
                    .map(|(_, s, _)| i32_of(s.rounds))
                    .collect::<Vec<_>>(),
            )
            .bind(now.as_millis())
            .execute(&mut *conn)
            .await?;
    }
    many.leave.extend(
        updates
            .iter()
            .filter(|(_, s, _)| {
                matches!(
                    s.status,
                    crate::dlq::DeadLetterStatus::Resolved
                        | crate::dlq::DeadLetterStatus::Abandoned
                )
            })
            .map(|(l, _, _)| l.id)
            .chain(deletes.iter().map(|l| l.id)),
    );
    if !deletes.is_empty() {
        q(&ops.dl_delete_many)
            .bind(deletes.iter().map(|l| l.id.0).collect::<Vec<_>>())
            .execute(&mut *conn)
            .await?;
    }
    let deltas = sum_deltas(
        updates
            .iter()
            .map(|(l, s, _)| group_delta(&l.fingerprint, Some(l.state.status), Some(s.status)))
            .chain(
                deletes
                    .iter()
                    .map(|l| group_delta(&l.fingerprint, Some(l.state.status), None)),
            ),
    );
    if !deltas.is_empty() {
        let fps: Vec<&str> = deltas.iter().map(|d| d.fingerprint.as_str()).collect();
        q(&ops.group_adjust_many)
            .bind(&fps)
            .bind(deltas.iter().map(|d| d.count).collect::<Vec<_>>())
            .bind(deltas.iter().map(|d| d.open).collect::<Vec<_>>())
            .execute(&mut *conn)
            .await?;
        if deltas.iter().any(|d| d.count < 0) {
            q(&ops.group_prune_many)
                .bind(&fps)
                .execute(&mut *conn)
                .await?;
        }
    }
    many.processed = (updates.len() + deletes.len()) as u64;
    Ok(many)
}

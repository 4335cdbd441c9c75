//! Cancels on SQLite: the rules of [`crate::cancel`] applied in one write transaction.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::{corrupt, status_col};
use super::sql::Sql;
use crate::cancel::{CancelOutcome, CancelRequest, Cancellation, Plan, State, plan};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::store::CancelStore;

/// A JSON list column.
fn list(row: &Row<'_>, col: usize) -> rusqlite::Result<Vec<String>> {
    match row.get::<_, Option<String>>(col)? {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text).map_err(|e| corrupt(col, e.to_string())),
    }
}

fn cancellation_from_row(row: &Row<'_>) -> rusqlite::Result<Cancellation> {
    let id: String = row.get(0)?;
    let outcome: String = row.get(2)?;
    Ok(Cancellation {
        event_id: id.parse().map_err(|e: Error| corrupt(0, e.to_string()))?,
        subscription: row.get(1)?,
        outcome: CancelOutcome::parse(&outcome)
            .ok_or_else(|| corrupt(2, format!("unknown cancel outcome {outcome:?}")))?,
        actor: row.get(3)?,
        reason: row.get(4)?,
        cancelled_at: Timestamp(row.get(5)?),
    })
}

struct Cancel(CancelRequest);

impl WriteOp for Cancel {
    /// The cancellation, and whether the next event of the cancelled one's key became due.
    type Reply = (Cancellation, bool);

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Self::Reply> {
        let r = &self.0;
        let id = r.event_id.to_string();
        let state = conn
            .prepare_cached(&sql.cn_state)?
            .query_row([&id], |row| {
                Ok((
                    status_col(row, 0)?,
                    list(row, 1)?,
                    list(row, 2)?,
                    row.get::<_, bool>(3)?,
                    row.get::<_, u32>(4)?,
                ))
            })
            .optional()?
            .ok_or_else(|| Error::EventNotFound(id.clone(), ""))?;
        let (status, delivered, cancelled, cancel_requested, dlq_count) = state;
        let state = State {
            status,
            delivered: &delivered,
            cancelled: &cancelled,
            cancel_requested,
            revived: dlq_count > 0,
        };
        let planned = plan(r.event_id, state, r.subscription.as_deref())?;
        let ms = now.as_millis();
        let changed = match (&planned, &r.subscription) {
            (Plan::CancelEvent, _) => {
                conn.prepare_cached(&sql.waiting_delete)?.execute([&id])?;
                conn.prepare_cached(&sql.cn_event)?
                    .execute(params![id, ms])?
            }
            (Plan::RequestCancel, _) => conn
                .prepare_cached(&sql.cn_request)?
                .execute(params![id, ms])?,
            (Plan::CancelSubscription { .. }, Some(s)) => conn
                .prepare_cached(&sql.cn_subscription)?
                .execute(params![id, s, ms])?,
            (Plan::CancelSubscription { .. }, None) => 0,
        };
        if changed != 1 {
            return Err(Error::Internal(format!(
                "the cancel of event {id} changed {changed} rows"
            )));
        }
        // Cancelled before it ran: it leaves its ordering key's queue, and the event behind it
        // may become due.
        let woke = matches!(planned, Plan::CancelEvent)
            && super::keys::leave(
                &mut super::prepared::Prepared::new(conn),
                sql,
                r.event_id,
                now,
            )?;
        let outcome = planned.outcome();
        conn.prepare_cached(&sql.cn_insert)?.execute(params![
            id,
            r.subscription,
            outcome.as_str(),
            r.actor.name,
            r.actor.kind.as_str(),
            r.reason,
            ms
        ])?;
        let cancellation = Cancellation {
            event_id: r.event_id,
            subscription: r.subscription.clone(),
            outcome,
            actor: r.actor.name.clone(),
            reason: r.reason.clone(),
            cancelled_at: now,
        };
        Ok((cancellation, woke))
    }

    fn wakes(&self, reply: &Self::Reply) -> bool {
        reply.1
    }
}

#[async_trait]
impl CancelStore for SqliteStore {
    async fn cancel_event(&self, request: CancelRequest, now: Timestamp) -> Result<Cancellation> {
        request.validate()?;
        Ok(self.write(Cancel(request), now).await?.0)
    }

    async fn cancellations(&self, event_id: EventId) -> Result<Vec<Cancellation>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.cn_list)?
                .query_map([event_id.to_string()], cancellation_from_row)?
                .collect()
        })
        .await
    }
}

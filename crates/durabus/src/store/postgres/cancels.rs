//! Cancels on PostgreSQL: the rules of [`crate::cancel`] applied in one transaction, the event's
//! row locked while they are decided. Cancelled events stay in the live table (status
//! `cancelled`, in none of the hot path's partial indexes) until the history purge.

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use super::{PgStore, q, tx};
use crate::cancel::{CancelOutcome, CancelRequest, Cancellation, Plan, State, plan};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus};
use crate::store::CancelStore;

fn list(row: &PgRow, col: &str) -> Result<Vec<String>> {
    match row.try_get::<Option<String>, _>(col)? {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| Error::corrupt(format!("column {col} holds invalid JSON"), e)),
    }
}

fn cancellation(row: &PgRow) -> Result<Cancellation> {
    let outcome: String = row.try_get("outcome")?;
    Ok(Cancellation {
        event_id: EventId(row.try_get::<Uuid, _>("event_id")?),
        subscription: row.try_get("subscription")?,
        outcome: CancelOutcome::parse(&outcome).ok_or_else(|| {
            Error::Internal(format!("unknown cancel outcome {outcome:?} on record"))
        })?,
        actor: row.try_get("actor")?,
        reason: row.try_get("reason")?,
        cancelled_at: Timestamp(row.try_get("cancelled_at")?),
    })
}

#[async_trait]
impl CancelStore for PgStore {
    async fn cancel_event(&self, r: CancelRequest, now: Timestamp) -> Result<Cancellation> {
        r.validate()?;
        self.noted(async {
            self.check()?;
            let s = &self.sql.schema;
            let mut tx = tx::begin(&self.pool).await?;
            let row = q(&format!(
                "SELECT status, delivered, cancelled, cancel_requested, dlq_count
                 FROM {s}.events WHERE id = $1 FOR UPDATE"
            ))
            .bind(r.event_id.0)
            .fetch_optional(&mut *tx)
            .await?;
            let row = match row {
                Some(row) => row,
                None => {
                    // Not live: finished and moved to the event log, or unknown.
                    let logged = q(&format!("SELECT status FROM {s}.event_log WHERE id = $1"))
                        .bind(r.event_id.0)
                        .fetch_optional(&mut *tx)
                        .await?;
                    let Some(logged) = logged else {
                        return Err(Error::EventNotFound(r.event_id.to_string(), ""));
                    };
                    let status: String = logged.try_get("status")?;
                    let state = State {
                        status: status.parse::<EventStatus>()?,
                        delivered: &[],
                        cancelled: &[],
                        cancel_requested: false,
                        revived: false,
                    };
                    // Refused: a logged event has finished.
                    plan(r.event_id, state, r.subscription.as_deref())?;
                    return Err(Error::Internal(format!(
                        "event {} in the event log is {status}",
                        r.event_id
                    )));
                }
            };
            let status: String = row.try_get("status")?;
            let (delivered, cancelled) = (list(&row, "delivered")?, list(&row, "cancelled")?);
            let state = State {
                status: status.parse::<EventStatus>()?,
                delivered: &delivered,
                cancelled: &cancelled,
                cancel_requested: row.try_get("cancel_requested")?,
                revived: row.try_get::<i32, _>("dlq_count")? > 0,
            };
            let planned = plan(r.event_id, state, r.subscription.as_deref())?;
            let ms = now.as_millis();
            let change = match &planned {
                Plan::CancelEvent => q(&format!(
                    "UPDATE {s}.events SET status = 'cancelled', next_attempt_at = NULL,
                         updated_at = $2 WHERE id = $1"
                )),
                Plan::RequestCancel => q(&format!(
                    "UPDATE {s}.events SET cancel_requested = true, updated_at = $2 WHERE id = $1"
                )),
                Plan::CancelSubscription { .. } => q(&format!(
                    "UPDATE {s}.events SET updated_at = $2,
                         cancelled = (coalesce(cancelled::jsonb, '[]'::jsonb)
                                      || jsonb_build_array($3::text))::text
                     WHERE id = $1"
                )),
            };
            change
                .bind(r.event_id.0)
                .bind(ms)
                .bind(r.subscription.as_deref())
                .execute(&mut *tx)
                .await?;
            let outcome = planned.outcome();
            q(&format!(
                "INSERT INTO {s}.cancellations
                     (event_id, subscription, outcome, actor, actor_kind, reason, cancelled_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)"
            ))
            .bind(r.event_id.0)
            .bind(r.subscription.as_deref())
            .bind(outcome.as_str())
            .bind(&r.actor.name)
            .bind(r.actor.kind.as_str())
            .bind(&r.reason)
            .bind(ms)
            .execute(&mut *tx)
            .await?;
            if matches!(planned, Plan::CancelEvent) {
                // Cancelled before it ran: it leaves its ordering key's queue.
                super::keys::leave(&mut tx, &self.sql, &self.channel, r.event_id, ms).await?;
            }
            tx.commit().await?;
            Ok(Cancellation {
                event_id: r.event_id,
                subscription: r.subscription.clone(),
                outcome,
                actor: r.actor.name.clone(),
                reason: r.reason.clone(),
                cancelled_at: now,
            })
        })
        .await
    }

    async fn cancellations(&self, event_id: EventId) -> Result<Vec<Cancellation>> {
        self.noted(async {
            self.check()?;
            let s = &self.sql.schema;
            q(&format!(
                "SELECT event_id, subscription, outcome, actor, reason, cancelled_at
                 FROM {s}.cancellations WHERE event_id = $1 ORDER BY seq"
            ))
            .bind(event_id.0)
            .fetch_all(&mut *self.pool.acquire().await?)
            .await?
            .iter()
            .map(cancellation)
            .collect()
        })
        .await
    }
}

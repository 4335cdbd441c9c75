//! Writing outcomes, fenced by the lease token of the delivery that produced them.

use std::collections::HashSet;

use sqlx::{PgConnection, Postgres, Row, Transaction};
use uuid::Uuid;

use super::keys::KeyOp;
use super::{PgStore, json_list, q};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::EventId;
use crate::store::Outcome;

impl PgStore {
    /// Writes `outcomes` in `tx`, each only if its event still carries the token this process
    /// got when it claimed it (`tokens`, `None` when it holds none): one flag per outcome.
    /// Completions of a batch are one statement that moves the rows to the event log.
    pub(super) async fn record_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        outcomes: &[Outcome],
        tokens: &[Option<Uuid>],
        now: i64,
    ) -> Result<Vec<bool>> {
        let mut flags = vec![false; outcomes.len()];
        // Changes to ordering keys' queues, made at the end in the keys' order.
        let mut key_ops: Vec<(String, EventId, KeyOp)> = Vec::new();
        let done = Completions::of(outcomes, tokens)?;
        if !done.ids.is_empty() {
            let moved = done.write(tx, &self.sql.done, now, &mut flags).await?;
            // Revived dead letters that were delivered resolve their records; events with an
            // ordering key let it move on.
            for (id, dlq_count, key) in &moved {
                if *dlq_count > 0 {
                    super::dead_letter_writes::write_delivered(
                        tx,
                        &self.sql.ops,
                        EventId(*id),
                        Timestamp(now),
                    )
                    .await?;
                }
                if let Some(key) = key {
                    key_ops.push((key.clone(), EventId(*id), KeyOp::Leave));
                }
            }
        }
        for (i, (o, t)) in outcomes.iter().zip(tokens).enumerate() {
            let Some(t) = t else { continue };
            let (id, retry_count, errors, delivered, next) = match o {
                Outcome::Done { .. } => continue,
                Outcome::Snooze {
                    id,
                    delivered,
                    next_attempt_at,
                    subscriptions,
                } => {
                    flags[i] = self
                        .snoozed(tx, *id, *t, delivered, *next_attempt_at, subscriptions, now)
                        .await?;
                    continue;
                }
                Outcome::Retry {
                    id,
                    retry_count,
                    errors,
                    delivered,
                    next_attempt_at,
                } => (
                    id,
                    retry_count,
                    errors,
                    delivered,
                    Some(next_attempt_at.as_millis()),
                ),
                Outcome::Dead {
                    id,
                    retry_count,
                    errors,
                    delivered,
                    ..
                } => (id, retry_count, errors, delivered, None),
            };
            let died = q(&self.sql.fail)
                .bind(id.0)
                .bind(t)
                .bind(i32::try_from(*retry_count).unwrap_or(i32::MAX))
                .bind(json_list(errors)?)
                .bind(json_list(delivered)?)
                .bind(now)
                .bind(next)
                .fetch_optional(&mut **tx)
                .await?;
            flags[i] = died.is_some();
            if matches!(o, Outcome::Retry { .. }) {
                crate::fail_point!("retry.schedule");
            }
            let (cancelled, key) = match &died {
                Some(row) => (
                    row.try_get::<bool, _>("cancel_requested")?,
                    row.try_get::<Option<String>, _>("ordering_key")?,
                ),
                None => (false, None),
            };
            if let (Some(_), false, Outcome::Dead { death, .. }) = (&died, cancelled, o) {
                crate::fail_point!("dlq.move");
                super::dead_letter_writes::write_death(
                    tx,
                    &self.sql,
                    &self.channel,
                    *id,
                    death,
                    Timestamp(now),
                )
                .await?;
                if let Some(key) = key {
                    let hold = death.hold_key;
                    key_ops.push((key, *id, KeyOp::Died { hold }));
                }
            } else if cancelled && let Some(key) = key {
                key_ops.push((key, *id, KeyOp::Leave));
            }
        }
        super::keys::apply(tx, &self.sql, &self.channel, key_ops, now).await?;
        Ok(flags)
    }

    /// Writes a snooze in `tx` if this process still holds the event (`token`): pending again
    /// at `next` (or `cancelled`, if a cancel came during the attempt), and one more snooze
    /// counted for each subscription in `keys`. Returns whether it was written.
    #[allow(clippy::too_many_arguments)]
    async fn snoozed(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        id: EventId,
        token: Uuid,
        delivered: &[String],
        next: Timestamp,
        keys: &[String],
        now: i64,
    ) -> Result<bool> {
        let s = &self.sql.schema;
        let written = q(&format!(
            "UPDATE {s}.events SET
                 status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
                 delivered = $3, updated_at = $4,
                 next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE $5 END,
                 lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
             WHERE id = $1 AND status = 'processing' AND lease_token = $2 RETURNING id"
        ))
        .bind(id.0)
        .bind(token)
        .bind(json_list(delivered)?)
        .bind(now)
        .bind(next.as_millis())
        .fetch_optional(&mut **tx)
        .await?
        .is_some();
        if written {
            q(&format!(
                "INSERT INTO {s}.snoozes (event_id, subscription, count)
                 SELECT $1, k, 1 FROM UNNEST($2::text[]) AS k
                 ON CONFLICT (event_id, subscription) DO UPDATE SET count = {s}.snoozes.count + 1"
            ))
            .bind(id.0)
            .bind(keys)
            .execute(&mut **tx)
            .await?;
        }
        Ok(written)
    }

    /// Writes completions alone (no other outcome, no snapshot) in one statement committed on
    /// its own: no `BEGIN` and `COMMIT` round trips. Only events that never were dead letters
    /// move: a revived one resolves its record in the same transaction as its move, so it is
    /// left unflagged for [`record_in`](Self::record_in), like one whose lease was lost.
    pub(super) async fn record_done_alone(
        &self,
        outcomes: &[Outcome],
        tokens: &[Option<Uuid>],
        now: i64,
    ) -> Result<Vec<bool>> {
        let mut flags = vec![false; outcomes.len()];
        let done = Completions::of(outcomes, tokens)?;
        if !done.ids.is_empty() {
            let mut conn = self.pool.acquire().await?;
            done.write(&mut conn, &self.sql.done_fresh, now, &mut flags)
                .await?;
        }
        Ok(flags)
    }
}

/// The completions among some outcomes whose lease this process holds, as the arrays of the
/// done statement, with each one's place among the outcomes.
struct Completions {
    ids: Vec<Uuid>,
    tokens: Vec<Uuid>,
    delivered: Vec<Option<String>>,
    at: Vec<usize>,
}

impl Completions {
    fn of(outcomes: &[Outcome], tokens: &[Option<Uuid>]) -> Result<Completions> {
        let mut c = Completions {
            ids: Vec::new(),
            tokens: Vec::new(),
            delivered: Vec::new(),
            at: Vec::new(),
        };
        for (i, (o, t)) in outcomes.iter().zip(tokens).enumerate() {
            let (Outcome::Done { id, delivered }, Some(t)) = (o, t) else {
                continue;
            };
            c.ids.push(id.0);
            c.tokens.push(*t);
            c.delivered.push(json_list(delivered)?);
            c.at.push(i);
        }
        Ok(c)
    }

    /// Runs `sql` (a done statement) for these completions, flags the outcomes of the events it
    /// moved and returns them with their dead-letter counts and ordering keys.
    async fn write(
        &self,
        conn: &mut PgConnection,
        sql: &str,
        now: i64,
        flags: &mut [bool],
    ) -> Result<Vec<(Uuid, i32, Option<String>)>> {
        let moved: Vec<(Uuid, i32, Option<String>)> = q(sql)
            .bind(&self.ids)
            .bind(&self.tokens)
            .bind(&self.delivered)
            .bind(now)
            .fetch_all(conn)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get::<Uuid, _>(0)?,
                    r.try_get::<i32, _>(1)?,
                    r.try_get(2)?,
                ))
            })
            .collect::<Result<_>>()?;
        let ids: HashSet<Uuid> = moved.iter().map(|(id, _, _)| *id).collect();
        for (k, id) in self.ids.iter().enumerate() {
            flags[self.at[k]] = ids.contains(id);
        }
        Ok(moved)
    }
}

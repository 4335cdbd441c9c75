//! Writing outcomes, fenced by the lease token of the delivery that produced them.

use sqlx::{Postgres, Row, Transaction};
use uuid::Uuid;

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
        let (mut ids, mut toks, mut delivered, mut at) = (vec![], vec![], vec![], vec![]);
        for (i, (o, t)) in outcomes.iter().zip(tokens).enumerate() {
            let (Outcome::Done { id, delivered: d }, Some(t)) = (o, t) else {
                continue;
            };
            ids.push(id.0);
            toks.push(*t);
            delivered.push(json_list(d)?);
            at.push(i);
        }
        if !ids.is_empty() {
            let moved: Vec<(Uuid, i32)> = q(&self.sql.done)
                .bind(&ids)
                .bind(&toks)
                .bind(&delivered)
                .bind(now)
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|r| Ok((r.try_get::<Uuid, _>(0)?, r.try_get::<i32, _>(1)?)))
                .collect::<Result<_>>()?;
            for (k, id) in ids.iter().enumerate() {
                flags[at[k]] = moved.iter().any(|(m, _)| m == id);
            }
            // Revived dead letters that were delivered resolve their records.
            for (id, dlq_count) in &moved {
                if *dlq_count > 0 {
                    super::dead_letters::write_delivered(
                        tx,
                        &self.sql.ops,
                        EventId(*id),
                        Timestamp(now),
                    )
                    .await?;
                }
            }
        }
        for (i, (o, t)) in outcomes.iter().zip(tokens).enumerate() {
            let Some(t) = t else { continue };
            let (id, retry_count, errors, delivered, next) = match o {
                Outcome::Done { .. } => continue,
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
            if let (Some(_), Outcome::Dead { death, .. }) = (died, o) {
                crate::fail_point!("dlq.move");
                super::dead_letters::write_death(
                    tx,
                    &self.sql,
                    &self.channel,
                    *id,
                    death,
                    Timestamp(now),
                )
                .await?;
            }
        }
        Ok(flags)
    }
}

//! Writing outcomes, fenced by the lease token of the delivery that produced them.

use sqlx::{Postgres, Row, Transaction};
use uuid::Uuid;

use super::{PgStore, json_list, q};
use crate::error::Result;
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
            delivered.push(json_list(d));
            at.push(i);
        }
        if !ids.is_empty() {
            let moved: Vec<Uuid> = q(&self.sql.done)
                .bind(&ids)
                .bind(&toks)
                .bind(&delivered)
                .bind(now)
                .fetch_all(&mut **tx)
                .await?
                .iter()
                .map(|r| r.try_get::<Uuid, _>(0))
                .collect::<std::result::Result<_, _>>()?;
            for (k, id) in ids.iter().enumerate() {
                flags[at[k]] = moved.contains(id);
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
                } => (id, retry_count, errors, delivered, None),
            };
            let n = q(&self.sql.fail)
                .bind(id.0)
                .bind(t)
                .bind(i32::try_from(*retry_count).unwrap_or(i32::MAX))
                .bind(json_list(errors))
                .bind(json_list(delivered))
                .bind(now)
                .bind(next)
                .execute(&mut **tx)
                .await?
                .rows_affected();
            flags[i] = n == 1;
        }
        Ok(flags)
    }
}

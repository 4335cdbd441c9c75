//! Writing the outcomes of delivery attempts on SQLite: a completion, a retry, a snooze, a
//! death, each checked against the event's state (only a running event takes an outcome). A
//! completion of an event with an ordering key lets its key move on, and claims the key's next
//! event for the worker's next claim when it is due now ([`set_aside`](super::set_aside)).

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, params};

use super::op::WriteOp;
use super::prepared::Prepared;
use super::row_writes::{of_stored, waiting};
use super::rows::{Undecoded, json_list};
use super::set_aside::SetAside;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::payload::NewSnapshot;
use crate::store::Outcome;

/// Writes one outcome; a completion that claims the next event of its ordering key pushes the
/// event's row onto `next`.
fn record_one<'s>(
    p: &mut Prepared<'_, 's>,
    sql: &'s Sql,
    (outcome, head_of): (&Outcome, Option<&str>),
    now: Timestamp,
    woke: &std::sync::atomic::AtomicBool,
    next: &mut Vec<Undecoded>,
) -> Result<bool> {
    let now_ms = now.as_millis();
    let conn = p.conn();
    let n = match outcome {
        Outcome::Done { id, delivered } => {
            let (id_text, list) = (id.to_string(), json_list(delivered)?);
            let first = match head_of {
                // Handed over as the next event of its key: most likely its head still.
                Some(key) => {
                    let n = p
                        .get(&sql.record_done_head)?
                        .execute(params![id_text, list, now_ms, key])?;
                    if n == 1 && super::keys::moved_on(p, sql, &id_text, key, None, now, next)? {
                        woke.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    n
                }
                None => p
                    .get(&sql.record_done)?
                    .execute(params![id_text, list, now_ms])?,
            };
            match first {
                0 => {
                    // Not an ordinary event: a revived dead letter resolves its record; an
                    // event with an ordering key lets its key move on.
                    type Other = (bool, Option<String>, Option<String>);
                    let other: Option<Other> = conn
                        .prepare_cached(&sql.record_done_other_read)?
                        .query_row([&id_text], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                        .optional()?;
                    let Some((dead_letter, key, ahead)) = other else {
                        return Ok(false);
                    };
                    conn.prepare_cached(&sql.record_done_other)?
                        .execute(params![id_text, list, now_ms])?;
                    if dead_letter {
                        super::dead_letter_writes::write_delivered(conn, sql, *id, now)?;
                    }
                    if let Some(key) = key
                        && super::keys::moved_on(
                            p,
                            sql,
                            &id_text,
                            &key,
                            ahead.as_deref(),
                            now,
                            next,
                        )?
                    {
                        // The next event of its key is claimed or due: the dispatcher must look.
                        woke.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    1
                }
                n => n,
            }
        }
        Outcome::Retry {
            id,
            retry_count,
            errors,
            delivered,
            next_attempt_at,
        } => {
            let n = conn
                .prepare_cached(&sql.record_retry)?
                .execute(params![
                    id.to_string(),
                    retry_count,
                    json_list(errors)?,
                    json_list(delivered)?,
                    now_ms,
                    next_attempt_at.as_millis()
                ])
                .inspect(|_| crate::fail_point!("retry.schedule"))?;
            // Back to pending: with a priority, it waits in lane 2 (cancelled meanwhile, it
            // lets its ordering key move on).
            waiting(conn, &sql.waiting_pending, *id)?;
            super::keys::settle(p, sql, *id, now)?;
            n
        }
        Outcome::Snooze {
            id,
            delivered,
            next_attempt_at,
            subscriptions,
        } => {
            let id_text = id.to_string();
            let n = conn.prepare_cached(&sql.record_snooze)?.execute(params![
                id_text,
                json_list(delivered)?,
                now_ms,
                next_attempt_at.as_millis()
            ])?;
            if n == 1 {
                waiting(conn, &sql.waiting_pending, *id)?;
                super::keys::settle(p, sql, *id, now)?;
                let mut up = conn.prepare_cached(&sql.snooze_count_up)?;
                for key in subscriptions {
                    up.execute(params![id_text, key])?;
                }
            }
            n
        }
        Outcome::Dead {
            id,
            retry_count,
            errors,
            delivered,
            death,
        } => {
            let died: Option<(u32, bool, Option<String>)> = conn
                .prepare_cached(&sql.record_dead)?
                .query_row(
                    params![
                        id.to_string(),
                        retry_count,
                        json_list(errors)?,
                        json_list(delivered)?,
                        now_ms
                    ],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .optional()?;
            // Cancelled during the attempt: no dead letter.
            match &died {
                Some((_, false, key)) => {
                    crate::fail_point!("dlq.move");
                    super::dead_letter_writes::write_death(conn, sql, *id, death, now)?;
                    if let Some(key) = key {
                        super::keys::died(p, sql, *id, key, death.hold_key, now)?;
                    }
                }
                Some((_, true, Some(_))) => {
                    super::keys::leave(p, sql, *id, now)?;
                }
                _ => {}
            }
            usize::from(died.is_some())
        }
    };
    Ok(n == 1)
}

/// Outcomes to write, their snapshots, whether writing them made an event of an ordering key
/// due, and where the events their completions claim are set aside.
pub(super) struct Record(
    pub(super) Vec<Outcome>,
    pub(super) Vec<NewSnapshot>,
    pub(super) std::sync::atomic::AtomicBool,
    pub(super) Arc<SetAside>,
);

/// What [`Record`] wrote: one flag per outcome, and the events its completions claimed (set
/// aside once the transaction has committed).
pub(super) struct Recorded {
    pub(super) applied: Vec<bool>,
    next: Vec<Undecoded>,
}

impl WriteOp for Record {
    type Reply = Recorded;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<Recorded> {
        let mut next = Vec::new();
        let heads = self.3.heads_of(&self.0);
        // The statements of completions and keys, taken once for the group.
        let mut p = Prepared::new(conn);
        let applied = self
            .0
            .iter()
            .zip(&heads)
            .map(|(o, key)| record_one(&mut p, sql, (o, key.as_deref()), now, &self.2, &mut next))
            .collect::<Result<Vec<bool>>>()?;
        if !self.1.is_empty() {
            let ids = self
                .0
                .iter()
                .zip(&applied)
                .filter(|(_, a)| **a)
                .map(|(o, _)| o.id());
            super::payloads::put(conn, sql, of_stored(&self.1, ids))?;
        }
        Ok(Recorded { applied, next })
    }

    fn committed(&self, reply: &mut Recorded) {
        self.3.put(std::mem::take(&mut reply.next));
    }

    fn wakes(&self, reply: &Recorded) -> bool {
        let applied = &reply.applied;
        // A retry scheduled, or a death that may have announced a new dead letter with a
        // `system.dead_letter` event (a later round of a record announces nothing, and the
        // wake finds nothing new: harmless).
        self.2.load(std::sync::atomic::Ordering::Relaxed)
            || self.0.iter().zip(applied).any(|(o, ok)| {
                *ok && match o {
                    Outcome::Retry { .. } | Outcome::Snooze { .. } => true,
                    Outcome::Dead { death, .. } => death.announcement.is_some(),
                    Outcome::Done { .. } => false,
                }
            })
    }
}

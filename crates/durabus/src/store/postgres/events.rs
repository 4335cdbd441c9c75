//! The hot path on PostgreSQL: group-committed inserts, SKIP LOCKED claims under leases,
//! fenced outcomes, releases and crash recovery.

use async_trait::async_trait;
use sqlx::Row;
use uuid::Uuid;

use super::{PgStore, dedup, insert, q, rows, tx};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::recovery::{Interruption, WORKER_PLACEHOLDER, interrupted};
use crate::store::{EventStore, InsertMode, Outcome, Stored};
use crate::sync::lock;
use std::sync::atomic::Ordering;

#[async_trait]
impl EventStore for PgStore {
    async fn insert_with(
        &self,
        events: Vec<NewEvent>,
        snapshots: Vec<NewSnapshot>,
        mode: InsertMode,
        now: Timestamp,
    ) -> Result<Vec<Stored>> {
        self.noted(async {
            self.check()?;
            if events.is_empty() {
                return Ok(Vec::new());
            }
            let deduped = dedup::any(&events);
            let snapshots = insert::own_rows(&events, snapshots)?;
            let (reply, answer) = tokio::sync::oneshot::channel();
            let request = insert::Request {
                events,
                snapshots,
                now: now.as_millis(),
                claimed: mode == InsertMode::Claimed,
                reply,
            };
            if deduped {
                self.inserter.write_deduped(request).await;
            } else if request.events.len() > insert::GROUP_MAX_EVENTS {
                self.inserter.write(vec![request]).await;
            } else if let Some(slot) = self.inserter.direct_slot() {
                self.inserter.write(vec![request]).await;
                drop(slot);
            } else {
                let sender = lock(&self.inserts).clone().ok_or(Error::StoreClosed)?;
                self.inserter.queued.fetch_add(1, Ordering::AcqRel);
                if sender.send(request).is_err() {
                    self.inserter.queued.fetch_sub(1, Ordering::AcqRel);
                    return Err(Error::StoreClosed);
                }
            }
            answer.await.map_err(|_| Error::StoreClosed)?
        })
        .await
    }

    async fn claim_due(&self, now: Timestamp, limit: usize) -> Result<Vec<Event>> {
        self.noted(async {
            self.check()?;
            let token = Uuid::now_v7();
            let holding = self.held_tokens();
            let cost = interrupted(Interruption::LeaseExpired);
            let asked = std::time::Instant::now();
            let mut conn = self.pool.acquire().await?;
            let lease_from = super::heartbeat::lease_start(now, asked.elapsed(), self.lease_ms);
            let rows = q(&self.sql.claim)
                .bind(now.as_millis())
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .bind(&self.worker)
                .bind(token)
                .bind(self.lease_ms)
                .bind(&holding)
                .bind(i32::try_from(cost.retry_increment).unwrap_or(i32::MAX))
                .bind(cost.note)
                .bind(WORKER_PLACEHOLDER)
                .bind(lease_from.as_millis())
                .fetch_all(&mut *conn)
                .await?;
            let rows = self
                .confirm_slow_claim(&mut conn, token, now, asked.elapsed(), rows)
                .await?;
            drop(conn);
            {
                // Held from here on, even if a row fails to decode below: its lease is renewed and
                // it can be released, instead of waiting out the lease.
                let mut held = self.held();
                for row in &rows {
                    if let Ok(id) = row.try_get::<Uuid, _>("id") {
                        held.insert(EventId(id), token);
                    }
                }
            }
            let mut events = Vec::with_capacity(rows.len());
            let mut reclaimed = 0usize;
            for row in &rows {
                if row.try_get::<bool, _>("reclaimed")? {
                    reclaimed += 1;
                }
                // A row that does not decode (written by hand, say) is left out and logged, and
                // no longer held: the others are delivered, and its lease runs out once they are
                // done (the heartbeat renews a claim's lease token while any of it is held).
                match rows::event(row) {
                    Ok(event) => events.push(event),
                    Err(e) => {
                        let id = row.try_get::<Uuid, _>("id").ok();
                        if let Some(id) = id {
                            self.held().remove(&EventId(id));
                        }
                        tracing::error!(
                            event_id = ?id,
                            error = %e,
                            "a claimed event's row could not be read; it is not delivered, and is claimed again when its lease runs out"
                        );
                    }
                }
            }
            if reclaimed > 0 {
                tracing::warn!(
                    events = reclaimed,
                    worker = %self.worker,
                    "reclaimed events whose worker stopped renewing its lease"
                );
            }
            if rows.len() >= limit {
                // A backlog: the claim's plan needs statistics of a table that holds one.
                self.analyser.backlog(&self.pool, &self.sql.schema);
            }
            events.sort_by_key(|e| (std::cmp::Reverse(e.priority), e.next_attempt_at, e.id));
            Ok(events)
        })
        .await
    }

    async fn snoozes(&self, id: EventId, key: &str) -> Result<u32> {
        self.noted(async {
            self.check()?;
            let s = &self.sql.schema;
            let row = q(&format!(
                "SELECT count FROM {s}.snoozes WHERE event_id = $1 AND subscription = $2"
            ))
            .bind(id.0)
            .bind(key)
            .fetch_optional(&mut *self.pool.acquire().await?)
            .await?;
            Ok(match row {
                Some(r) => u32::try_from(r.try_get::<i32, _>(0)?).unwrap_or(0),
                None => 0,
            })
        })
        .await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        self.noted(async {
            self.check()?;
            let row = q(&self.sql.next_due)
                .fetch_one(&mut *self.pool.acquire().await?)
                .await?;
            Ok(row.try_get::<Option<i64>, _>(0)?.map(Timestamp))
        })
        .await
    }

    async fn record_many_with(
        &self,
        outcomes: Vec<Outcome>,
        snapshots: Vec<NewSnapshot>,
        now: Timestamp,
    ) -> Result<Vec<bool>> {
        self.noted(async {
            self.check()?;
            let tokens: Vec<Option<Uuid>> = {
                let held = self.held();
                outcomes
                    .iter()
                    .map(|o| held.get(&o.id()).copied())
                    .collect()
            };
            // The common case, completions alone, is one statement without a transaction around
            // it; what it leaves (revived dead letters, lost leases) and every other outcome is
            // written in one transaction.
            let alone =
                snapshots.is_empty() && outcomes.iter().all(|o| matches!(o, Outcome::Done { .. }));
            let mut flags = if alone {
                self.record_done_alone(&outcomes, &tokens, now.as_millis())
                    .await?
            } else {
                vec![false; outcomes.len()]
            };
            let rest: Vec<usize> = (0..outcomes.len())
                .filter(|&i| !flags[i] && tokens[i].is_some())
                .collect();
            if !rest.is_empty() {
                let mut tx = tx::begin(&self.pool).await?;
                if rest.len() == outcomes.len() {
                    flags = self
                        .record_in(&mut tx, &outcomes, &tokens, now.as_millis())
                        .await?;
                } else {
                    let some: Vec<Outcome> = rest.iter().map(|&i| outcomes[i].clone()).collect();
                    let their: Vec<Option<Uuid>> = rest.iter().map(|&i| tokens[i]).collect();
                    let written = self
                        .record_in(&mut tx, &some, &their, now.as_millis())
                        .await?;
                    for (&i, ok) in rest.iter().zip(written) {
                        flags[i] = ok;
                    }
                }
                let kept: Vec<&NewSnapshot> = snapshots
                    .iter()
                    .filter(|s| {
                        outcomes
                            .iter()
                            .zip(&flags)
                            .any(|(o, applied)| *applied && o.id() == s.event_id)
                    })
                    .collect();
                if !kept.is_empty() {
                    super::payloads::put_in(&mut tx, &self.sql.ops, &kept).await?;
                }
                tx.commit().await?;
            }
            {
                let mut held = self.held();
                for (o, t) in outcomes.iter().zip(&tokens) {
                    // Forget the token only if no newer claim replaced it meanwhile.
                    if held.get(&o.id()) == t.as_ref() {
                        held.remove(&o.id());
                    }
                }
            }
            for (o, ok) in outcomes.iter().zip(&flags) {
                if !ok {
                    tracing::warn!(event_id = %o.id(), worker = %self.worker,
                        "outcome not recorded: this worker no longer holds the event's lease");
                }
            }
            let wakes = outcomes.iter().any(|o| match o {
                Outcome::Retry { .. } | Outcome::Snooze { .. } => true,
                Outcome::Dead { death, .. } => death.announcement.is_some(),
                Outcome::Done { .. } => false,
            });
            if wakes {
                self.wake.notify_one();
            }
            Ok(flags)
        })
        .await
    }

    async fn release(&self, ids: Vec<EventId>, now: Timestamp) -> Result<u64> {
        self.noted(async {
            self.check()?;
            if ids.is_empty() {
                return Ok(0);
            }
            let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
            let n = q(&self.sql.release)
                .bind(&raw)
                .bind(&self.worker)
                .bind(now.as_millis())
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected();
            {
                let mut held = self.held();
                for id in &ids {
                    held.remove(id);
                }
            }
            if n > 0 {
                self.notify_others().await;
                self.wake.notify_one();
            }
            Ok(n)
        })
        .await
    }

    async fn recover_processing(&self, now: Timestamp) -> Result<u64> {
        self.noted(async {
            self.check()?;
            let cost = interrupted(Interruption::ProcessStopped);
            let n = q(&self.sql.recover)
                .bind(now.as_millis())
                .bind(self.held_tokens())
                .bind(i32::try_from(cost.retry_increment).unwrap_or(i32::MAX))
                .bind(cost.note)
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected();
            if n > 0 {
                self.notify_others().await;
                self.wake.notify_one();
            }
            Ok(n)
        })
        .await
    }
}

impl PgStore {
    /// A claim whose answer took a quarter of the lease or more (a slow network, a link that
    /// went down and came back: the statement may have run seconds after it was sent, with
    /// the time it was sent) may have leased events from a time long past, and other workers
    /// may have taken some over already. Its leases are renewed from now, and only the events
    /// still under its token are kept; the others are left to whoever holds them, so this
    /// worker does not run them as well.
    async fn confirm_slow_claim(
        &self,
        conn: &mut sqlx::PgConnection,
        token: Uuid,
        now: Timestamp,
        took: std::time::Duration,
        rows: Vec<sqlx::postgres::PgRow>,
    ) -> Result<Vec<sqlx::postgres::PgRow>> {
        let quarter =
            std::time::Duration::from_millis(u64::try_from(self.lease_ms / 4).unwrap_or(0));
        if rows.is_empty() || took < quarter {
            return Ok(rows);
        }
        let s = &self.sql.schema;
        let kept: Vec<Uuid> = q(&format!(
            "UPDATE {s}.events SET lease_expires_at = greatest(lease_expires_at, $2)
             WHERE status = 'processing' AND lease_token = $1 RETURNING id"
        ))
        .bind(token)
        .bind(now.plus(took).as_millis().saturating_add(self.lease_ms))
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<Uuid, _>(0))
        .collect::<std::result::Result<_, _>>()?;
        let claimed = rows.len();
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|r| {
                r.try_get::<Uuid, _>("id")
                    .is_ok_and(|id| kept.contains(&id))
            })
            .collect();
        if rows.len() < claimed {
            tracing::warn!(
                took_ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                left = claimed - rows.len(),
                worker = %self.worker,
                "a claim answered late; events other workers took over meanwhile are left to them"
            );
        }
        Ok(rows)
    }
}

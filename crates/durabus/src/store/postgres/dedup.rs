//! Dedup windows on PostgreSQL: an insert with dedup keys takes each key with one upsert in
//! the transaction that stores the events, so racing publishes of one key store one event
//! (the second waits on the first's row lock, then finds the key taken). Inserts without a
//! dedup key never come here: they keep the group commit.

use std::collections::HashSet;

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::insert::{Inserter, Request, Rows, flags};
use super::q;
use super::sql::PgSql;
use crate::error::Result;
use crate::event::{EventId, NewEvent};
use crate::store::Stored;

/// Whether any of `events` has a dedup key (and needs [`Inserter::write_deduped`]).
pub(super) fn any(events: &[NewEvent]) -> bool {
    events.iter().any(|e| e.options.dedup_value().is_some())
}

impl Inserter {
    /// Writes `request` in one transaction of its own: its dedup keys taken (or found taken),
    /// then the events whose key was free stored as [`Inserter::statement`] would.
    pub async fn write_deduped(&self, request: Request) {
        let result = self.deduped(&request).await;
        let _ = request.reply.send(result);
    }

    async fn deduped(&self, r: &Request) -> Result<Vec<Stored>> {
        let mut tx = super::tx::begin(&self.pool).await?;
        let mut taken = Vec::with_capacity(r.events.len());
        for e in &r.events {
            taken.push(holder(&mut tx, &self.sql, e, r.now).await?);
        }
        let kept: Vec<&NewEvent> = r
            .events
            .iter()
            .zip(&taken)
            .filter(|(_, t)| t.is_none())
            .map(|(e, _)| e)
            .collect();
        let kept_ids: HashSet<EventId> = kept.iter().map(|e| e.id).collect();
        let rows = Rows {
            created: vec![r.now; kept.len()],
            snapshots: r
                .snapshots
                .iter()
                .filter(|s| kept_ids.contains(&s.event_id))
                .collect(),
            events: kept,
        };
        let (stored, token) = if rows.events.is_empty() {
            (Vec::new(), None)
        } else {
            self.store_rows(&mut tx, &rows, r.claimed).await?
        };
        crate::fail_point!("insert.before_commit");
        tx.commit().await?;
        self.hold(&stored, token);
        let mut fresh: HashSet<Uuid> = stored.into_iter().collect();
        let known = flags(&r.events, &mut fresh);
        Ok(known
            .into_iter()
            .zip(taken)
            .map(|(k, t)| t.map_or(k, Stored::Duplicate))
            .collect())
    }
}

/// Takes `e`'s dedup key for it (a free key, or one whose window closed by `now`) and returns
/// `None`; or returns the event holding the key in an open window. An event holding its own
/// key (its id published again) is `None`: the insert finds its id stored.
pub(super) async fn holder(
    conn: &mut PgConnection,
    sql: &PgSql,
    e: &NewEvent,
    now: i64,
) -> Result<Option<EventId>> {
    let Some(d) = e.options.dedup_value() else {
        return Ok(None);
    };
    let expires = d.expires(crate::clock::Timestamp(now)).as_millis();
    let took = q(&sql.dedup_take)
        .bind(&d.key)
        .bind(e.id.0)
        .bind(expires)
        .bind(now)
        .fetch_optional(&mut *conn)
        .await?;
    if took.is_some() {
        return Ok(None);
    }
    let row = q(&sql.dedup_get).bind(&d.key).fetch_one(&mut *conn).await?;
    let first = EventId(row.try_get::<Uuid, _>(0)?);
    Ok((first != e.id).then_some(first))
}

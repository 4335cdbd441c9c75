//! Inserts that need a transaction of their own on PostgreSQL: dedup windows and ordering keys.
//! An insert with dedup keys takes each key with one upsert in the transaction that stores the
//! events, so racing publishes of one key store one event (the second waits on the first's row
//! lock, then finds the key taken). An event with an ordering key takes its key's advisory lock,
//! waits behind the key's unfinished events if there are any, and joins the key's queue. Inserts
//! with neither never come here: they keep the group commit.

use std::collections::HashSet;

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::insert::{Inserter, Request, Rows, flags};
use super::q;
use super::sql::PgSql;
use crate::error::Result;
use crate::event::{EventId, NewEvent};
use crate::store::Stored;

/// Whether any of `events` has a dedup key or an ordering key (and needs
/// [`Inserter::write_deduped`]).
pub(super) fn any(events: &[NewEvent]) -> bool {
    events
        .iter()
        .any(|e| e.options.dedup_value().is_some() || e.options.ordering_key_value().is_some())
}

/// For each of `events`, whether it waits behind unfinished events of its ordering key; takes
/// the keys' advisory locks (in a fixed order, so two inserts never deadlock) in `conn`'s
/// transaction. Call [`joined`] after the insert.
pub(super) async fn behind(
    conn: &mut PgConnection,
    sql: &PgSql,
    events: &[&NewEvent],
) -> Result<Vec<bool>> {
    let mut keys: Vec<&str> = events
        .iter()
        .filter_map(|e| e.options.ordering_key_value())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    // One statement takes every lock (in key order), one reads which keys are busy.
    super::keys::lock_all(conn, &keys).await?;
    let busy = if keys.is_empty() {
        HashSet::new()
    } else {
        super::keys::busy_of(conn, sql, &keys).await?
    };
    // Within one insert, a key's first event may lead; the later ones wait behind it.
    let mut seen = HashSet::new();
    Ok(events
        .iter()
        .map(|e| match e.options.ordering_key_value() {
            Some(k) => busy.contains(k) || !seen.insert(k),
            None => false,
        })
        .collect())
}

/// The events of `events` that `stored` holds and that have an ordering key join their keys'
/// queues, in their order.
pub(super) async fn joined(
    conn: &mut PgConnection,
    sql: &PgSql,
    events: &[&NewEvent],
    stored: &[Uuid],
) -> Result<()> {
    let fresh: HashSet<&Uuid> = stored.iter().collect();
    let (keys, ids): (Vec<&str>, Vec<Uuid>) = events
        .iter()
        .filter(|e| fresh.contains(&e.id.0))
        .filter_map(|e| e.options.ordering_key_value().map(|k| (k, e.id.0)))
        .unzip();
    if !ids.is_empty() {
        super::keys::join(conn, sql, &keys, &ids).await?;
    }
    Ok(())
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
        let parked = behind(&mut tx, &self.sql, &kept).await?;
        let rows = Rows {
            created: vec![r.now; kept.len()],
            snapshots: r
                .snapshots
                .iter()
                .filter(|s| kept_ids.contains(&s.event_id))
                .collect(),
            parked,
            events: kept,
        };
        let (stored, token) = if rows.events.is_empty() {
            (Vec::new(), None)
        } else {
            self.store_rows(&mut tx, &rows, r.claimed).await?
        };
        joined(&mut tx, &self.sql, &rows.events, &stored).await?;
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

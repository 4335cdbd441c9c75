//! Publishing inside the application's own `sqlx` PostgreSQL transaction.

use std::sync::Arc;

use sqlx::PgConnection;

use super::insert::{Notice, Rows, insert_rows, own_rows};

use super::sql::PgSql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::event::{EventId, NewEvent};
use crate::published::Published;
use crate::store::Stored;
use tracing::Instrument;

/// Writes events into a PostgreSQL bus's tables inside the application's own transaction: the
/// events exist, and are delivered, only if that transaction commits. The `NOTIFY` that wakes
/// workers is part of the transaction too, so it is sent on commit and never for a rollback.
///
/// Get one from [`PgStore::outbox`](super::PgStore::outbox) or
/// [`EventBus::pg_outbox`](crate::EventBus::pg_outbox).
///
/// ```no_run
/// # async fn demo(bus: durabus::EventBus, pool: sqlx::PgPool) -> durabus::Result<()> {
/// let outbox = bus.pg_outbox()?;
/// let mut tx = pool.begin().await?;
/// sqlx::query("INSERT INTO orders (id) VALUES (1)").execute(&mut *tx).await?;
/// outbox.publish(&mut tx, "order.placed", &serde_json::json!({"order": 1}), durabus::Timestamp::now()).await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgOutbox {
    sql: Arc<PgSql>,
    channel: String,
    max_payload_bytes: usize,
    published: Published,
}

impl PgOutbox {
    pub(super) fn new(sql: Arc<PgSql>, channel: String) -> PgOutbox {
        PgOutbox {
            sql,
            channel,
            max_payload_bytes: 1024 * 1024,
            published: Published::default(),
        }
    }

    /// Does what the bus's publishes do beside storing: its `published` snapshots and its
    /// count in `events_published_total`.
    pub(crate) fn observed(mut self, published: Published) -> Self {
        self.published = published;
        self
    }

    /// Sets the payload size limit in bytes (1 MiB unless set).
    #[must_use]
    pub fn max_payload_bytes(mut self, limit: usize) -> Self {
        self.max_payload_bytes = limit;
        self
    }

    /// Writes one event of `event_type` with `payload` on `conn` (a `sqlx` transaction
    /// dereferences to one), created and due at `now`. Fails like
    /// the SQLite `Outbox::publish`; nothing is written then.
    pub async fn publish<T: serde::Serialize + ?Sized>(
        &self,
        conn: &mut PgConnection,
        event_type: &str,
        payload: &T,
        now: Timestamp,
    ) -> Result<EventId> {
        let event = NewEvent::new(event_type, payload)?;
        let id = event.id;
        self.publish_batch(conn, vec![event], now).await?;
        Ok(id)
    }

    /// Writes many events on `conn` in one statement, all or none. Events whose id is already
    /// stored are skipped (idempotent publish), and so are events whose dedup key an open
    /// window holds (their place in the answer has the first event's id). Returns the ids in
    /// order.
    pub async fn publish_batch(
        &self,
        conn: &mut PgConnection,
        mut events: Vec<NewEvent>,
        now: Timestamp,
    ) -> Result<Vec<EventId>> {
        let span = Published::span("outbox", &mut events);
        self.write(conn, events, now).instrument(span).await
    }

    /// [`publish_batch`](Self::publish_batch) inside its span.
    async fn write(
        &self,
        conn: &mut PgConnection,
        events: Vec<NewEvent>,
        now: Timestamp,
    ) -> Result<Vec<EventId>> {
        for e in &events {
            e.check(self.max_payload_bytes)?;
        }
        let mut ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
        if events.is_empty() {
            return Ok(ids);
        }
        // Dedup keys are taken in the application's transaction: rolled back with it.
        let mut kept = Vec::with_capacity(events.len());
        for (e, id) in events.iter().zip(ids.iter_mut()) {
            match super::dedup::holder(conn, &self.sql, e, now.as_millis())
                .await
                .inspect_err(super::liveness::note_error)?
            {
                Some(first) => *id = first,
                None => kept.push(e),
            }
        }
        let snapshots = own_rows(&events, self.published.snapshots(&events, now)?)?;
        let kept_len = kept.len();
        // Events with an ordering key take its lock in the application's transaction.
        let parked = super::dedup::behind(conn, &self.sql, &kept)
            .await
            .inspect_err(super::liveness::note_error)?;
        let rows = Rows {
            events: kept,
            created: vec![now.as_millis(); kept_len],
            snapshots: snapshots.iter().collect(),
            parked,
        };
        let stored = insert_rows(
            conn,
            &self.sql,
            &rows,
            None,
            Some(Notice::to_all(&self.channel)),
        )
        .await
        .inspect_err(super::liveness::note_error)?;
        super::dedup::joined(conn, &self.sql, &rows.events, &stored)
            .await
            .inspect_err(super::liveness::note_error)?;
        // Counted when written: a transaction the application then rolls back was counted all
        // the same (the bus cannot see the application's commit).
        let flags: Vec<Stored> = events
            .iter()
            .zip(&ids)
            .map(|(e, id)| {
                if *id != e.id {
                    Stored::Duplicate(*id)
                } else if stored.contains(&e.id.0) {
                    Stored::New
                } else {
                    Stored::Known
                }
            })
            .collect();
        self.published
            .count(events.iter().map(|e| e.event_type.as_str()), &flags);
        Ok(ids)
    }
}

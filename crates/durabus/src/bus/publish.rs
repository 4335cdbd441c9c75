//! Publishing: `publish`, `enqueue` and batches, with their `published` snapshots and counts.

use serde::Serialize;

use super::EventBus;
use crate::error::{Error, Result};
use crate::event::{EventId, EventStatus, NewEvent};
use crate::payload::NewSnapshot;
use crate::store::{InsertMode, Stored};
use tracing::Instrument;

impl EventBus {
    /// The `published` snapshots of `events`, when automatic snapshots are on.
    fn published_snapshots(
        &self,
        events: &[NewEvent],
        now: crate::Timestamp,
    ) -> Result<Vec<NewSnapshot>> {
        self.dispatcher().published().snapshots(events, now)
    }

    pub(super) fn prepare<T: Serialize + ?Sized>(
        &self,
        event_type: &str,
        payload: &T,
    ) -> Result<NewEvent> {
        self.check_open()?;
        let event = NewEvent::new(event_type, payload)?;
        self.check_size(&event)?;
        Ok(event)
    }

    pub(super) fn check_size(&self, event: &NewEvent) -> Result<()> {
        event.check(self.config().max_payload_bytes)
    }

    pub(super) fn map_closed(e: Error) -> Error {
        match e {
            Error::StoreClosed => Error::Shutdown,
            other => other,
        }
    }

    /// Stores the event durably, delivers it to the matching handlers, waits for that first
    /// delivery attempt, and returns the event's id. A failed attempt is retried in the
    /// background on the retry schedule (the bus must be [`start`](Self::start)ed for that).
    ///
    /// Fails with [`Error::InvalidEventType`] (also for the reserved `system.*` types),
    /// [`Error::InvalidPayload`], [`Error::PayloadTooLarge`] or [`Error::Shutdown`]; nothing is
    /// stored then.
    ///
    /// An event published with a later due time ([`NewEvent::delay`],
    /// [`NewEvent::deliver_at`]) is stored as scheduled and this returns at once: there is no
    /// delivery to wait for yet. So does an event with an ordering key
    /// ([`NewEvent::ordering_key`]): it may have to wait for its key's earlier events.
    pub async fn publish<T: Serialize + ?Sized>(
        &self,
        event_type: &str,
        payload: &T,
    ) -> Result<EventId> {
        let event = self.prepare(event_type, payload)?;
        self.publish_event(event).await
    }

    /// [`publish`](Self::publish) for a prepared [`NewEvent`] (with metadata, say, or a
    /// caller-chosen id: see [`NewEvent::with_id`]). If an event with the same id is already
    /// stored, nothing is stored or delivered and the id is returned: publishing is
    /// idempotent, also when two publishes of one id race.
    pub async fn publish_event(&self, mut event: NewEvent) -> Result<EventId> {
        let dispatcher = self.dispatcher().clone();
        let guard = dispatcher.inflight().enter();
        self.check_open()?;
        self.check_size(&event)?;
        let now = dispatcher.clock().now();
        if event.due_at(now).is_some()
            || event.options.ordering_key_value().is_some()
            || dispatcher.paused().bus(now).is_some()
        {
            // Scheduled: stored to wait for its time; ordered: stored to wait for its key's
            // earlier events; the bus paused: stored to wait for the resume. There is no
            // delivery to wait for now.
            drop(guard);
            return self.enqueue_event(event).await;
        }
        let id = event.id;
        let snapshots = self.published_snapshots(std::slice::from_ref(&event), now)?;
        let span = crate::published::Published::span("publish", std::slice::from_mut(&mut event));
        // Stored and delivered in one task of its own: if the caller drops this future, the
        // insert and the delivery still finish and the outcome is recorded, so the event is
        // never left `processing` with nobody delivering it. The inline delivery's spans nest
        // under the publish's.
        let task = tokio::spawn(
            async move {
                let started = std::time::Instant::now();
                let inserted = dispatcher
                    .store()
                    .insert_with(vec![event.clone()], snapshots, InsertMode::Claimed, now)
                    .await
                    .map_err(Self::map_closed)?;
                counted(
                    dispatcher.published(),
                    [event.event_type.as_str()],
                    &inserted,
                    started,
                );
                // Idempotent publish: an event with this id is already stored (and delivered, or
                // on its way); it is not delivered again.
                let stored = inserted.first().copied().unwrap_or(Stored::Known);
                if stored.is_new() {
                    dispatcher
                        .deliver(event.into_event(EventStatus::Processing, now))
                        .await;
                }
                drop(guard);
                crate::fail_point!("publish.before_reply");
                Ok(stored.id(id))
            }
            .instrument(span),
        );
        match task.await {
            Ok(result) => result,
            Err(e) => Err(Error::Internal(format!("the publish task failed: {e}"))),
        }
    }

    /// Stores the event durably and returns its id at once; the background workers deliver it.
    /// This is the fast path. Fails like [`publish`](Self::publish).
    pub async fn enqueue<T: Serialize + ?Sized>(
        &self,
        event_type: &str,
        payload: &T,
    ) -> Result<EventId> {
        let event = self.prepare(event_type, payload)?;
        self.enqueue_event(event).await
    }

    /// [`enqueue`](Self::enqueue) for a prepared [`NewEvent`]. Idempotent like
    /// [`publish_event`](Self::publish_event): an id already stored is not stored again.
    ///
    /// When this process's worker is idle (its last claim found nothing and a delivery slot
    /// is free), the event is stored already claimed by it and handed over, so its delivery
    /// starts without a claim; one enqueue per idle spell takes that path, the others store
    /// their events as pending. Either way the event is durable when this returns.
    pub async fn enqueue_event(&self, mut event: NewEvent) -> Result<EventId> {
        let span = crate::published::Published::span("enqueue", std::slice::from_mut(&mut event));
        self.enqueue_one(event).instrument(span).await
    }

    /// [`enqueue_event`](Self::enqueue_event) inside its span.
    async fn enqueue_one(&self, event: NewEvent) -> Result<EventId> {
        self.check_open()?;
        self.check_size(&event)?;
        let id = event.id;
        let now = self.clock().now();
        let snapshots = self.published_snapshots(std::slice::from_ref(&event), now)?;
        let event_type = event.event_type.clone();
        let started = std::time::Instant::now();
        let early = acks_early();
        // A dedup key may be taken, an ordering key busy: such an event is stored pending, not
        // handed over.
        let keyed =
            event.options.dedup_value().is_some() || event.options.ordering_key_value().is_some();
        let turn = if early
            || keyed
            || event.due_at(now).is_some()
            || self.dispatcher().paused().bus(now).is_some()
        {
            None
        } else {
            self.dispatcher().handoff().take()
        };
        let inserted = match turn {
            Some(turn) => self.insert_handed(event, snapshots, now, turn).await?,
            None => {
                self.insert_pending(vec![event], snapshots, now, early)
                    .await?
            }
        };
        counted(
            self.dispatcher().published(),
            [event_type.as_str()],
            &inserted,
            started,
        );
        crate::fail_point!("publish.before_reply");
        Ok(inserted.first().map_or(id, |s| s.id(id)))
    }

    /// Stores `event` claimed by this process and hands it to the idle worker loop
    /// (`turn`); one flag, `false` for an id already stored. Runs in a task of its own, as an
    /// inline publish does: if the caller drops this future, the event still reaches the loop
    /// (or, if the loop has stopped, goes back to pending), so it is never left `processing`
    /// with nobody delivering it.
    async fn insert_handed(
        &self,
        event: NewEvent,
        snapshots: Vec<NewSnapshot>,
        now: crate::Timestamp,
        turn: crate::dispatch::handoff::Turn,
    ) -> Result<Vec<Stored>> {
        let dispatcher = self.dispatcher().clone();
        // Held until the event is handed over or given back: shutdown waits for it, so the
        // store is still open for the give-back.
        let guard = dispatcher.inflight().enter();
        self.check_open()?;
        let task = tokio::spawn(async move {
            let inserted = dispatcher
                .store()
                .insert_with(vec![event.clone()], snapshots, InsertMode::Claimed, now)
                .await
                .map_err(Self::map_closed)?;
            if inserted.first().is_some_and(|s| s.is_new())
                && let Some(back) = turn.give(event.into_event(EventStatus::Processing, now))
            {
                // The loop stopped meanwhile (shutdown): back to pending, no attempt counted.
                let store = dispatcher.store();
                if let Err(e) = store.release(vec![back.id], dispatcher.clock().now()).await {
                    tracing::warn!(event_id = %back.id, error = %e, "could not give back an event the stopped worker was handed; the next start recovers it");
                    dispatcher.config().on_error.report(
                        crate::hook::ErrorSource::Release,
                        &e,
                        false,
                    );
                }
            }
            drop(guard);
            Ok(inserted)
        });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(Error::Internal(format!("the enqueue task failed: {e}"))),
        }
    }

    /// Stores `events` as pending; one flag per event, `false` for an id already stored. With
    /// `early` (see [`acks_early`]) it answers before they are committed.
    async fn insert_pending(
        &self,
        events: Vec<NewEvent>,
        snapshots: Vec<crate::payload::NewSnapshot>,
        now: crate::Timestamp,
        early: bool,
    ) -> Result<Vec<Stored>> {
        if early {
            // Deliberately broken (the reliability suite's self-test): answers before the
            // events are committed, so a crash right after the answer loses them. The write
            // starts 5 ms late, so that every kill while events are published finds some
            // answered and not written (with a group commit of well under a millisecond, a
            // run of 20 kills could miss the window altogether).
            let (store, n) = (self.store(), events.len());
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                let _ = store
                    .insert_with(events, snapshots, InsertMode::Pending, now)
                    .await;
            });
            return Ok(vec![Stored::New; n]);
        }
        self.store()
            .insert_with(events, snapshots, InsertMode::Pending, now)
            .await
            .map_err(Self::map_closed)
    }

    /// Batch publish: stores many events in one transaction, all or none, and returns their
    /// ids at once; the background workers deliver them. Every event is checked first: one bad
    /// event fails the whole call and nothing is stored. Events whose id is already stored are
    /// skipped (idempotent), their ids returned like the others.
    pub async fn enqueue_batch(&self, mut events: Vec<NewEvent>) -> Result<Vec<EventId>> {
        let span = crate::published::Published::span("enqueue_batch", &mut events);
        self.enqueue_many(events).instrument(span).await
    }

    /// [`enqueue_batch`](Self::enqueue_batch) inside its span.
    async fn enqueue_many(&self, events: Vec<NewEvent>) -> Result<Vec<EventId>> {
        self.check_open()?;
        for event in &events {
            self.check_size(event)?;
        }
        let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
        if events.is_empty() {
            return Ok(ids);
        }
        let now = self.clock().now();
        let snapshots = self.published_snapshots(&events, now)?;
        let types: Vec<String> = events.iter().map(|e| e.event_type.clone()).collect();
        let started = std::time::Instant::now();
        let inserted = self
            .insert_pending(events, snapshots, now, acks_early())
            .await?;
        counted(
            self.dispatcher().published(),
            types.iter().map(String::as_str),
            &inserted,
            started,
        );
        crate::fail_point!("publish.before_reply");
        Ok(ids
            .into_iter()
            .zip(inserted)
            .map(|(id, s)| s.id(id))
            .collect())
    }
}

/// Whether this enqueue answers before its commit: only in a build with the
/// `fault-injection` feature, and only when the reliability suite has armed
/// [`fault::ACK_BEFORE_COMMIT`](crate::fault::ACK_BEFORE_COMMIT) at run time.
fn acks_early() -> bool {
    #[cfg(feature = "fault-injection")]
    {
        crate::fault::fires(crate::fault::ACK_BEFORE_COMMIT)
    }
    #[cfg(not(feature = "fault-injection"))]
    {
        false
    }
}

/// Counts the events a publish stored (`inserted`: one flag per event, `false` for an id
/// already stored) and times the insert.
fn counted<'a>(
    published: &crate::published::Published,
    types: impl IntoIterator<Item = &'a str>,
    inserted: &[Stored],
    started: std::time::Instant,
) {
    if let Some(t) = published.telemetry() {
        t.store_call(crate::telemetry::StoreCall::Insert, started.elapsed());
    }
    published.count(types, inserted);
}

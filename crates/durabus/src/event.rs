//! Events: what is published, how it is stored, and its lifecycle status.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};
use uuid::Uuid;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::options::PublishOptions;
use crate::pattern::{validate_event_type, validate_system_type};

/// An event id: a UUID (version 7, so ids sort by creation time).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct EventId(pub Uuid);

impl EventId {
    /// A new, time-ordered id.
    pub fn new() -> Self {
        EventId(Uuid::now_v7())
    }
}

impl Default for EventId {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for EventId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Uuid::parse_str(s.trim())
            .map(EventId)
            .map_err(|_| Error::InvalidId(s.into()))
    }
}

/// Where an event is in its lifecycle: `[scheduled →] pending → processing → done | dlq`, or
/// `cancelled` before it is delivered.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventStatus {
    /// Published for a later time (see [`PublishOptions`]): not delivered before it is due.
    Scheduled,
    /// Stored and waiting for its (next) delivery attempt.
    Pending,
    /// A delivery attempt is running.
    Processing,
    /// Every matching handler has succeeded.
    Done,
    /// Delivery failed more often than the retry policy allows: the event is a dead letter.
    Dlq,
    /// Cancelled by an operator or the application before it was delivered (see
    /// [`crate::cancel`]): no handler runs for it.
    Cancelled,
}

impl EventStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [EventStatus; 6] = [
        EventStatus::Scheduled,
        EventStatus::Pending,
        EventStatus::Processing,
        EventStatus::Done,
        EventStatus::Dlq,
        EventStatus::Cancelled,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::Scheduled => "scheduled",
            EventStatus::Pending => "pending",
            EventStatus::Processing => "processing",
            EventStatus::Done => "done",
            EventStatus::Dlq => "dlq",
            EventStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for EventStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for EventStatus {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        EventStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "status",
                    format!("{s:?} is not an event status"),
                    "scheduled, pending, processing, done, dlq or cancelled",
                )
            })
    }
}

/// The metadata key a re-published event carries (`replay::REPLAY_OF`).
pub(crate) const REPLAY_OF: &str = "replayOf";

/// Free-form string metadata carried with an event.
pub type Metadata = BTreeMap<String, String>;

/// A stored event, as handlers and inspectors see it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Unique id.
    pub id: EventId,
    /// Dot-separated type such as `order.shipped`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload as JSON text. Use [`Event::payload`] to deserialise it.
    #[serde(serialize_with = "raw_json")]
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub payload: String,
    /// Lifecycle status.
    pub status: EventStatus,
    /// Failed attempts so far (a crash during an attempt counts as one).
    pub retry_count: u32,
    /// The error of every failed attempt, oldest first (stored as a JSON array).
    pub errors: Vec<String>,
    /// Metadata given at publish time.
    pub metadata: Metadata,
    /// Keys of the subscriptions that have already handled this event successfully; a retry
    /// runs only the others.
    pub delivered: Vec<String>,
    /// When the event was published.
    pub created_at: Timestamp,
    /// When the event last changed.
    pub updated_at: Timestamp,
    /// When the next delivery attempt is due (scheduled and pending events).
    pub next_attempt_at: Option<Timestamp>,
    /// When the event became a dead letter.
    pub dlq_at: Option<Timestamp>,
    /// How many times the event has become a dead letter (0 for most). A dead letter sent back
    /// for delivery keeps its count: delivered, it resolves its dead-letter record; dead again,
    /// it adds a round to it.
    pub dlq_count: u32,
    /// Its priority among due events ([`PublishOptions::priority`]; 0 by default).
    pub priority: i16,
    /// The time it was published for, if it was published as a scheduled event
    /// ([`PublishOptions::deliver_at`] or [`delay`](PublishOptions::delay)).
    pub deliver_at: Option<Timestamp>,
    /// Keys of the subscriptions it was cancelled for ([`crate::cancel`]): their handlers never
    /// run for it.
    pub cancelled: Vec<String>,
    /// A cancel came while an attempt was running: no retry follows that attempt.
    pub cancel_requested: bool,
    /// Its ordering key ([`PublishOptions::ordering_key`]): events of one key are handled one
    /// at a time, in publish order.
    pub ordering_key: Option<String>,
}

fn raw_json<S: Serializer>(payload: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    match serde_json::value::RawValue::from_string(payload.to_owned()) {
        Ok(raw) => raw.serialize(s),
        Err(_) => s.serialize_str(payload),
    }
}

impl Event {
    /// Deserialises the payload.
    pub fn payload<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.payload).map_err(|e| Error::InvalidPayload(e.to_string()))
    }

    /// The payload as a JSON value.
    pub fn payload_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.payload).unwrap_or(serde_json::Value::Null)
    }

    /// The error of the most recent failed attempt.
    pub fn last_error(&self) -> Option<&str> {
        self.errors.last().map(String::as_str)
    }

    /// Attempts made so far, counting the one that is running.
    pub fn attempt(&self) -> u32 {
        self.retry_count.saturating_add(1)
    }

    /// Whether this is the event's first delivery: not a retry, not a dead letter's retry, not
    /// a replay's copy. Its consumer spans continue the producer's trace; the others link to it.
    #[cfg(feature = "opentelemetry")]
    pub(crate) fn first_delivery(&self) -> bool {
        self.retry_count == 0 && self.dlq_count == 0 && !self.metadata.contains_key(REPLAY_OF)
    }
}

/// An event to publish: type, serialised payload and metadata, checked on construction.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// The id the event will have.
    pub id: EventId,
    /// The event type.
    pub event_type: String,
    /// The payload as JSON text.
    pub payload: String,
    /// Metadata.
    pub metadata: Metadata,
    /// When and in what order it is delivered (default: due now, priority 0).
    pub options: PublishOptions,
}

impl NewEvent {
    /// Checks the type and serialises the payload. Fails with [`Error::InvalidEventType`] or
    /// [`Error::InvalidPayload`]; nothing is stored then.
    pub fn new<T: Serialize + ?Sized>(event_type: &str, payload: &T) -> Result<NewEvent> {
        validate_event_type(event_type)?;
        let payload =
            serde_json::to_string(payload).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        Ok(NewEvent {
            id: EventId::new(),
            event_type: event_type.to_owned(),
            payload,
            metadata: Metadata::new(),
            options: PublishOptions::default(),
        })
    }

    /// The metadata as the JSON text a stored row holds: `None` when there is none.
    pub(crate) fn metadata_json(&self) -> Result<Option<String>> {
        if self.metadata.is_empty() {
            return Ok(None);
        }
        serde_json::to_string(&self.metadata)
            .map(Some)
            .map_err(|err| Error::unserialisable("metadata", &err))
    }

    /// One of the bus's own `system.*` events (applications cannot make these).
    #[allow(dead_code)]
    pub(crate) fn system<T: Serialize + ?Sized>(event_type: &str, payload: &T) -> Result<NewEvent> {
        validate_system_type(event_type)?;
        let payload = serde_json::to_string(payload)
            .map_err(|e| Error::unserialisable("a system event's payload", &e))?;
        Ok(NewEvent {
            id: EventId::new(),
            event_type: event_type.to_owned(),
            payload,
            metadata: Metadata::new(),
            options: PublishOptions::default(),
        })
    }

    /// Checks the type, the payload's size against `max_payload_bytes` and the publish options:
    /// fails with [`Error::InvalidEventType`] (also for the reserved `system.*` types),
    /// [`Error::PayloadTooLarge`] or [`Error::Invalid`] (see [`PublishOptions::check`]). Every way of publishing runs this before anything is
    /// written.
    pub fn check(&self, max_payload_bytes: usize) -> Result<()> {
        if self.payload.len() > max_payload_bytes {
            return Err(Error::PayloadTooLarge {
                size: self.payload.len(),
                limit: max_payload_bytes,
            });
        }
        validate_event_type(&self.event_type)?;
        self.options.check()
    }

    /// Sets its publish options, replacing any set before.
    #[must_use]
    pub fn with_options(mut self, options: PublishOptions) -> Self {
        self.options = options;
        self
    }

    /// Not delivered before `at` ([`PublishOptions::deliver_at`]).
    #[must_use]
    pub fn deliver_at(mut self, at: Timestamp) -> Self {
        self.options = self.options.deliver_at(at);
        self
    }

    /// Not delivered before `delay` after it is published ([`PublishOptions::delay`]).
    #[must_use]
    pub fn delay(mut self, delay: std::time::Duration) -> Self {
        self.options = self.options.delay(delay);
        self
    }

    /// Its priority among due events ([`PublishOptions::priority`]).
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.options = self.options.priority(priority);
        self
    }

    /// A second publish with `key` within `window` returns this one's id and stores nothing
    /// ([`PublishOptions::dedup`]).
    #[must_use]
    pub fn dedup(mut self, key: impl Into<String>, window: std::time::Duration) -> Self {
        self.options = self.options.dedup(key, window);
        self
    }

    /// Handled one at a time and in publish order with the other events of `key`
    /// ([`PublishOptions::ordering_key`]).
    #[must_use]
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.options = self.options.ordering_key(key);
        self
    }

    /// When it is due if published at `now`, if later than `now` (a scheduled event).
    pub fn due_at(&self, now: Timestamp) -> Option<Timestamp> {
        self.options.due_at(now)
    }

    /// Uses `id` instead of a fresh one. Publishing an id that is already stored stores and
    /// delivers nothing and returns the id, so a caller that retries a publish (after a
    /// timeout, say) with the same id gets the event exactly once. Ids are UUIDs; use
    /// time-ordered ones ([`EventId::new`], UUIDv7) where you can: inserts then append to the
    /// table's index instead of landing at random places in it.
    #[must_use]
    pub fn with_id(mut self, id: EventId) -> Self {
        self.id = id;
        self
    }

    /// Adds a metadata entry.
    #[must_use]
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }

    /// The event as stored at `now` with `status` (a scheduled event, due later than `now`,
    /// is stored with status [`EventStatus::Scheduled`] whatever `status` says).
    pub fn into_event(self, status: EventStatus, now: Timestamp) -> Event {
        let due = self.due_at(now);
        let status = if due.is_some() {
            EventStatus::Scheduled
        } else {
            status
        };
        Event {
            id: self.id,
            event_type: self.event_type,
            payload: self.payload,
            status,
            retry_count: 0,
            errors: Vec::new(),
            metadata: self.metadata,
            delivered: Vec::new(),
            created_at: now,
            updated_at: now,
            next_attempt_at: due.or((status == EventStatus::Pending).then_some(now)),
            dlq_at: None,
            dlq_count: 0,
            priority: self.options.priority_value(),
            deliver_at: due,
            cancelled: Vec::new(),
            cancel_requested: false,
            ordering_key: self.options.ordering_key_value().map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn new_event_serialises_payload_and_checks_type() {
        let e = NewEvent::new("user.created", &serde_json::json!({"id": 7})).map(|e| e.payload);
        assert_eq!(e.ok().as_deref(), Some(r#"{"id":7}"#));
        assert!(matches!(
            NewEvent::new("", &1),
            Err(Error::InvalidEventType(..))
        ));
        let mut bad = HashMap::new();
        bad.insert(vec![1u8], 1);
        assert!(matches!(
            NewEvent::new("x", &bad),
            Err(Error::InvalidPayload(_))
        ));
    }

    #[test]
    fn status_round_trips_through_text() {
        for s in EventStatus::ALL {
            assert_eq!(s.as_str().parse::<EventStatus>().ok(), Some(s));
        }
        assert!("finished".parse::<EventStatus>().is_err());
    }

    #[test]
    fn ids_parse_and_reject_garbage() {
        let id = EventId::new();
        assert_eq!(id.to_string().parse::<EventId>().ok(), Some(id));
        assert!(matches!(
            "nope".parse::<EventId>(),
            Err(Error::InvalidId(_))
        ));
        assert!(EventId::new() > id, "v7 ids are time ordered");
    }

    #[test]
    fn event_serialises_payload_as_json_not_as_a_string() {
        let e = NewEvent::new("a.b", &serde_json::json!({"k": [1, 2]}))
            .map(|n| n.into_event(EventStatus::Pending, Timestamp(5)));
        let text = e
            .ok()
            .and_then(|e| serde_json::to_string(&e).ok())
            .unwrap_or_default();
        assert!(text.contains(r#""payload":{"k":[1,2]}"#), "{text}");
        assert!(text.contains(r#""type":"a.b""#), "{text}");
    }
}

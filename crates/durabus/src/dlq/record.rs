//! A dead-letter record as stored and listed: its status, its rounds of errors, its summary.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize, Serializer};

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;

/// Where a dead letter is in its lifecycle.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeadLetterStatus {
    /// Waiting: for its next auto retry, or for an operator.
    Pending,
    /// Sent back through normal delivery; the outcome of that round is not known yet.
    Retrying,
    /// Done with: delivered by a retry, or closed by an operator with a note.
    Resolved,
    /// Given up on: no more auto retries (a manual retry is still possible).
    Abandoned,
}

impl DeadLetterStatus {
    /// Every status.
    pub const ALL: [DeadLetterStatus; 4] = [
        DeadLetterStatus::Pending,
        DeadLetterStatus::Retrying,
        DeadLetterStatus::Resolved,
        DeadLetterStatus::Abandoned,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            DeadLetterStatus::Pending => "pending",
            DeadLetterStatus::Retrying => "retrying",
            DeadLetterStatus::Resolved => "resolved",
            DeadLetterStatus::Abandoned => "abandoned",
        }
    }

    /// Whether the record is still open (pending or retrying).
    pub fn is_open(self) -> bool {
        matches!(self, DeadLetterStatus::Pending | DeadLetterStatus::Retrying)
    }
}

impl fmt::Display for DeadLetterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for DeadLetterStatus {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        DeadLetterStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "status",
                    format!("{s:?} is not a dead-letter status"),
                    "pending, retrying, resolved or abandoned",
                )
            })
    }
}

/// One round of delivery attempts that ended in the dead-letter queue.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorRound {
    /// 1 for the first death, 2 after the first retry failed again, …
    pub round: u32,
    /// When the round ended.
    pub failed_at: Timestamp,
    /// Every attempt's error in the round, oldest first.
    pub errors: Vec<String>,
    /// The last error's chain of sources (the handler error's `source()`s), outermost first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub causes: Vec<String>,
    /// Who sent the dead letter back for this round (none for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_by: Option<String>,
}

/// A dead-letter record.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetter {
    /// The event's id (one record per event).
    pub event_id: EventId,
    /// Position in the queue: grows with each new record; keyset pagination and the upper
    /// bound of bulk operations use it.
    pub seq: i64,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload as JSON text (redacted where configured, in operator views).
    #[serde(serialize_with = "raw_json")]
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub payload: String,
    /// The key of the subscription whose handler failed last (none when attempts were used up
    /// by interruptions before any handler ran).
    pub subscription: Option<String>,
    /// The last error.
    pub last_error: String,
    /// The last error's chain of sources.
    pub causes: Vec<String>,
    /// Every round's errors, oldest first; a retry never erases them.
    pub error_history: Vec<ErrorRound>,
    /// The failure group (see [`fingerprint`](super::fingerprint)).
    pub fingerprint: String,
    /// Attempts made in the last round.
    pub attempts: u32,
    /// Where the record is in its lifecycle.
    pub status: DeadLetterStatus,
    /// Auto retries made.
    pub auto_retry_count: u32,
    /// Manual retries made.
    pub manual_retry_count: u32,
    /// When the next auto retry is due; `None`: manual only (or not pending).
    pub next_auto_retry_at: Option<Timestamp>,
    /// When the event first became a dead letter.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// When it was last sent back.
    pub last_retry_at: Option<Timestamp>,
    /// Who sent it back last (an operator, or `auto-retry`).
    pub last_retry_by: Option<String>,
    /// When it was resolved or abandoned.
    pub resolved_at: Option<Timestamp>,
    /// Who resolved or abandoned it (`auto-retry` or the retry's actor when a retry delivered it).
    pub resolved_by: Option<String>,
    /// The operator's note on resolving or abandoning.
    pub resolution_note: Option<String>,
    /// The event's ordering key, if it had one.
    pub ordering_key: Option<String>,
    /// How many later events of its ordering key were waiting when it died.
    pub key_waiting: Option<u64>,
    /// The actions its status allows, by name ([`Action::allowed`](super::Action::allowed)):
    /// what an operator's screen offers.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub actions: Vec<&'static str>,
}

/// A dead-letter record as listed: everything but its payload, causes and error history (read
/// one record for those), so a page stays small and quick to read.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterSummary {
    /// The event's id.
    pub event_id: EventId,
    /// Position in the queue (keyset pagination).
    pub seq: i64,
    /// The event's type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The subscription whose handler failed last.
    pub subscription: Option<String>,
    /// The last error.
    pub last_error: String,
    /// The failure group.
    pub fingerprint: String,
    /// Attempts in the last round.
    pub attempts: u32,
    /// Rounds of delivery that ended in the queue (1 + failed retries).
    pub rounds: u32,
    /// Where the record is in its lifecycle.
    pub status: DeadLetterStatus,
    /// Auto retries made.
    pub auto_retry_count: u32,
    /// Manual retries made.
    pub manual_retry_count: u32,
    /// When the next auto retry is due.
    pub next_auto_retry_at: Option<Timestamp>,
    /// When it first became a dead letter.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// Who sent it back last.
    pub last_retry_by: Option<String>,
    /// Who resolved or abandoned it.
    pub resolved_by: Option<String>,
    /// The actions its status allows, by name ([`Action::allowed`](super::Action::allowed)).
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<String>))]
    pub actions: Vec<&'static str>,
}

fn raw_json<S: Serializer>(payload: &str, s: S) -> std::result::Result<S::Ok, S::Error> {
    match serde_json::value::RawValue::from_string(payload.to_owned()) {
        Ok(raw) => raw.serialize(s),
        Err(_) => s.serialize_str(payload),
    }
}

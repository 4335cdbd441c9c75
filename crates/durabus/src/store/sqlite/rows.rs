//! Reading events out of SQLite rows.

use rusqlite::Row;

use crate::clock::Timestamp;
use crate::event::{Event, EventId, EventStatus, Metadata};

/// The columns every event query selects, in the order [`event_from_row`] reads them.
pub const EVENT_COLUMNS: &str = "id, type, payload, status, retry_count, last_error, metadata, \
     delivered, created_at, updated_at, next_attempt_at, dlq_at, dlq_count, priority, deliver_at, cancelled, cancel_requested, ordering_key";

pub(super) fn corrupt(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, rusqlite::types::Type::Text, what.into())
}

/// Parses the JSON text of column `col`; NULL is the empty value.
fn parse_json<T: serde::de::DeserializeOwned + Default>(
    text: Option<String>,
    col: usize,
) -> rusqlite::Result<T> {
    match text {
        None => Ok(T::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| corrupt(col, e.to_string())),
    }
}

/// [`EVENT_COLUMNS`] qualified with the table alias `alias` (for joins).
pub fn event_columns_of(alias: &str) -> String {
    EVENT_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How many columns [`EVENT_COLUMNS`] names: a statement's own columns after them start here.
pub const EVENT_COLUMN_COUNT: usize = 18;

/// Decodes one row selected with [`EVENT_COLUMNS`].
pub fn event_from_row(row: &Row<'_>) -> rusqlite::Result<Event> {
    undecoded_from_row(row)?.decode()
}

/// An event row whose JSON columns (errors, metadata, deliveries, cancellations) are still
/// text: a claim reads its rows on the writer's thread, every write's one thread, and leaves
/// parsing them to the claiming task ([`Undecoded::decode`]).
pub struct Undecoded {
    event: Event,
    errors: Option<String>,
    metadata: Option<String>,
    delivered: Option<String>,
    cancelled: Option<String>,
}

impl Undecoded {
    /// The event's columns that are not JSON (its JSON ones empty until decoded).
    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The event's columns that are not JSON, to change (its JSON ones empty until decoded).
    pub fn event_mut(&mut self) -> &mut Event {
        &mut self.event
    }

    /// The event's id (readable whether its JSON columns are or not).
    pub fn id(&self) -> crate::event::EventId {
        self.event.id
    }

    /// The event's due time, if it has one.
    pub fn next_attempt_at(&self) -> Option<crate::clock::Timestamp> {
        self.event.next_attempt_at
    }

    /// When the event was published.
    pub fn created_at(&self) -> crate::clock::Timestamp {
        self.event.created_at
    }

    /// The event, its JSON columns parsed.
    pub fn decode(self) -> rusqlite::Result<Event> {
        Ok(Event {
            errors: parse_json(self.errors, 5)?,
            metadata: parse_json(self.metadata, 6)?,
            delivered: parse_json(self.delivered, 7)?,
            cancelled: parse_json(self.cancelled, 15)?,
            ..self.event
        })
    }
}

/// Reads one row selected with [`EVENT_COLUMNS`], its JSON columns left as text.
pub fn undecoded_from_row(row: &Row<'_>) -> rusqlite::Result<Undecoded> {
    let event = bare_event(row)?;
    Ok(Undecoded {
        event,
        errors: row.get(5)?,
        metadata: row.get(6)?,
        delivered: row.get(7)?,
        cancelled: row.get(15)?,
    })
}

/// The columns of an event row that are not JSON.
fn bare_event(row: &Row<'_>) -> rusqlite::Result<Event> {
    let id: String = row.get(0)?;
    let status: String = row.get(3)?;
    Ok(Event {
        id: id
            .parse::<EventId>()
            .map_err(|e| corrupt(0, e.to_string()))?,
        event_type: row.get(1)?,
        payload: row.get(2)?,
        status: status
            .parse::<EventStatus>()
            .map_err(|e| corrupt(3, e.to_string()))?,
        retry_count: row.get(4)?,
        errors: Vec::new(),
        metadata: Metadata::new(),
        delivered: Vec::new(),
        created_at: Timestamp(row.get(8)?),
        updated_at: Timestamp(row.get(9)?),
        next_attempt_at: row.get::<_, Option<i64>>(10)?.map(Timestamp),
        dlq_at: row.get::<_, Option<i64>>(11)?.map(Timestamp),
        dlq_count: row.get(12)?,
        priority: row.get(13)?,
        deliver_at: row.get::<_, Option<i64>>(14)?.map(Timestamp),
        cancelled: Vec::new(),
        cancel_requested: row.get(16)?,
        ordering_key: row.get(17)?,
    })
}

/// JSON text of a list, or NULL for an empty one.
pub fn json_list(items: &[String]) -> crate::error::Result<Option<String>> {
    if items.is_empty() {
        return Ok(None);
    }
    serde_json::to_string(items)
        .map(Some)
        .map_err(|e| crate::error::Error::unserialisable("a list of strings", &e))
}

/// Reads a status column.
pub fn status_col(row: &Row<'_>, col: usize) -> rusqlite::Result<EventStatus> {
    let text: String = row.get(col)?;
    text.parse()
        .map_err(|e: crate::error::Error| corrupt(col, e.to_string()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A row of [`EVENT_COLUMNS`] with `metadata` as its metadata text.
    fn row_with(metadata: &str) -> rusqlite::Result<Undecoded> {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.query_row(
            "SELECT '0192f6c2-8f3a-7b1e-9c4d-1a2b3c4d5e6f', 'order.paid', '{}', 'processing', 1, \
             '[\"boom\"]', ?1, '[\"sub\"]', 10, 20, NULL, NULL, 0, 3, NULL, NULL, 0, 'k'",
            [metadata],
            undecoded_from_row,
        )
    }

    /// A claim's rows, decoded off the writer's thread, come out as `event_from_row` reads them.
    #[test]
    fn deferred_decoding_reads_what_a_direct_read_does() {
        let event = row_with(
            r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#,
        )
        .unwrap()
        .decode()
        .unwrap();
        assert_eq!(event.errors, vec!["boom".to_string()]);
        assert_eq!(event.delivered, vec!["sub".to_string()]);
        assert_eq!(event.metadata.len(), 1);
        assert_eq!(event.priority, 3);
        assert_eq!(event.ordering_key.as_deref(), Some("k"));
    }

    /// Metadata that is not JSON is an error naming its column when it is decoded.
    #[test]
    fn corrupt_json_is_an_error_at_decoding() {
        let read = row_with("{not json").unwrap();
        match read.decode() {
            Err(rusqlite::Error::FromSqlConversionFailure(6, _, _)) => {}
            other => panic!("expected a conversion failure of column 6, got {other:?}"),
        }
    }

    #[test]
    fn the_column_count_matches_the_column_list() {
        assert_eq!(
            super::EVENT_COLUMNS.split(',').count(),
            super::EVENT_COLUMN_COUNT
        );
    }
}

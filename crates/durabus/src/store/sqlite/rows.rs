//! Reading events out of SQLite rows.

use rusqlite::Row;

use crate::clock::Timestamp;
use crate::event::{Event, EventId, EventStatus};

/// The columns every event query selects, in the order [`event_from_row`] reads them.
pub const EVENT_COLUMNS: &str = "id, type, payload, status, retry_count, last_error, metadata, \
     delivered, created_at, updated_at, next_attempt_at, dlq_at, dlq_count, priority, deliver_at, cancelled, cancel_requested, ordering_key";

pub(super) fn corrupt(col: usize, what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, rusqlite::types::Type::Text, what.into())
}

fn json_col<T: serde::de::DeserializeOwned + Default>(
    row: &Row<'_>,
    col: usize,
) -> rusqlite::Result<T> {
    match row.get::<_, Option<String>>(col)? {
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
        errors: json_col(row, 5)?,
        metadata: json_col(row, 6)?,
        delivered: json_col(row, 7)?,
        created_at: Timestamp(row.get(8)?),
        updated_at: Timestamp(row.get(9)?),
        next_attempt_at: row.get::<_, Option<i64>>(10)?.map(Timestamp),
        dlq_at: row.get::<_, Option<i64>>(11)?.map(Timestamp),
        dlq_count: row.get(12)?,
        priority: row.get(13)?,
        deliver_at: row.get::<_, Option<i64>>(14)?.map(Timestamp),
        cancelled: json_col(row, 15)?,
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
mod tests {
    #[test]
    fn the_column_count_matches_the_column_list() {
        assert_eq!(
            super::EVENT_COLUMNS.split(',').count(),
            super::EVENT_COLUMN_COUNT
        );
    }
}

//! Reading dead-letter records and their summaries from SQLite rows.

use rusqlite::Row;

use super::rows::corrupt;
use crate::clock::Timestamp;
use crate::dlq::{DeadLetter, DeadLetterStatus, DeadLetterSummary};
use crate::error::Error;

pub(super) fn ts(v: Option<i64>) -> Option<Timestamp> {
    v.map(Timestamp)
}

pub(super) fn json<T: serde::de::DeserializeOwned + Default>(
    row: &Row<'_>,
    col: usize,
) -> rusqlite::Result<T> {
    match row.get::<_, Option<String>>(col)? {
        None => Ok(T::default()),
        Some(text) => serde_json::from_str(&text).map_err(|e| corrupt(col, e.to_string())),
    }
}

pub(super) fn status(row: &Row<'_>, col: usize) -> rusqlite::Result<DeadLetterStatus> {
    let text: String = row.get(col)?;
    text.parse().map_err(|e: Error| corrupt(col, e.to_string()))
}

/// Decodes a row selected with [`DL_COLUMNS`].
pub(super) fn dead_letter_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetter> {
    let id: String = row.get(0)?;
    Ok(DeadLetter {
        event_id: id.parse().map_err(|e: Error| corrupt(0, e.to_string()))?,
        seq: row.get(1)?,
        event_type: row.get(2)?,
        payload: row.get(3)?,
        subscription: row.get(4)?,
        last_error: row.get(5)?,
        causes: json(row, 6)?,
        error_history: json(row, 7)?,
        fingerprint: row.get(8)?,
        attempts: row.get(9)?,
        status: status(row, 10)?,
        auto_retry_count: row.get(11)?,
        manual_retry_count: row.get(12)?,
        next_auto_retry_at: ts(row.get(13)?),
        created_at: Timestamp(row.get(14)?),
        updated_at: Timestamp(row.get(15)?),
        last_retry_at: ts(row.get(16)?),
        last_retry_by: row.get(17)?,
        resolved_at: ts(row.get(18)?),
        resolved_by: row.get(19)?,
        resolution_note: row.get(20)?,
        ordering_key: row.get(22)?,
        key_waiting: row.get(23)?,
        actions: crate::dlq::Action::allowed(status(row, 10)?),
    })
}

pub(super) fn summary_from_row(row: &Row<'_>) -> rusqlite::Result<DeadLetterSummary> {
    let id: String = row.get(0)?;
    Ok(DeadLetterSummary {
        event_id: id.parse().map_err(|e: Error| corrupt(0, e.to_string()))?,
        seq: row.get(1)?,
        event_type: row.get(2)?,
        subscription: row.get(3)?,
        last_error: row.get(4)?,
        fingerprint: row.get(5)?,
        attempts: row.get(6)?,
        rounds: row.get(7)?,
        status: status(row, 8)?,
        auto_retry_count: row.get(9)?,
        manual_retry_count: row.get(10)?,
        next_auto_retry_at: ts(row.get(11)?),
        created_at: Timestamp(row.get(12)?),
        updated_at: Timestamp(row.get(13)?),
        last_retry_by: row.get(14)?,
        resolved_by: row.get(15)?,
        actions: crate::dlq::Action::allowed(status(row, 8)?),
    })
}

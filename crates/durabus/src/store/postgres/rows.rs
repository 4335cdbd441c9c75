//! Reading events out of PostgreSQL rows.

use sqlx::Row;
use sqlx::postgres::PgRow;
use uuid::Uuid;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{Event, EventId, EventStatus};

fn json_col<T: serde::de::DeserializeOwned + Default>(row: &PgRow, col: &str) -> Result<T> {
    match row.try_get::<Option<String>, _>(col)? {
        None => Ok(T::default()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| Error::corrupt(format!("column {col} holds invalid JSON"), e)),
    }
}

/// Decodes one row selected with [`super::sql::EVENT_COLUMNS`].
pub fn event(row: &PgRow) -> Result<Event> {
    let status: String = row.try_get("status")?;
    let retry_count: i32 = row.try_get("retry_count")?;
    Ok(Event {
        id: EventId(row.try_get::<Uuid, _>("id")?),
        event_type: row.try_get("type")?,
        payload: row.try_get("payload")?,
        status: status.parse::<EventStatus>()?,
        retry_count: u32::try_from(retry_count).unwrap_or(0),
        errors: json_col(row, "last_error")?,
        metadata: json_col(row, "metadata")?,
        delivered: json_col(row, "delivered")?,
        created_at: Timestamp(row.try_get("created_at")?),
        updated_at: Timestamp(row.try_get("updated_at")?),
        next_attempt_at: row
            .try_get::<Option<i64>, _>("next_attempt_at")?
            .map(Timestamp),
        dlq_at: row.try_get::<Option<i64>, _>("dlq_at")?.map(Timestamp),
        dlq_count: u32::try_from(row.try_get::<i32, _>("dlq_count")?).unwrap_or(0),
        priority: row.try_get::<i16, _>("priority")?,
        deliver_at: row.try_get::<Option<i64>, _>("deliver_at")?.map(Timestamp),
        cancelled: json_col(row, "cancelled")?,
        cancel_requested: row.try_get("cancel_requested")?,
        ordering_key: row.try_get("ordering_key")?,
    })
}

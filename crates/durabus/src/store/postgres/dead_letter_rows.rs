//! Reading dead-letter records and their summaries from PostgreSQL rows.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::q;
use super::sql_ops::PgOpsSql;
use crate::clock::Timestamp;
use crate::dlq::{DeadLetter, DeadLetterSummary, State};
use crate::error::{Error, Result};
use crate::event::EventId;

pub(super) fn opt_ts(row: &PgRow, col: &str) -> Result<Option<Timestamp>> {
    Ok(row.try_get::<Option<i64>, _>(col)?.map(Timestamp))
}

pub(super) fn json<T: serde::de::DeserializeOwned + Default>(row: &PgRow, col: &str) -> Result<T> {
    match row.try_get::<Option<String>, _>(col)? {
        None => Ok(T::default()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| Error::corrupt(format!("column {col} holds invalid JSON"), e)),
    }
}

pub(super) fn u32_col(row: &PgRow, col: &str) -> Result<u32> {
    Ok(u32::try_from(row.try_get::<i32, _>(col)?).unwrap_or(0))
}

/// Decodes a row selected with `DL_COLUMNS`, with its round count.
pub(super) fn dead_letter(row: &PgRow) -> Result<(DeadLetter, u32)> {
    let status: String = row.try_get("status")?;
    Ok((
        DeadLetter {
            event_id: EventId(row.try_get::<Uuid, _>("event_id")?),
            seq: row.try_get("seq")?,
            event_type: row.try_get("event_type")?,
            payload: row.try_get("payload")?,
            subscription: row.try_get("subscription")?,
            last_error: row.try_get("last_error")?,
            causes: json(row, "causes")?,
            error_history: json(row, "error_history")?,
            fingerprint: row.try_get("fingerprint")?,
            attempts: u32_col(row, "attempts")?,
            status: status.parse()?,
            auto_retry_count: u32_col(row, "auto_retry_count")?,
            manual_retry_count: u32_col(row, "manual_retry_count")?,
            next_auto_retry_at: opt_ts(row, "next_auto_retry_at")?,
            created_at: Timestamp(row.try_get("created_at")?),
            updated_at: Timestamp(row.try_get("updated_at")?),
            last_retry_at: opt_ts(row, "last_retry_at")?,
            last_retry_by: row.try_get("last_retry_by")?,
            resolved_at: opt_ts(row, "resolved_at")?,
            resolved_by: row.try_get("resolved_by")?,
            resolution_note: row.try_get("resolution_note")?,
            ordering_key: row.try_get("ordering_key")?,
            key_waiting: row
                .try_get::<Option<i64>, _>("key_waiting")?
                .map(|n| u64::try_from(n).unwrap_or(0)),
            actions: crate::dlq::Action::allowed(status.parse()?),
        },
        u32_col(row, "rounds")?,
    ))
}

/// Decodes a row selected with `DL_SUMMARY_COLUMNS`.
pub(super) fn summary(row: &PgRow) -> Result<DeadLetterSummary> {
    let status: String = row.try_get("status")?;
    Ok(DeadLetterSummary {
        event_id: EventId(row.try_get::<Uuid, _>("event_id")?),
        seq: row.try_get("seq")?,
        event_type: row.try_get("event_type")?,
        subscription: row.try_get("subscription")?,
        last_error: row.try_get("last_error")?,
        fingerprint: row.try_get("fingerprint")?,
        attempts: u32_col(row, "attempts")?,
        rounds: u32_col(row, "rounds")?,
        status: status.parse()?,
        auto_retry_count: u32_col(row, "auto_retry_count")?,
        manual_retry_count: u32_col(row, "manual_retry_count")?,
        next_auto_retry_at: opt_ts(row, "next_auto_retry_at")?,
        created_at: Timestamp(row.try_get("created_at")?),
        updated_at: Timestamp(row.try_get("updated_at")?),
        last_retry_by: row.try_get("last_retry_by")?,
        resolved_by: row.try_get("resolved_by")?,
        actions: crate::dlq::Action::allowed(status.parse()?),
    })
}

pub(super) fn state_of(d: &DeadLetter, rounds: u32) -> State {
    State {
        status: d.status,
        auto_retry_count: d.auto_retry_count,
        manual_retry_count: d.manual_retry_count,
        next_auto_retry_at: d.next_auto_retry_at,
        created_at: d.created_at,
        last_retry_at: d.last_retry_at,
        last_retry_by: d.last_retry_by.clone(),
        resolved_at: d.resolved_at,
        resolved_by: d.resolved_by.clone(),
        resolution_note: d.resolution_note.clone(),
        rounds,
        round_started: false,
    }
}

pub(super) fn i32_of(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

pub(super) async fn lock(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
) -> Result<Option<(DeadLetter, u32)>> {
    q(&ops.dl_lock)
        .bind(id.0)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(dead_letter)
        .transpose()
}

pub(super) async fn get(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    id: EventId,
) -> Result<Option<DeadLetter>> {
    Ok(q(&ops.dl_get)
        .bind(id.0)
        .fetch_optional(conn)
        .await?
        .as_ref()
        .map(dead_letter)
        .transpose()?
        .map(|(d, _)| d))
}

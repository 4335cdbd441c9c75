//! The payload store on PostgreSQL.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::insert::SnapshotColumns;
use super::sql_ops::PgOpsSql;
use super::{PgStore, q};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::payload::{Deletion, NewSnapshot, PayloadConfig, Retention, Snapshot, StoredSnapshot};
use crate::store::{PayloadStore, SnapshotKey};

/// Writes `snapshots` in the caller's transaction.
pub(super) async fn put_in(
    conn: &mut PgConnection,
    ops: &PgOpsSql,
    snapshots: &[&NewSnapshot],
) -> Result<()> {
    SnapshotColumns::of(snapshots)
        .bind(q(&ops.pl_put))
        .execute(conn)
        .await?;
    Ok(())
}

fn u64_col(row: &PgRow, col: &str) -> Result<u64> {
    Ok(u64::try_from(row.try_get::<i64, _>(col)?).unwrap_or(0))
}

fn stored(row: &PgRow) -> Result<StoredSnapshot> {
    let deleted_at: Option<i64> = row.try_get("deleted_at")?;
    Ok(StoredSnapshot {
        meta: Snapshot {
            event_id: EventId(row.try_get::<Uuid, _>("event_id")?),
            stage: row.try_get("stage")?,
            created_at: Timestamp(row.try_get("created_at")?),
            event_type: row.try_get("event_type")?,
            size_original: u64_col(row, "size_original")?,
            size_compressed: u64_col(row, "size_compressed")?,
            contains_media: row.try_get("contains_media")?,
            contains_base64: row.try_get("contains_base64")?,
            payload: None,
            deleted: match deleted_at {
                None => None,
                Some(at) => Some(Deletion {
                    deleted_at: Timestamp(at),
                    deleted_by: row
                        .try_get::<Option<String>, _>("deleted_by")?
                        .unwrap_or_default(),
                    reason: row
                        .try_get::<Option<String>, _>("delete_reason")?
                        .unwrap_or_default(),
                }),
            },
        },
        blob: row.try_get("payload")?,
    })
}

fn config(row: &PgRow) -> Result<PayloadConfig> {
    let list = |col: &str| -> Result<Vec<String>> {
        let text: String = row.try_get(col)?;
        serde_json::from_str(&text).map_err(|e| Error::corrupt(format!("payload_config.{col}"), e))
    };
    Ok(PayloadConfig {
        event_type: row.try_get("event_type")?,
        stages: list("stages")?,
        retention_days: u32::try_from(row.try_get::<i64, _>("retention_days")?).unwrap_or(0),
        redact: list("redact")?,
        redact_before_store: row.try_get("redact_before_store")?,
        updated_at: Timestamp(row.try_get("updated_at")?),
        updated_by: row.try_get("updated_by")?,
    })
}

#[async_trait]
impl PayloadStore for PgStore {
    async fn payload_put(&self, snapshots: Vec<NewSnapshot>) -> Result<()> {
        self.noted(async {
            self.check()?;
            if snapshots.is_empty() {
                return Ok(());
            }
            let refs: Vec<&NewSnapshot> = snapshots.iter().collect();
            let mut conn = self.pool.acquire().await?;
            put_in(&mut conn, &self.sql.ops, &refs).await
        })
        .await
    }

    async fn payload_list(&self, event_id: EventId) -> Result<Vec<StoredSnapshot>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.pl_list)
                .bind(event_id.0)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(stored)
                .collect()
        })
        .await
    }

    async fn payload_soft_delete(
        &self,
        event_id: EventId,
        reason: &str,
        actor: &str,
        now: Timestamp,
    ) -> Result<u64> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.ops.pl_soft_delete)
                .bind(event_id.0)
                .bind(now.as_millis())
                .bind(actor)
                .bind(reason)
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected())
        })
        .await
    }

    async fn payload_config_list(&self) -> Result<Vec<PayloadConfig>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.ops.pl_config_list)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(config)
                .collect()
        })
        .await
    }

    async fn payload_config_set(&self, c: PayloadConfig) -> Result<()> {
        self.noted(async {
            self.check()?;
            let list = |v: &[String]| {
                serde_json::to_string(v).map_err(|e| Error::unserialisable("a list of strings", &e))
            };
            q(&self.sql.ops.pl_config_set)
                .bind(&c.event_type)
                .bind(list(&c.stages)?)
                .bind(i64::from(c.retention_days))
                .bind(list(&c.redact)?)
                .bind(c.redact_before_store)
                .bind(c.updated_at.as_millis())
                .bind(&c.updated_by)
                .execute(&mut *self.pool.acquire().await?)
                .await?;
            Ok(())
        })
        .await
    }

    async fn payload_config_delete(&self, event_type: &str) -> Result<bool> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.ops.pl_config_delete)
                .bind(event_type)
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected()
                == 1)
        })
        .await
    }

    async fn payload_expired(
        &self,
        retention: &Retention,
        after: Option<SnapshotKey>,
        scan: usize,
    ) -> Result<(Vec<SnapshotKey>, Option<SnapshotKey>)> {
        self.noted(async {
            self.check()?;
            let limit = i64::try_from(scan).unwrap_or(i64::MAX);
            let rows = match &after {
                None => {
                    q(&self.sql.ops.pl_scan_first)
                        .bind(limit)
                        .fetch_all(&mut *self.pool.acquire().await?)
                        .await?
                }
                Some(k) => {
                    q(&self.sql.ops.pl_scan_after)
                        .bind(k.event_id.0)
                        .bind(&k.stage)
                        .bind(k.created_at.as_millis())
                        .bind(limit)
                        .fetch_all(&mut *self.pool.acquire().await?)
                        .await?
                }
            };
            let mut keys = Vec::with_capacity(rows.len());
            for r in &rows {
                keys.push((
                    SnapshotKey {
                        event_id: EventId(r.try_get::<Uuid, _>("event_id")?),
                        stage: r.try_get("stage")?,
                        created_at: Timestamp(r.try_get("created_at")?),
                    },
                    r.try_get::<String, _>("event_type")?,
                    r.try_get::<Option<i64>, _>("deleted_at")?.is_some(),
                ));
            }
            let next = (keys.len() == scan)
                .then(|| keys.last().map(|(k, _, _)| k.clone()))
                .flatten();
            let expired = keys
                .into_iter()
                .filter(|(k, t, deleted)| !deleted && k.created_at <= retention.cutoff(t))
                .map(|(k, _, _)| k)
                .collect();
            Ok((expired, next))
        })
        .await
    }

    async fn payload_delete(&self, keys: Vec<SnapshotKey>) -> Result<u64> {
        self.noted(async {
            self.check()?;
            if keys.is_empty() {
                return Ok(0);
            }
            Ok(q(&self.sql.ops.pl_delete)
                .bind(keys.iter().map(|k| k.event_id.0).collect::<Vec<_>>())
                .bind(keys.iter().map(|k| k.stage.clone()).collect::<Vec<_>>())
                .bind(
                    keys.iter()
                        .map(|k| k.created_at.as_millis())
                        .collect::<Vec<_>>(),
                )
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected())
        })
        .await
    }

    async fn payload_purge_deleted(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.ops.pl_purge_deleted)
                .bind(cutoff.as_millis())
                .bind(i64::try_from(limit).unwrap_or(i64::MAX))
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected())
        })
        .await
    }
}

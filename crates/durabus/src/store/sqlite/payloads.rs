//! The payload store on SQLite.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::rows::corrupt;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::payload::detect::ContentFlags;
use crate::payload::{
    Deletion, NewSnapshot, PayloadConfig, Retention, STAGE_PUBLISHED, Snapshot, StoredSnapshot,
};
use crate::store::{PayloadStore, SnapshotKey};

/// Writes `snapshots` on `conn` (the writer's transaction).
pub(super) fn put<'a>(
    conn: &Connection,
    sql: &Sql,
    snapshots: impl IntoIterator<Item = &'a NewSnapshot>,
) -> Result<()> {
    let mut snapshots = snapshots.into_iter().peekable();
    if snapshots.peek().is_none() {
        return Ok(());
    }
    let mut stmt = conn.prepare_cached(&sql.pl_put)?;
    let mut id = uuid::Uuid::encode_buffer();
    for s in snapshots {
        if s.shared {
            return Err(Error::Internal(format!(
                "the shared snapshot of event {} can only be written with its event",
                s.event_id
            )));
        }
        stmt.execute(params![
            s.event_id.0.hyphenated().encode_lower(&mut id) as &str,
            s.stage,
            s.created_at.as_millis(),
            s.event_type,
            s.blob,
            s.size_original,
            s.blob.len() as u64,
            s.flags.contains_media,
            s.flags.contains_base64,
        ])?;
    }
    Ok(())
}

/// An event's shared `published` snapshot: its type, payload text and creation time.
fn shared_of(
    conn: &Connection,
    sql: &Sql,
    id: &str,
) -> rusqlite::Result<Option<(String, String, i64)>> {
    conn.prepare_cached(&sql.pl_shared_get)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
}

/// The shared snapshot of event `event_id` compressed into an ordinary one (reads of
/// snapshots are rare: publishing did not pay for it).
fn filled(
    event_id: EventId,
    (event_type, text, created_at): (String, String, i64),
) -> Result<NewSnapshot> {
    let mut s = NewSnapshot {
        event_id,
        event_type,
        stage: STAGE_PUBLISHED.to_owned(),
        blob: Vec::new(),
        size_original: 0,
        flags: ContentFlags::default(),
        created_at: Timestamp(created_at),
        shared: true,
    };
    s.fill(&text)?;
    Ok(s)
}

/// The shared snapshot of event `event_id` as the store returns every snapshot.
fn shared_stored(event_id: EventId, shared: (String, String, i64)) -> Result<StoredSnapshot> {
    let s = filled(event_id, shared)?;
    Ok(StoredSnapshot {
        meta: Snapshot {
            event_id,
            stage: s.stage,
            created_at: s.created_at,
            event_type: s.event_type,
            size_original: s.size_original,
            size_compressed: s.blob.len() as u64,
            contains_media: s.flags.contains_media,
            contains_base64: s.flags.contains_base64,
            payload: None,
            deleted: None,
        },
        blob: Some(s.blob),
    })
}

/// Before the row of event `id` is deleted: its shared `published` snapshot, if it has one,
/// gets a compressed row of its own, so it outlives the event as a copied one would.
pub(super) fn keep_shared(conn: &Connection, sql: &Sql, id: &str) -> Result<()> {
    match shared_of(conn, sql, id)? {
        Some(shared) => put(conn, sql, [&filled(id.parse()?, shared)?]),
        None => Ok(()),
    }
}

fn stored_from_row(row: &Row<'_>) -> rusqlite::Result<StoredSnapshot> {
    let id: String = row.get(0)?;
    let deleted_at: Option<i64> = row.get(9)?;
    Ok(StoredSnapshot {
        meta: Snapshot {
            event_id: id.parse().map_err(|e: Error| corrupt(0, e.to_string()))?,
            stage: row.get(1)?,
            created_at: Timestamp(row.get(2)?),
            event_type: row.get(3)?,
            size_original: row.get(5)?,
            size_compressed: row.get(6)?,
            contains_media: row.get(7)?,
            contains_base64: row.get(8)?,
            payload: None,
            deleted: match deleted_at {
                None => None,
                Some(at) => Some(Deletion {
                    deleted_at: Timestamp(at),
                    deleted_by: row.get::<_, Option<String>>(10)?.unwrap_or_default(),
                    reason: row.get::<_, Option<String>>(11)?.unwrap_or_default(),
                }),
            },
        },
        blob: row.get(4)?,
    })
}

fn config_from_row(row: &Row<'_>) -> rusqlite::Result<PayloadConfig> {
    let list = |col: usize| -> rusqlite::Result<Vec<String>> {
        let text: String = row.get(col)?;
        serde_json::from_str(&text).map_err(|e| corrupt(col, e.to_string()))
    };
    Ok(PayloadConfig {
        event_type: row.get(0)?,
        stages: list(1)?,
        retention_days: row.get(2)?,
        redact: list(3)?,
        redact_before_store: row.get(4)?,
        updated_at: Timestamp(row.get(5)?),
        updated_by: row.get(6)?,
    })
}

struct Put(Vec<NewSnapshot>);

impl WriteOp for Put {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        put(conn, sql, &self.0)
    }
}

struct SoftDelete {
    event_id: EventId,
    reason: String,
    actor: String,
}

impl SoftDelete {
    fn delete(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        let id = self.event_id.to_string();
        let mut n = conn.prepare_cached(&sql.pl_soft_delete)?.execute(params![
            id,
            now.as_millis(),
            self.actor,
            self.reason
        ])? as u64;
        // A shared snapshot: the mark is cleared and an audit row written (its bytes are the
        // event's payload, which stays with the event).
        if let Some((event_type, text, created_at)) = shared_of(conn, sql, &id)? {
            let flags = crate::payload::detect::detect(&text);
            conn.prepare_cached(&sql.pl_shared_deleted)?
                .execute(params![
                    id,
                    STAGE_PUBLISHED,
                    created_at,
                    event_type,
                    text.len() as u64,
                    flags.contains_media,
                    flags.contains_base64,
                    now.as_millis(),
                    self.actor,
                    self.reason
                ])?;
            conn.prepare_cached(&sql.pl_shared_clear)?.execute([&id])?;
            n += 1;
        }
        Ok(n)
    }
}

impl WriteOp for SoftDelete {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, now: Timestamp) -> Result<u64> {
        // Freed content is overwritten with zeros, not left in free pages: the bytes are gone
        // from the database file, not only hidden.
        conn.pragma_update(None, "secure_delete", "ON")?;
        let n = self.delete(conn, sql, now);
        conn.pragma_update(None, "secure_delete", "OFF")?;
        n
    }
}

struct ConfigSet(PayloadConfig);

impl WriteOp for ConfigSet {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        let c = &self.0;
        let list = |v: &[String]| {
            serde_json::to_string(v).map_err(|e| Error::unserialisable("a list of strings", &e))
        };
        conn.prepare_cached(&sql.pl_config_set)?.execute(params![
            c.event_type,
            list(&c.stages)?,
            c.retention_days,
            list(&c.redact)?,
            c.redact_before_store,
            c.updated_at.as_millis(),
            c.updated_by
        ])?;
        Ok(())
    }
}

struct ConfigDelete(String);

impl WriteOp for ConfigDelete {
    type Reply = bool;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<bool> {
        Ok(conn
            .prepare_cached(&sql.pl_config_delete)?
            .execute([&self.0])?
            == 1)
    }
}

struct Delete(Vec<SnapshotKey>);

impl WriteOp for Delete {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<u64> {
        let mut stmt = conn.prepare_cached(&sql.pl_delete)?;
        let mut n = 0;
        for k in &self.0 {
            n += stmt.execute(params![
                k.event_id.to_string(),
                k.stage,
                k.created_at.as_millis()
            ])? as u64;
        }
        Ok(n)
    }
}

/// One chunk of the retention of shared snapshots: the events after rowid `after`, at most
/// `scan`; the marks of those past their type's retention are cleared.
struct ExpireShared {
    retention: Retention,
    after: i64,
    scan: usize,
}

impl WriteOp for ExpireShared {
    type Reply = (u64, Option<i64>);

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<(u64, Option<i64>)> {
        let rows: Vec<(i64, String, String, i64, bool)> = conn
            .prepare_cached(&sql.pl_shared_scan)?
            .query_map(
                params![self.after, i64::try_from(self.scan).unwrap_or(i64::MAX)],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let next = (rows.len() == self.scan)
            .then(|| rows.last().map(|r| r.0))
            .flatten();
        let mut clear = conn.prepare_cached(&sql.pl_shared_clear)?;
        let mut n = 0;
        for (_, id, event_type, created_at, marked) in &rows {
            if *marked && Timestamp(*created_at) <= self.retention.cutoff(event_type) {
                n += clear.execute([id])? as u64;
            }
        }
        Ok((n, next))
    }
}

struct PurgeDeleted {
    cutoff: Timestamp,
    limit: usize,
}

impl WriteOp for PurgeDeleted {
    type Reply = u64;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<u64> {
        Ok(conn
            .prepare_cached(&sql.pl_purge_deleted)?
            .execute(params![
                self.cutoff.as_millis(),
                i64::try_from(self.limit).unwrap_or(i64::MAX)
            ])? as u64)
    }
}

#[async_trait]
impl PayloadStore for SqliteStore {
    async fn payload_put(&self, snapshots: Vec<NewSnapshot>) -> Result<()> {
        if snapshots.is_empty() {
            return Ok(());
        }
        let now = snapshots[0].created_at;
        self.write(Put(snapshots), now).await
    }

    async fn payload_list(&self, event_id: EventId) -> Result<Vec<StoredSnapshot>> {
        let sql = self.sql.clone();
        let (mut list, shared) = self
            .read(move |c| {
                let id = event_id.to_string();
                let list = c
                    .prepare_cached(&sql.pl_list)?
                    .query_map([&id], stored_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let shared = shared_of(c, &sql, &id)?;
                Ok((list, shared))
            })
            .await?;
        if let Some(shared) = shared {
            list.push(shared_stored(event_id, shared)?);
            // Newest first, then by stage, as the rows are read.
            list.sort_by(|a, b| {
                b.meta
                    .created_at
                    .cmp(&a.meta.created_at)
                    .then_with(|| a.meta.stage.cmp(&b.meta.stage))
            });
        }
        Ok(list)
    }

    async fn payload_soft_delete(
        &self,
        event_id: EventId,
        reason: &str,
        actor: &str,
        now: Timestamp,
    ) -> Result<u64> {
        self.write(
            SoftDelete {
                event_id,
                reason: reason.to_owned(),
                actor: actor.to_owned(),
            },
            now,
        )
        .await
    }

    async fn payload_config_list(&self) -> Result<Vec<PayloadConfig>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.pl_config_list)?
                .query_map([], config_from_row)?
                .collect()
        })
        .await
    }

    async fn payload_config_set(&self, config: PayloadConfig) -> Result<()> {
        let now = config.updated_at;
        self.write(ConfigSet(config), now).await
    }

    async fn payload_config_delete(&self, event_type: &str) -> Result<bool> {
        self.write(ConfigDelete(event_type.to_owned()), Timestamp(0))
            .await
    }

    async fn payload_expired(
        &self,
        retention: &Retention,
        after: Option<SnapshotKey>,
        scan: usize,
    ) -> Result<(Vec<SnapshotKey>, Option<SnapshotKey>)> {
        let sql = self.sql.clone();
        let retention = retention.clone();
        self.read(move |c| {
            let limit = i64::try_from(scan).unwrap_or(i64::MAX);
            let map = |r: &Row<'_>| -> rusqlite::Result<(SnapshotKey, String, bool)> {
                let id: String = r.get(0)?;
                Ok((
                    SnapshotKey {
                        event_id: id.parse().map_err(|e: Error| corrupt(0, e.to_string()))?,
                        stage: r.get(1)?,
                        created_at: Timestamp(r.get(2)?),
                    },
                    r.get(3)?,
                    r.get::<_, Option<i64>>(4)?.is_some(),
                ))
            };
            let rows: Vec<(SnapshotKey, String, bool)> = match &after {
                None => c
                    .prepare_cached(&sql.pl_scan_first)?
                    .query_map([limit], map)?
                    .collect::<rusqlite::Result<_>>()?,
                Some(k) => c
                    .prepare_cached(&sql.pl_scan_after)?
                    .query_map(
                        params![
                            k.event_id.to_string(),
                            k.stage,
                            k.created_at.as_millis(),
                            limit
                        ],
                        map,
                    )?
                    .collect::<rusqlite::Result<_>>()?,
            };
            let next = (rows.len() == scan)
                .then(|| rows.last().map(|(k, _, _)| k.clone()))
                .flatten();
            let expired = rows
                .into_iter()
                .filter(|(k, t, deleted)| !deleted && k.created_at <= retention.cutoff(t))
                .map(|(k, _, _)| k)
                .collect();
            Ok((expired, next))
        })
        .await
    }

    async fn payload_delete(&self, keys: Vec<SnapshotKey>) -> Result<u64> {
        if keys.is_empty() {
            return Ok(0);
        }
        self.write(Delete(keys), Timestamp(0)).await
    }

    async fn payload_expire_shared(
        &self,
        retention: &Retention,
        after: i64,
        scan: usize,
    ) -> Result<(u64, Option<i64>)> {
        self.write(
            ExpireShared {
                retention: retention.clone(),
                after,
                scan,
            },
            Timestamp(0),
        )
        .await
    }

    async fn payload_purge_deleted(&self, cutoff: Timestamp, limit: usize) -> Result<u64> {
        self.write(PurgeDeleted { cutoff, limit }, cutoff).await
    }
}

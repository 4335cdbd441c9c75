//! The statements of payload snapshots and their configuration (templates: `{p}` is the table
//! prefix).

/// A payload snapshot (a snapshot with the same key is replaced).
pub(super) const PL_PUT: &str =
    "INSERT INTO {p}event_payloads (event_id, stage, created_at, event_type, payload,
             size_original, size_compressed, contains_media, contains_base64)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (event_id, stage, created_at) DO UPDATE SET event_type = excluded.event_type,
             payload = excluded.payload, size_original = excluded.size_original,
             size_compressed = excluded.size_compressed, contains_media = excluded.contains_media,
             contains_base64 = excluded.contains_base64, deleted_at = NULL, deleted_by = NULL,
             delete_reason = NULL";

/// An event's snapshots, newest first.
pub(super) const PL_LIST: &str =
    "SELECT event_id, stage, created_at, event_type, payload, size_original, size_compressed,
             contains_media, contains_base64, deleted_at, deleted_by, delete_reason
         FROM {p}event_payloads WHERE event_id = ?1 ORDER BY created_at DESC, stage";

/// Soft delete: the bytes cleared, the audit written.
pub(super) const PL_SOFT_DELETE: &str =
    "UPDATE {p}event_payloads SET payload = NULL, size_compressed = 0, deleted_at = ?2,
             deleted_by = ?3, delete_reason = ?4
         WHERE event_id = ?1 AND deleted_at IS NULL";

/// An event's shared `published` snapshot: the event's type, payload and creation time.
pub(super) const PL_SHARED_GET: &str = "SELECT type, payload, created_at FROM {p}events
         WHERE id = ?1 AND published_snapshot IS NOT NULL";

/// Clears an event's shared snapshot mark.
pub(super) const PL_SHARED_CLEAR: &str = "UPDATE {p}events SET published_snapshot = NULL
         WHERE id = ?1 AND published_snapshot IS NOT NULL";

/// The retention scan of shared snapshots: events by rowid after `?1`, at most `?2`.
pub(super) const PL_SHARED_SCAN: &str =
    "SELECT rowid, id, type, created_at, published_snapshot IS NOT NULL FROM {p}events
         WHERE rowid > ?1 ORDER BY rowid LIMIT ?2 + 0";

/// The audit row of a soft-deleted shared snapshot (no bytes).
pub(super) const PL_SHARED_DELETED: &str = "INSERT INTO {p}event_payloads (event_id, stage, created_at, event_type, payload,
             size_original, size_compressed, contains_media, contains_base64, deleted_at, deleted_by,
             delete_reason)
         VALUES (?1, ?2, ?3, ?4, NULL, ?5, 0, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (event_id, stage, created_at) DO UPDATE SET payload = NULL, size_compressed = 0,
             deleted_at = excluded.deleted_at, deleted_by = excluded.deleted_by,
             delete_reason = excluded.delete_reason";

/// The retention scan, from the start.
pub(super) const PL_SCAN_FIRST: &str =
    "SELECT event_id, stage, created_at, event_type, deleted_at FROM {p}event_payloads
         ORDER BY event_id, stage, created_at LIMIT ?1 + 0";

/// The retention scan, after a key.
pub(super) const PL_SCAN_AFTER: &str =
    "SELECT event_id, stage, created_at, event_type, deleted_at FROM {p}event_payloads
         WHERE (event_id, stage, created_at) > (?1, ?2, ?3)
         ORDER BY event_id, stage, created_at LIMIT ?4 + 0";

/// Deletes one snapshot.
pub(super) const PL_DELETE: &str =
    "DELETE FROM {p}event_payloads WHERE event_id = ?1 AND stage = ?2 AND created_at = ?3";

/// Deletes soft-deleted audit rows deleted at or before `?1`, at most `?2`.
pub(super) const PL_PURGE_DELETED: &str = "DELETE FROM {p}event_payloads WHERE (event_id, stage, created_at) IN
         (SELECT event_id, stage, created_at FROM {p}event_payloads INDEXED BY {p}event_payloads_deleted
          WHERE deleted_at IS NOT NULL AND deleted_at <= ?1 LIMIT ?2 + 0)";

/// Every configuration row.
pub(super) const PL_CONFIG_LIST: &str =
    "SELECT event_type, stages, retention_days, redact, redact_before_store, updated_at,
             updated_by FROM {p}payload_config ORDER BY event_type";

/// Stores a configuration row.
pub(super) const PL_CONFIG_SET: &str =
    "INSERT INTO {p}payload_config (event_type, stages, retention_days, redact,
             redact_before_store, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (event_type) DO UPDATE SET stages = excluded.stages,
             retention_days = excluded.retention_days, redact = excluded.redact,
             redact_before_store = excluded.redact_before_store, updated_at = excluded.updated_at,
             updated_by = excluded.updated_by";

/// Deletes a configuration row.
pub(super) const PL_CONFIG_DELETE: &str = "DELETE FROM {p}payload_config WHERE event_type = ?1";

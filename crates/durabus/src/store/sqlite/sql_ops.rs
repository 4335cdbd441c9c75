//! The statements of the operations layer on SQLite: dead-letter records and groups, durable
//! operations, scheduled jobs. Built once per store for its table prefix (`{p}`).

use super::sql::fill;
use crate::dlq::{DeadLetterFilter, Keyset};

/// The columns every dead-letter query selects, in the order `dead_letter_from_row` reads them.
pub const DL_COLUMNS: &str = "event_id, seq, event_type, payload, subscription, last_error, causes, \
     error_history, fingerprint, attempts, status, auto_retry_count, manual_retry_count, \
     next_auto_retry_at, created_at, updated_at, last_retry_at, last_retry_by, resolved_at, \
     resolved_by, resolution_note, rounds";

/// The columns of a dead-letter summary, in the order `summary_from_row` reads them.
pub const DL_SUMMARY_COLUMNS: &str = "event_id, seq, event_type, subscription, last_error, \
     fingerprint, attempts, rounds, status, auto_retry_count, manual_retry_count, \
     next_auto_retry_at, created_at, updated_at, last_retry_by, resolved_by";

/// The columns every operation query selects.
pub const OP_COLUMNS: &str = "id, kind, status, params, bound, cursor, total, processed, skipped, \
     errors, actor, actor_kind, cancel_requested, created_at, started_at, finished_at, \
     updated_at, last_error, cursor_key, summary, holder, lease_expires_at";

macro_rules! ops_statements {
    ($($(#[$doc:meta])* $name:ident = $sql:expr;)*) => {
        /// The operations layer's statements with the table prefix filled in.
        #[derive(Debug, Clone)]
        #[doc(hidden)]
        pub struct OpsSql {
            /// The table prefix.
            pub prefix: String,
            $($(#[$doc])* pub $name: String,)*
        }

        impl OpsSql {
            pub(super) fn build(prefix: &str) -> OpsSql {
                OpsSql {
                    prefix: prefix.to_owned(),
                    $($name: fill($sql, prefix)
                        .replace("{dl}", DL_COLUMNS)
                        .replace("{op}", OP_COLUMNS),)*
                }
            }
        }
    };
}

ops_statements! {
    /// One record by event id.
    dl_get = "SELECT {dl} FROM {p}dead_letters WHERE event_id = ?1";
    /// A record's lifecycle and group only (what an action needs).
    dl_state = "SELECT status, auto_retry_count, manual_retry_count, next_auto_retry_at, created_at,
             last_retry_at, last_retry_by, resolved_at, resolved_by, resolution_note, rounds, fingerprint,
             event_type, subscription
         FROM {p}dead_letters WHERE event_id = ?1";
    /// A new record: the payload is copied from the event row (`?1`).
    dl_insert = "INSERT INTO {p}dead_letters (event_id, event_type, payload, subscription, last_error,
             causes, error_history, fingerprint, attempts, status, auto_retry_count, manual_retry_count,
             next_auto_retry_at, created_at, updated_at, last_retry_at, last_retry_by, resolved_at,
             resolved_by, resolution_note, rounds)
         SELECT id, type, payload, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13, ?14, ?15,
             ?16, ?17, ?18
         FROM {p}events WHERE id = ?1";
    /// A new round of an existing record.
    dl_died_again = "UPDATE {p}dead_letters SET subscription = ?2, last_error = ?3, causes = ?4,
             error_history = ?5, fingerprint = ?6, attempts = ?7, status = ?8, next_auto_retry_at = ?9,
             rounds = ?10, updated_at = ?11
         WHERE event_id = ?1";
    /// A record's lifecycle fields.
    dl_set_state = "UPDATE {p}dead_letters SET status = ?2, auto_retry_count = ?3, manual_retry_count = ?4,
             next_auto_retry_at = ?5, last_retry_at = ?6, last_retry_by = ?7, resolved_at = ?8,
             resolved_by = ?9, resolution_note = ?10, rounds = ?11, updated_at = ?12
         WHERE event_id = ?1";
    /// Deletes a record.
    dl_delete = "DELETE FROM {p}dead_letters WHERE event_id = ?1";
    /// Deletes a record's event if it is still dead.
    dl_delete_event = "DELETE FROM {p}events WHERE id = ?1 AND status = 'dlq'";
    /// Sends a dead event back for delivery (`?2` now) with `store::recovery::requeue`'s retry
    /// count (`?3`) and, if `?4`, its errors cleared.
    dl_requeue = "UPDATE {p}events SET status = 'pending', retry_count = ?3,
             last_error = CASE WHEN ?4 THEN NULL ELSE last_error END, dlq_at = NULL,
             updated_at = ?2, next_attempt_at = ?2
         WHERE id = ?1 AND status = 'dlq'";
    /// Pending records whose auto retry is due (`?1` now), at most `?2`.
    dl_auto_due = "SELECT event_id FROM {p}dead_letters INDEXED BY {p}dead_letters_auto
         WHERE status = 'pending' AND next_auto_retry_at IS NOT NULL AND next_auto_retry_at <= ?1
         ORDER BY next_auto_retry_at LIMIT ?2 + 0";
    /// Closed records last changed at or before `?1`, at most `?2`.
    dl_closed_before = "SELECT event_id FROM {p}dead_letters INDEXED BY {p}dead_letters_closed
         WHERE status IN ('resolved', 'abandoned') AND updated_at <= ?1 LIMIT ?2 + 0";
    /// Dead events created at or before `?1` (the specification's purge by age), at most `?2`.
    dl_dead_before = "SELECT id FROM {p}events WHERE status = 'dlq' AND created_at <= ?1 LIMIT ?2 + 0";
    /// The highest position.
    dl_max_seq = "SELECT coalesce(max(seq), 0) FROM {p}dead_letters";
    /// A group's counts change, and it is dropped when it has no records left.
    group_adjust = "UPDATE {p}dead_letter_groups SET count = count + ?2, open = open + ?3 WHERE fingerprint = ?1";
    /// Drops groups without records.
    group_prune = "DELETE FROM {p}dead_letter_groups WHERE fingerprint = ?1 AND count <= 0";
    /// A death in a group: created if new; counts, last seen, sample and types updated.
    group_upsert = "INSERT INTO {p}dead_letter_groups (fingerprint, subscription, signature, sample_error,
             count, open, first_seen, last_seen, event_types)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, json_array(?8))
         ON CONFLICT(fingerprint) DO UPDATE SET count = count + ?5, open = open + ?6,
             last_seen = max(last_seen, ?7), sample_error = ?4,
             event_types = CASE
                 WHEN EXISTS (SELECT 1 FROM json_each(event_types) WHERE value = ?8)
                     OR json_array_length(event_types) >= ?9 THEN event_types
                 ELSE json_insert(event_types, '$[#]', ?8) END";
    /// Groups, most open first.
    groups = "SELECT fingerprint, subscription, signature, sample_error, count, open, first_seen,
             last_seen, event_types
         FROM {p}dead_letter_groups ORDER BY open DESC, count DESC, last_seen DESC LIMIT ?1 + 0";
    /// A new operation.
    op_insert = "INSERT INTO {p}operations (id, kind, status, params, bound, cursor, total, actor,
             actor_kind, created_at, updated_at)
         VALUES (?1, ?2, 'pending', ?3, ?4, 0, ?5, ?6, ?7, ?8, ?8)";
    /// One operation.
    op_get = "SELECT {op} FROM {p}operations WHERE id = ?1";
    /// Operations newest first, of status `?1` and kind `?2` where given.
    op_list = "SELECT {op} FROM {p}operations
         WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR kind = ?2)
         ORDER BY created_at DESC, id DESC LIMIT ?3 + 0";
    /// Takes an operation (`?2` holder, `?3` lease expiry, `?4` now), once
    /// `operation::state::may_claim` has allowed it.
    op_claim = "UPDATE {p}operations SET status = 'running', holder = ?2, lease_expires_at = ?3,
             started_at = coalesce(started_at, ?4), updated_at = ?4
         WHERE id = ?1";
    /// Open operations, oldest first, at most `?1`.
    op_open = "SELECT {op} FROM {p}operations INDEXED BY {p}operations_open
         WHERE status IN ('pending', 'running') ORDER BY created_at LIMIT ?1 + 0";
    /// One chunk of an operation held by `?12` (whose cursor is `?13`, `?14`, if given):
    /// cursor, counts, summary (`?7`, if not NULL) and, with a status in `?8`, its end.
    op_advance = "UPDATE {p}operations SET cursor = ?2, cursor_key = ?3, processed = processed + ?4,
             skipped = skipped + ?5, errors = errors + ?6, summary = coalesce(?7, summary),
             status = coalesce(?8, status), last_error = coalesce(?9, last_error),
             lease_expires_at = CASE WHEN ?8 IS NULL THEN ?10 ELSE lease_expires_at END,
             finished_at = CASE WHEN ?8 IS NULL THEN finished_at ELSE ?11 END, updated_at = ?11
         WHERE id = ?1 AND status = 'running' AND holder = ?12
             AND (?13 IS NULL OR (cursor = ?13 AND cursor_key = ?14))";
    /// A cancel request (`?2` now) with the status (`?3`) and end (`?4`, if any) that
    /// `operation::state::cancel` gave it.
    op_cancel = "UPDATE {p}operations SET cancel_requested = 1, updated_at = ?2, status = ?3,
             finished_at = coalesce(?4, finished_at)
         WHERE id = ?1";
    /// Lets go of an operation.
    op_release = "UPDATE {p}operations SET lease_expires_at = ?3, updated_at = ?3
         WHERE id = ?1 AND status = 'running' AND holder = ?2";
    /// Fails an operation.
    op_fail = "UPDATE {p}operations SET status = 'failed', last_error = ?3, finished_at = ?4, updated_at = ?4
         WHERE id = ?1 AND status = 'running' AND holder = ?2";
    /// A payload snapshot (a snapshot with the same key is replaced).
    pl_put = "INSERT INTO {p}event_payloads (event_id, stage, created_at, event_type, payload,
             size_original, size_compressed, contains_media, contains_base64)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
         ON CONFLICT (event_id, stage, created_at) DO UPDATE SET event_type = excluded.event_type,
             payload = excluded.payload, size_original = excluded.size_original,
             size_compressed = excluded.size_compressed, contains_media = excluded.contains_media,
             contains_base64 = excluded.contains_base64, deleted_at = NULL, deleted_by = NULL,
             delete_reason = NULL";
    /// An event's snapshots, newest first.
    pl_list = "SELECT event_id, stage, created_at, event_type, payload, size_original, size_compressed,
             contains_media, contains_base64, deleted_at, deleted_by, delete_reason
         FROM {p}event_payloads WHERE event_id = ?1 ORDER BY created_at DESC, stage";
    /// Soft delete: the bytes cleared, the audit written.
    pl_soft_delete = "UPDATE {p}event_payloads SET payload = NULL, size_compressed = 0, deleted_at = ?2,
             deleted_by = ?3, delete_reason = ?4
         WHERE event_id = ?1 AND deleted_at IS NULL";
    /// An event's shared `published` snapshot: the event's type, payload and creation time.
    pl_shared_get = "SELECT type, payload, created_at FROM {p}events
         WHERE id = ?1 AND published_snapshot IS NOT NULL";
    /// Clears an event's shared snapshot mark.
    pl_shared_clear = "UPDATE {p}events SET published_snapshot = NULL
         WHERE id = ?1 AND published_snapshot IS NOT NULL";
    /// The retention scan of shared snapshots: events by rowid after `?1`, at most `?2`.
    pl_shared_scan = "SELECT rowid, id, type, created_at, published_snapshot IS NOT NULL FROM {p}events
         WHERE rowid > ?1 ORDER BY rowid LIMIT ?2 + 0";
    /// The audit row of a soft-deleted shared snapshot (no bytes).
    pl_shared_deleted = "INSERT INTO {p}event_payloads (event_id, stage, created_at, event_type, payload,
             size_original, size_compressed, contains_media, contains_base64, deleted_at, deleted_by,
             delete_reason)
         VALUES (?1, ?2, ?3, ?4, NULL, ?5, 0, ?6, ?7, ?8, ?9, ?10)
         ON CONFLICT (event_id, stage, created_at) DO UPDATE SET payload = NULL, size_compressed = 0,
             deleted_at = excluded.deleted_at, deleted_by = excluded.deleted_by,
             delete_reason = excluded.delete_reason";
    /// The retention scan, from the start.
    pl_scan_first = "SELECT event_id, stage, created_at, event_type, deleted_at FROM {p}event_payloads
         ORDER BY event_id, stage, created_at LIMIT ?1 + 0";
    /// The retention scan, after a key.
    pl_scan_after = "SELECT event_id, stage, created_at, event_type, deleted_at FROM {p}event_payloads
         WHERE (event_id, stage, created_at) > (?1, ?2, ?3)
         ORDER BY event_id, stage, created_at LIMIT ?4 + 0";
    /// Deletes one snapshot.
    pl_delete = "DELETE FROM {p}event_payloads WHERE event_id = ?1 AND stage = ?2 AND created_at = ?3";
    /// Deletes soft-deleted audit rows deleted at or before `?1`, at most `?2`.
    pl_purge_deleted = "DELETE FROM {p}event_payloads WHERE (event_id, stage, created_at) IN
         (SELECT event_id, stage, created_at FROM {p}event_payloads INDEXED BY {p}event_payloads_deleted
          WHERE deleted_at IS NOT NULL AND deleted_at <= ?1 LIMIT ?2 + 0)";
    /// Every configuration row.
    pl_config_list = "SELECT event_type, stages, retention_days, redact, redact_before_store, updated_at,
             updated_by FROM {p}payload_config ORDER BY event_type";
    /// Stores a configuration row.
    pl_config_set = "INSERT INTO {p}payload_config (event_type, stages, retention_days, redact,
             redact_before_store, updated_at, updated_by)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (event_type) DO UPDATE SET stages = excluded.stages,
             retention_days = excluded.retention_days, redact = excluded.redact,
             redact_before_store = excluded.redact_before_store, updated_at = excluded.updated_at,
             updated_by = excluded.updated_by";
    /// Deletes a configuration row.
    pl_config_delete = "DELETE FROM {p}payload_config WHERE event_type = ?1";
    /// A job's row, created if missing.
    job_ensure = "INSERT INTO {p}jobs (name) VALUES (?1) ON CONFLICT(name) DO NOTHING";
    /// Starts a tick (`?2`) of a job for `?3` until `?4`, at `?5`, if the tick is new and no
    /// live holder runs it.
    job_begin_tick = "UPDATE {p}jobs SET last_tick = ?2, holder = ?3, lock_expires_at = ?4,
             last_started_at = ?5, runs = runs + 1
         WHERE name = ?1 AND (last_tick IS NULL OR last_tick < ?2)
             AND (holder IS NULL OR lock_expires_at <= ?5)";
    /// Marks a tick skipped (a run is still going), once across processes.
    job_skip_tick = "UPDATE {p}jobs SET last_tick = ?2, skipped = skipped + 1
         WHERE name = ?1 AND (last_tick IS NULL OR last_tick < ?2)";
    /// Starts a run outside the schedule.
    job_begin_now = "UPDATE {p}jobs SET holder = ?2, lock_expires_at = ?3, last_started_at = ?4, runs = runs + 1
         WHERE name = ?1 AND (holder IS NULL OR lock_expires_at <= ?4)";
    /// Ends a run.
    job_end = "UPDATE {p}jobs SET holder = NULL, lock_expires_at = NULL, last_finished_at = ?5,
             last_status = ?3, last_message = ?4
         WHERE name = ?1 AND holder = ?2";
    /// Every job.
    jobs = "SELECT name, last_tick, holder, last_started_at, last_finished_at, last_status, last_message,
             runs, skipped FROM {p}jobs ORDER BY name";
}

/// A `WHERE` clause for `filter` (no leading keyword; `1` when it selects everything) and its
/// parameters, in order.
pub fn dl_filter(filter: &DeadLetterFilter) -> (String, Vec<rusqlite::types::Value>) {
    let mut terms: Vec<String> = Vec::new();
    let mut args: Vec<rusqlite::types::Value> = Vec::new();
    if !filter.status.is_empty() {
        let list: Vec<String> = filter
            .status
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        terms.push(format!("status IN ({})", list.join(", ")));
    }
    if let Some(t) = &filter.event_type {
        // Types and patterns are letters, digits and `._-:/` (and `*`): GLOB's only other
        // special characters (`?`, `[`) cannot occur.
        if t.contains('*') {
            terms.push("event_type GLOB ?".into());
        } else {
            terms.push("event_type = ?".into());
        }
        args.push(t.clone().into());
    }
    if let Some(s) = &filter.subscription {
        terms.push("subscription = ?".into());
        args.push(s.clone().into());
    }
    if let Some(g) = &filter.group {
        terms.push("fingerprint = ?".into());
        args.push(g.clone().into());
    }
    if let Some(from) = filter.created_from {
        terms.push("created_at >= ?".into());
        args.push(from.as_millis().into());
    }
    if let Some(before) = filter.created_before {
        terms.push("created_at < ?".into());
        args.push(before.as_millis().into());
    }
    if terms.is_empty() {
        ("1".into(), args)
    } else {
        (terms.join(" AND "), args)
    }
}

impl OpsSql {
    /// A keyset page of records matching `filter`, newest first.
    pub fn dl_list(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
    ) -> (String, Vec<rusqlite::types::Value>) {
        self.dl_page(filter, page, DL_COLUMNS)
    }

    /// The same page as [`dl_list`](Self::dl_list), with the summary columns.
    pub fn dl_list_summaries(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
    ) -> (String, Vec<rusqlite::types::Value>) {
        self.dl_page(filter, page, DL_SUMMARY_COLUMNS)
    }

    fn dl_page(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
        columns: &str,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(before) = page.before {
            cond.push_str(" AND seq < ?");
            args.push(before.into());
        }
        args.push(i64::from(page.limit).into());
        (
            format!(
                "SELECT {columns} FROM {}dead_letters WHERE {cond} ORDER BY seq DESC LIMIT ? + 0",
                self.prefix
            ),
            args,
        )
    }

    /// How many records match `filter` with `seq <= bound`.
    pub fn dl_count(
        &self,
        filter: &DeadLetterFilter,
        bound: Option<i64>,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(b) = bound {
            cond.push_str(" AND seq <= ?");
            args.push(b.into());
        }
        (
            format!(
                "SELECT count(*) FROM {}dead_letters WHERE {cond}",
                self.prefix
            ),
            args,
        )
    }

    /// The next chunk of a frozen selection: records after `cursor` up to `bound`, oldest
    /// first.
    pub fn dl_chunk(
        &self,
        filter: &DeadLetterFilter,
        cursor: i64,
        bound: i64,
        limit: usize,
    ) -> (String, Vec<rusqlite::types::Value>) {
        let (cond, mut args) = dl_filter(filter);
        args.push(cursor.into());
        args.push(bound.into());
        args.push(i64::try_from(limit).unwrap_or(i64::MAX).into());
        (
            format!(
                "SELECT event_id, seq FROM {}dead_letters WHERE {cond} AND seq > ? AND seq <= ?
                 ORDER BY seq LIMIT ? + 0",
                self.prefix
            ),
            args,
        )
    }
}

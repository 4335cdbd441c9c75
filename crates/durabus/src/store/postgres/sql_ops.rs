//! The statements of the operations layer on PostgreSQL: dead-letter records and groups,
//! durable operations, scheduled jobs. Built once per store for its schema.

use crate::dlq::{DeadLetterFilter, Keyset};

/// The columns every dead-letter query selects, in the order `dead_letter` reads them.
pub const DL_COLUMNS: &str = "event_id, seq, event_type, payload::text AS payload, subscription, \
     last_error, causes, error_history, fingerprint, attempts, status, auto_retry_count, \
     manual_retry_count, next_auto_retry_at, created_at, updated_at, last_retry_at, last_retry_by, \
     resolved_at, resolved_by, resolution_note, rounds, ordering_key, key_waiting";

/// The columns of a dead-letter summary.
pub const DL_SUMMARY_COLUMNS: &str = "event_id, seq, event_type, subscription, last_error, \
     fingerprint, attempts, rounds, status, auto_retry_count, manual_retry_count, \
     next_auto_retry_at, created_at, updated_at, last_retry_by, resolved_by";

/// The columns every operation query selects.
pub const OP_COLUMNS: &str = "id::text AS id, kind, status, params, bound, cursor, total, processed, \
     skipped, errors, actor, actor_kind, cancel_requested, created_at, started_at, finished_at, \
     updated_at, last_error, cursor_key, summary, holder, lease_expires_at";

/// Statements for one schema.
#[derive(Debug, Clone)]
pub struct PgOpsSql {
    pub schema: String,
    pub dl_get: String,
    pub dl_lock: String,
    pub dl_lock_states: String,
    pub dl_set_states: String,
    pub dl_requeue_many: String,
    pub dl_withdraw_many: String,
    pub dl_delete_many: String,
    pub group_adjust_many: String,
    pub group_prune_many: String,
    pub dl_insert: String,
    pub dl_died_again: String,
    pub dl_set_state: String,
    pub dl_auto_due: String,
    pub dl_closed_before: String,
    pub dl_dead_before: String,
    pub dl_dead_of: String,
    pub dl_max_seq: String,
    pub group_adjust: String,
    pub group_prune: String,
    pub group_upsert: String,
    pub groups: String,
    pub group_buckets: String,
    pub op_insert: String,
    pub op_get: String,
    pub op_list: String,
    pub op_claim: String,
    pub op_lock: String,
    pub op_open: String,
    pub op_advance: String,
    pub op_cancel: String,
    pub op_fail: String,
    pub op_release: String,
    pub pl_put: String,
    pub pl_list: String,
    pub pl_soft_delete: String,
    pub pl_scan_first: String,
    pub pl_scan_after: String,
    pub pl_delete: String,
    pub pl_purge_deleted: String,
    pub pl_config_list: String,
    pub pl_config_set: String,
    pub pl_config_delete: String,
    pub job_ensure: String,
    pub job_begin_tick: String,
    pub job_skip_tick: String,
    pub job_begin_now: String,
    pub job_end: String,
    pub jobs: String,
    pub stats_get: String,
    pub stats_put: String,
}

impl PgOpsSql {
    pub fn new(s: &str) -> PgOpsSql {
        PgOpsSql {
            schema: s.to_owned(),
            dl_get: format!("SELECT {DL_COLUMNS} FROM {s}.dead_letters WHERE event_id = $1"),
            dl_lock: format!(
                "SELECT {DL_COLUMNS} FROM {s}.dead_letters WHERE event_id = $1 FOR UPDATE"
            ),
            // Lifecycle and group of many records, locked.
            dl_lock_states: format!(
                "SELECT event_id, seq, status, auto_retry_count, manual_retry_count, next_auto_retry_at,
                     created_at, last_retry_at, last_retry_by, resolved_at, resolved_by, resolution_note,
                     rounds, fingerprint, event_type, subscription,
                     (SELECT e.status FROM {s}.events e WHERE e.id = d.event_id) AS event_status
                 FROM {s}.dead_letters d WHERE event_id = ANY($1) ORDER BY seq FOR UPDATE OF d"
            ),
            // New lifecycles of many records, one statement.
            dl_set_states: format!(
                "UPDATE {s}.dead_letters d SET status = u.status, auto_retry_count = u.auto,
                     manual_retry_count = u.manual, next_auto_retry_at = u.next,
                     last_retry_at = u.last_retry_at, last_retry_by = u.last_retry_by,
                     resolved_at = u.resolved_at, resolved_by = u.resolved_by,
                     resolution_note = u.note, rounds = u.rounds, updated_at = $12
                 FROM UNNEST($1::uuid[], $2::text[], $3::int[], $4::int[], $5::bigint[], $6::bigint[],
                             $7::text[], $8::bigint[], $9::text[], $10::text[], $11::int[])
                     AS u(id, status, auto, manual, next, last_retry_at, last_retry_by, resolved_at,
                          resolved_by, note, rounds)
                 WHERE d.event_id = u.id"
            ),
            // Many dead events sent back (`$2` now, `$3` retry count, `$4` clear errors): the
            // ids that were still dead.
            // A retry called off: its events back to the dead-letter queue, those still pending.
            dl_withdraw_many: format!(
                "UPDATE {s}.events SET status = 'dlq', dlq_at = $2, updated_at = $2,
                     next_attempt_at = NULL
                 WHERE id = ANY($1) AND status = 'pending' RETURNING id"
            ),
            dl_requeue_many: format!(
                "UPDATE {s}.events SET status = 'pending', retry_count = $3,
                     last_error = CASE WHEN $4 THEN NULL ELSE last_error END, dlq_at = NULL,
                     updated_at = $2, next_attempt_at = $2
                 WHERE id = ANY($1) AND status = 'dlq' RETURNING id, ordering_key IS NOT NULL"
            ),
            dl_delete_many: format!(
                "WITH r AS (DELETE FROM {s}.dead_letters WHERE event_id = ANY($1) RETURNING event_id),
                      e AS (DELETE FROM {s}.events WHERE id = ANY($1) AND status = 'dlq' RETURNING id)
                 DELETE FROM {s}.event_ids WHERE id IN (SELECT id FROM e)"
            ),
            group_adjust_many: format!(
                "UPDATE {s}.dead_letter_groups g SET count = g.count + u.c, open = g.open + u.o
                 FROM UNNEST($1::text[], $2::bigint[], $3::bigint[]) AS u(f, c, o)
                 WHERE g.fingerprint = u.f"
            ),
            group_prune_many: format!(
                "DELETE FROM {s}.dead_letter_groups WHERE fingerprint = ANY($1) AND count <= 0"
            ),
            // The payload is copied from the event row.
            dl_insert: format!(
                "INSERT INTO {s}.dead_letters (event_id, event_type, payload, subscription, last_error,
                     causes, error_history, fingerprint, attempts, status, auto_retry_count,
                     manual_retry_count, next_auto_retry_at, created_at, updated_at, last_retry_at,
                     last_retry_by, resolved_at, resolved_by, resolution_note, rounds)
                 SELECT id, type, payload, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13,
                     $14, $15, $16, $17, $18
                 FROM {s}.events WHERE id = $1"
            ),
            dl_died_again: format!(
                "UPDATE {s}.dead_letters SET subscription = $2, last_error = $3, causes = $4,
                     error_history = $5, fingerprint = $6, attempts = $7, status = $8,
                     next_auto_retry_at = $9, rounds = $10, updated_at = $11
                 WHERE event_id = $1"
            ),
            dl_set_state: format!(
                "UPDATE {s}.dead_letters SET status = $2, auto_retry_count = $3, manual_retry_count = $4,
                     next_auto_retry_at = $5, last_retry_at = $6, last_retry_by = $7, resolved_at = $8,
                     resolved_by = $9, resolution_note = $10, rounds = $11, updated_at = $12
                 WHERE event_id = $1"
            ),
            dl_auto_due: format!(
                "SELECT event_id FROM {s}.dead_letters
                 WHERE status = 'pending' AND next_auto_retry_at IS NOT NULL AND next_auto_retry_at <= $1
                 ORDER BY next_auto_retry_at LIMIT $2"
            ),
            dl_closed_before: format!(
                "SELECT event_id FROM {s}.dead_letters
                 WHERE status IN ('resolved', 'abandoned') AND updated_at <= $1
                 LIMIT $2"
            ),
            dl_dead_before: format!(
                "SELECT id FROM {s}.events WHERE status = 'dlq' AND created_at <= $1 LIMIT $2"
            ),
            dl_dead_of: format!(
                "SELECT id FROM {s}.events WHERE id = ANY($1) AND status = 'dlq' FOR UPDATE"
            ),
            dl_max_seq: format!("SELECT coalesce(max(seq), 0) FROM {s}.dead_letters"),
            group_adjust: format!(
                "UPDATE {s}.dead_letter_groups SET count = count + $2, open = open + $3
                 WHERE fingerprint = $1"
            ),
            // A separate statement: one statement cannot both update a row and delete it.
            group_prune: format!(
                "DELETE FROM {s}.dead_letter_groups WHERE fingerprint = $1 AND count <= 0"
            ),
            group_upsert: format!(
                "INSERT INTO {s}.dead_letter_groups AS g (fingerprint, subscription, signature,
                     sample_error, count, open, first_seen, last_seen, event_types)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, jsonb_build_array($8::text)::text)
                 ON CONFLICT (fingerprint) DO UPDATE SET count = g.count + $5, open = g.open + $6,
                     last_seen = greatest(g.last_seen, $7), sample_error = $4,
                     event_types = CASE
                         WHEN g.event_types::jsonb ? $8 OR jsonb_array_length(g.event_types::jsonb) >= $9
                             THEN g.event_types
                         ELSE (g.event_types::jsonb || to_jsonb($8::text))::text END
                 RETURNING (xmax = 0) AS inserted"
            ),
            group_buckets: format!(
                "SELECT fingerprint, (created_at - $2) / $3 AS bucket, count(*) AS n
                 FROM {s}.dead_letters
                 WHERE fingerprint = ANY($1) AND created_at >= $2
                 GROUP BY 1, 2"
            ),
            groups: format!(
                "SELECT fingerprint, subscription, signature, sample_error, count, open, first_seen,
                     last_seen, event_types
                 FROM {s}.dead_letter_groups ORDER BY open DESC, count DESC, last_seen DESC LIMIT $1"
            ),
            op_insert: format!(
                "INSERT INTO {s}.operations (id, kind, status, params, bound, cursor, total, actor,
                     actor_kind, created_at, updated_at)
                 VALUES ($1::uuid, $2, 'pending', $3, $4, 0, $5, $6, $7, $8, $8)"
            ),
            op_get: format!("SELECT {OP_COLUMNS} FROM {s}.operations WHERE id = $1::uuid"),
            op_list: format!(
                "SELECT {OP_COLUMNS} FROM {s}.operations
                 WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR kind = $2)
                 ORDER BY created_at DESC, id DESC LIMIT $3"
            ),
            // Taken once `operation::state::may_claim` allowed it, on the row locked by op_lock.
            op_claim: format!(
                "UPDATE {s}.operations SET status = 'running', holder = $2, lease_expires_at = $3,
                     started_at = coalesce(started_at, $4), updated_at = $4
                 WHERE id = $1::uuid
                 RETURNING {OP_COLUMNS}"
            ),
            op_lock: format!("SELECT {OP_COLUMNS} FROM {s}.operations WHERE id = $1::uuid FOR UPDATE"),
            op_open: format!(
                "SELECT {OP_COLUMNS} FROM {s}.operations
                 WHERE status IN ('pending', 'running') ORDER BY created_at LIMIT $1"
            ),
            op_advance: format!(
                "UPDATE {s}.operations SET cursor = $2, cursor_key = $3, processed = processed + $4,
                     skipped = skipped + $5, errors = errors + $6, summary = coalesce($7, summary),
                     status = coalesce($8, status), last_error = coalesce($9, last_error),
                     lease_expires_at = CASE WHEN $8::text IS NULL THEN $10 ELSE lease_expires_at END,
                     finished_at = CASE WHEN $8::text IS NULL THEN finished_at ELSE $11 END,
                     updated_at = $11
                 WHERE id = $1::uuid AND status = 'running' AND holder = $12
                     AND ($13::bigint IS NULL OR (cursor = $13 AND cursor_key = $14))
                 RETURNING {OP_COLUMNS}"
            ),
            // A cancel request with the status and end `operation::state::cancel` gave it.
            op_cancel: format!(
                "UPDATE {s}.operations SET cancel_requested = true, updated_at = $2, status = $3,
                     finished_at = coalesce($4, finished_at)
                 WHERE id = $1::uuid
                 RETURNING {OP_COLUMNS}"
            ),
            op_fail: format!(
                "UPDATE {s}.operations SET status = 'failed', last_error = $3, finished_at = $4, updated_at = $4
                 WHERE id = $1::uuid AND status = 'running' AND holder = $2"
            ),
            op_release: format!(
                "UPDATE {s}.operations SET lease_expires_at = $3, updated_at = $3
                 WHERE id = $1::uuid AND status = 'running' AND holder = $2"
            ),
            pl_put: format!(
                "INSERT INTO {s}.event_payloads (event_id, stage, created_at, event_type, payload,
                     size_original, size_compressed, contains_media, contains_base64)
                 SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::bytea[],
                     $6::bigint[], $7::bigint[], $8::bool[], $9::bool[])
                 ON CONFLICT (event_id, stage, created_at) DO UPDATE SET event_type = excluded.event_type,
                     payload = excluded.payload, size_original = excluded.size_original,
                     size_compressed = excluded.size_compressed, contains_media = excluded.contains_media,
                     contains_base64 = excluded.contains_base64, deleted_at = NULL, deleted_by = NULL,
                     delete_reason = NULL"
            ),
            pl_list: format!(
                "SELECT event_id, stage, created_at, event_type, payload, size_original, size_compressed,
                     contains_media, contains_base64, deleted_at, deleted_by, delete_reason
                 FROM {s}.event_payloads WHERE event_id = $1 ORDER BY created_at DESC, stage"
            ),
            pl_soft_delete: format!(
                "UPDATE {s}.event_payloads SET payload = NULL, size_compressed = 0, deleted_at = $2,
                     deleted_by = $3, delete_reason = $4
                 WHERE event_id = $1 AND deleted_at IS NULL"
            ),
            pl_scan_first: format!(
                "SELECT event_id, stage, created_at, event_type, deleted_at FROM {s}.event_payloads
                 ORDER BY event_id, stage, created_at LIMIT $1"
            ),
            pl_scan_after: format!(
                "SELECT event_id, stage, created_at, event_type, deleted_at FROM {s}.event_payloads
                 WHERE (event_id, stage, created_at) > ($1, $2, $3)
                 ORDER BY event_id, stage, created_at LIMIT $4"
            ),
            pl_delete: format!(
                "DELETE FROM {s}.event_payloads AS p USING
                     UNNEST($1::uuid[], $2::text[], $3::bigint[]) AS k(event_id, stage, created_at)
                 WHERE p.event_id = k.event_id AND p.stage = k.stage AND p.created_at = k.created_at"
            ),
            pl_purge_deleted: format!(
                "DELETE FROM {s}.event_payloads WHERE (event_id, stage, created_at) IN
                     (SELECT event_id, stage, created_at FROM {s}.event_payloads
                      WHERE deleted_at IS NOT NULL AND deleted_at <= $1 LIMIT $2)"
            ),
            pl_config_list: format!(
                "SELECT event_type, stages, retention_days, redact, redact_before_store, updated_at,
                     updated_by FROM {s}.payload_config ORDER BY event_type"
            ),
            pl_config_set: format!(
                "INSERT INTO {s}.payload_config (event_type, stages, retention_days, redact,
                     redact_before_store, updated_at, updated_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (event_type) DO UPDATE SET stages = excluded.stages,
                     retention_days = excluded.retention_days, redact = excluded.redact,
                     redact_before_store = excluded.redact_before_store,
                     updated_at = excluded.updated_at, updated_by = excluded.updated_by"
            ),
            pl_config_delete: format!("DELETE FROM {s}.payload_config WHERE event_type = $1"),
            job_ensure: format!(
                "INSERT INTO {s}.jobs (name) VALUES ($1) ON CONFLICT (name) DO NOTHING"
            ),
            job_begin_tick: format!(
                "UPDATE {s}.jobs SET last_tick = $2, holder = $3, lock_expires_at = $4,
                     last_started_at = $5, runs = runs + 1
                 WHERE name = $1 AND (last_tick IS NULL OR last_tick < $2)
                     AND (holder IS NULL OR lock_expires_at <= $5)"
            ),
            job_skip_tick: format!(
                "UPDATE {s}.jobs SET last_tick = $2, skipped = skipped + 1
                 WHERE name = $1 AND (last_tick IS NULL OR last_tick < $2)"
            ),
            job_begin_now: format!(
                "UPDATE {s}.jobs SET holder = $2, lock_expires_at = $3, last_started_at = $4, runs = runs + 1
                 WHERE name = $1 AND (holder IS NULL OR lock_expires_at <= $4)"
            ),
            job_end: format!(
                "UPDATE {s}.jobs SET holder = NULL, lock_expires_at = NULL, last_finished_at = $5,
                     last_status = $3, last_message = $4
                 WHERE name = $1 AND holder = $2"
            ),
            jobs: format!(
                "SELECT name, last_tick, holder, last_started_at, last_finished_at, last_status,
                     last_message, runs, skipped FROM {s}.jobs ORDER BY name"
            ),
            stats_get: format!("SELECT value FROM {s}.meta WHERE key = 'stats_snapshot'"),
            stats_put: format!(
                "INSERT INTO {s}.meta (key, value) VALUES ('stats_snapshot', $1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value"
            ),
        }
    }
}

/// A bound parameter of a dynamic dead-letter query.
#[derive(Debug, Clone)]
pub enum Arg {
    Text(String),
    Int(i64),
}

/// Escapes `\\`, `%` and `_` for LIKE (`_` occurs in event types).
fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A `WHERE` condition for `filter` and its parameters, numbered from `$1`.
pub fn dl_filter(filter: &DeadLetterFilter) -> (String, Vec<Arg>) {
    let mut terms: Vec<String> = Vec::new();
    let mut args: Vec<Arg> = Vec::new();
    if !filter.status.is_empty() {
        let list: Vec<String> = filter
            .status
            .iter()
            .map(|s| format!("'{}'", s.as_str()))
            .collect();
        terms.push(format!("status IN ({})", list.join(", ")));
    }
    let mut push = |term: &str, arg: Arg, args: &mut Vec<Arg>| {
        args.push(arg);
        terms.push(term.replace('?', &format!("${}", args.len())));
    };
    if let Some(t) = &filter.event_type {
        if t.contains('*') {
            let pattern = like_escape(t).replace('*', "%");
            push(
                "event_type LIKE ? ESCAPE '\\'",
                Arg::Text(pattern),
                &mut args,
            );
        } else {
            push("event_type = ?", Arg::Text(t.clone()), &mut args);
        }
    }
    if let Some(s) = &filter.subscription {
        push("subscription = ?", Arg::Text(s.clone()), &mut args);
    }
    if let Some(g) = &filter.group {
        push("fingerprint = ?", Arg::Text(g.clone()), &mut args);
    }
    if let Some(from) = filter.created_from {
        push("created_at >= ?", Arg::Int(from.as_millis()), &mut args);
    }
    if let Some(before) = filter.created_before {
        push("created_at < ?", Arg::Int(before.as_millis()), &mut args);
    }
    if terms.is_empty() {
        ("true".into(), args)
    } else {
        (terms.join(" AND "), args)
    }
}

impl PgOpsSql {
    /// A keyset page of records matching `filter`, newest first.
    pub fn dl_list(&self, filter: &DeadLetterFilter, page: &Keyset) -> (String, Vec<Arg>) {
        self.dl_page(filter, page, DL_COLUMNS)
    }

    /// The same page as [`dl_list`](Self::dl_list), with the summary columns.
    pub fn dl_list_summaries(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
    ) -> (String, Vec<Arg>) {
        self.dl_page(filter, page, DL_SUMMARY_COLUMNS)
    }

    fn dl_page(
        &self,
        filter: &DeadLetterFilter,
        page: &Keyset,
        columns: &str,
    ) -> (String, Vec<Arg>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(before) = page.before {
            args.push(Arg::Int(before));
            cond.push_str(&format!(" AND seq < ${}", args.len()));
        }
        args.push(Arg::Int(i64::from(page.limit)));
        (
            format!(
                "SELECT {columns} FROM {}.dead_letters WHERE {cond} ORDER BY seq DESC LIMIT ${}",
                self.schema,
                args.len()
            ),
            args,
        )
    }

    /// How many records match `filter` with `seq <= bound`.
    pub fn dl_count(&self, filter: &DeadLetterFilter, bound: Option<i64>) -> (String, Vec<Arg>) {
        let (mut cond, mut args) = dl_filter(filter);
        if let Some(b) = bound {
            args.push(Arg::Int(b));
            cond.push_str(&format!(" AND seq <= ${}", args.len()));
        }
        (
            format!(
                "SELECT count(*) FROM {}.dead_letters WHERE {cond}",
                self.schema
            ),
            args,
        )
    }

    /// The next chunk of a frozen selection, oldest first, locked.
    pub fn dl_chunk(
        &self,
        filter: &DeadLetterFilter,
        cursor: i64,
        bound: i64,
        limit: usize,
    ) -> (String, Vec<Arg>) {
        let (cond, mut args) = dl_filter(filter);
        args.push(Arg::Int(cursor));
        let c = args.len();
        args.push(Arg::Int(bound));
        let b = args.len();
        args.push(Arg::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
        let l = args.len();
        (
            format!(
                "SELECT event_id, seq FROM {}.dead_letters WHERE {cond} AND seq > ${c} AND seq <= ${b}
                 ORDER BY seq LIMIT ${l}",
                self.schema
            ),
            args,
        )
    }
}

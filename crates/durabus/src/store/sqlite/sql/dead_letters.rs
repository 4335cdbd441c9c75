//! The statements of dead-letter records and failure groups (templates: `{p}` is the table
//! prefix, `{dl}` the record columns).

/// The columns every dead-letter query selects, in the order `dead_letter_from_row` reads them.
pub const DL_COLUMNS: &str = "event_id, seq, event_type, payload, subscription, last_error, causes, \
     error_history, fingerprint, attempts, status, auto_retry_count, manual_retry_count, \
     next_auto_retry_at, created_at, updated_at, last_retry_at, last_retry_by, resolved_at, \
     resolved_by, resolution_note, rounds, ordering_key, key_waiting";

/// The columns of a dead-letter summary, in the order `summary_from_row` reads them.
pub const DL_SUMMARY_COLUMNS: &str = "event_id, seq, event_type, subscription, last_error, \
     fingerprint, attempts, rounds, status, auto_retry_count, manual_retry_count, \
     next_auto_retry_at, created_at, updated_at, last_retry_by, resolved_by";

/// One record by event id.
pub(super) const DL_GET: &str = "SELECT {dl} FROM {p}dead_letters WHERE event_id = ?1";

/// A record's lifecycle and group only (what an action needs).
pub(super) const DL_STATE: &str = "SELECT status, auto_retry_count, manual_retry_count, next_auto_retry_at, created_at,
             last_retry_at, last_retry_by, resolved_at, resolved_by, resolution_note, rounds, fingerprint,
             event_type, subscription, (SELECT status FROM {p}events WHERE id = ?1)
         FROM {p}dead_letters WHERE event_id = ?1";

/// A new record: the payload is copied from the event row (`?1`).
pub(super) const DL_INSERT: &str = "INSERT INTO {p}dead_letters (event_id, event_type, payload, subscription, last_error,
             causes, error_history, fingerprint, attempts, status, auto_retry_count, manual_retry_count,
             next_auto_retry_at, created_at, updated_at, last_retry_at, last_retry_by, resolved_at,
             resolved_by, resolution_note, rounds)
         SELECT id, type, payload, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12, ?13, ?14, ?15,
             ?16, ?17, ?18
         FROM {p}events WHERE id = ?1";

/// A new round of an existing record.
pub(super) const DL_DIED_AGAIN: &str = "UPDATE {p}dead_letters SET subscription = ?2, last_error = ?3, causes = ?4,
             error_history = ?5, fingerprint = ?6, attempts = ?7, status = ?8, next_auto_retry_at = ?9,
             rounds = ?10, updated_at = ?11
         WHERE event_id = ?1";

/// A record's lifecycle fields.
pub(super) const DL_SET_STATE: &str =
    "UPDATE {p}dead_letters SET status = ?2, auto_retry_count = ?3, manual_retry_count = ?4,
             next_auto_retry_at = ?5, last_retry_at = ?6, last_retry_by = ?7, resolved_at = ?8,
             resolved_by = ?9, resolution_note = ?10, rounds = ?11, updated_at = ?12
         WHERE event_id = ?1";

/// Deletes a record.
pub(super) const DL_DELETE: &str = "DELETE FROM {p}dead_letters WHERE event_id = ?1";

/// Deletes a record's event if it is still dead.
pub(super) const DL_DELETE_EVENT: &str = "DELETE FROM {p}events WHERE id = ?1 AND status = 'dlq'";

/// Takes a retried event back out of delivery (`?2` now) while no worker has picked it up.
pub(super) const DL_WITHDRAW: &str =
    "UPDATE {p}events SET status = 'dlq', dlq_at = ?2, updated_at = ?2,
             next_attempt_at = NULL
         WHERE id = ?1 AND status = 'pending'";

/// Sends a dead event back for delivery (`?2` now) with `store::recovery::requeue`'s retry
/// count (`?3`) and, if `?4`, its errors cleared.
pub(super) const DL_REQUEUE: &str = "UPDATE {p}events SET status = 'pending', retry_count = ?3,
             last_error = CASE WHEN ?4 THEN NULL ELSE last_error END, dlq_at = NULL,
             updated_at = ?2, next_attempt_at = ?2
         WHERE id = ?1 AND status = 'dlq'";

/// Pending records whose auto retry is due (`?1` now), at most `?2`.
pub(super) const DL_AUTO_DUE: &str =
    "SELECT event_id FROM {p}dead_letters INDEXED BY {p}dead_letters_auto
         WHERE status = 'pending' AND next_auto_retry_at IS NOT NULL AND next_auto_retry_at <= ?1
         ORDER BY next_auto_retry_at LIMIT ?2 + 0";

/// Closed records last changed at or before `?1`, at most `?2`.
pub(super) const DL_CLOSED_BEFORE: &str =
    "SELECT event_id FROM {p}dead_letters INDEXED BY {p}dead_letters_closed
         WHERE status IN ('resolved', 'abandoned') AND updated_at <= ?1 LIMIT ?2 + 0";

/// Dead events created at or before `?1` (the specification's purge by age), at most `?2`.
pub(super) const DL_DEAD_BEFORE: &str =
    "SELECT id FROM {p}events WHERE status = 'dlq' AND created_at <= ?1 LIMIT ?2 + 0";

/// The highest position.
pub(super) const DL_MAX_SEQ: &str = "SELECT coalesce(max(seq), 0) FROM {p}dead_letters";

/// A group's counts change, and it is dropped when it has no records left.
pub(super) const GROUP_ADJUST: &str =
    "UPDATE {p}dead_letter_groups SET count = count + ?2, open = open + ?3 WHERE fingerprint = ?1";

/// Drops groups without records.
pub(super) const GROUP_PRUNE: &str =
    "DELETE FROM {p}dead_letter_groups WHERE fingerprint = ?1 AND count <= 0";

/// Records of the groups in `?1` (a JSON array) created at or after `?2`, per `?3` ms.
pub(super) const GROUP_BUCKETS: &str =
    "SELECT fingerprint, (created_at - ?2) / ?3, count(*) FROM {p}dead_letters
         WHERE fingerprint IN (SELECT value FROM json_each(?1)) AND created_at >= ?2
         GROUP BY 1, 2";

/// Whether a group exists (a death that creates one announces it).
pub(super) const GROUP_EXISTS: &str =
    "SELECT EXISTS (SELECT 1 FROM {p}dead_letter_groups WHERE fingerprint = ?1)";

/// A death in a group: created if new; counts, last seen, sample and types updated.
pub(super) const GROUP_UPSERT: &str =
    "INSERT INTO {p}dead_letter_groups (fingerprint, subscription, signature, sample_error,
             count, open, first_seen, last_seen, event_types)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, json_array(?8))
         ON CONFLICT(fingerprint) DO UPDATE SET count = count + ?5, open = open + ?6,
             last_seen = max(last_seen, ?7), sample_error = ?4,
             event_types = CASE
                 WHEN EXISTS (SELECT 1 FROM json_each(event_types) WHERE value = ?8)
                     OR json_array_length(event_types) >= ?9 THEN event_types
                 ELSE json_insert(event_types, '$[#]', ?8) END";

/// Groups, most open first.
pub(super) const GROUPS: &str =
    "SELECT fingerprint, subscription, signature, sample_error, count, open, first_seen,
             last_seen, event_types
         FROM {p}dead_letter_groups ORDER BY open DESC, count DESC, last_seen DESC LIMIT ?1 + 0";

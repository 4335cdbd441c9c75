//! The statements of the hot path, subscriptions and queries (templates: `{p}` is the table
//! prefix, `{cols}` the event columns).

/// The due-events filter. `INDEXED BY` pins the partial index on due events: on a table where
/// most rows are pending the planner would otherwise scan past claimed rows. `LIMIT ?2 + 0`
/// rather than `LIMIT ?2`: SQLite recompiles a statement on every run when the planner has
/// looked at a bound LIMIT, which cost more than the claim itself.
macro_rules! due_filter {
    () => {
        "FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' AND next_attempt_at <= ?1 ORDER BY next_attempt_at LIMIT ?2 + 0"
    };
}

/// The meta table (schema version).
pub(super) const META: &str = "{p}meta";

/// The statistics snapshot kept in the meta table.
pub(super) const STATS_GET: &str = "SELECT value FROM {p}meta WHERE key = 'stats_snapshot'";

/// Keeps a statistics snapshot in the meta table.
pub(super) const STATS_PUT: &str = "INSERT INTO {p}meta (key, value) VALUES ('stats_snapshot', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value";

/// The due events a claim takes (`?1` now, `?2` how many): ids only, for query plans.
pub(super) const DUE: &str = concat!("SELECT id ", due_filter!());

/// The claim's SELECT: every column of the due events.
pub(super) const CLAIM_SELECT: &str = concat!("SELECT {cols} ", due_filter!());

/// Marks one claimed event `processing`.
pub(super) const CLAIM_UPDATE: &str =
    "UPDATE {p}events SET status = 'processing', updated_at = ?2 WHERE id = ?1";

/// Inserts one event unless its id exists (idempotent publish).
pub(super) const INSERT: &str = "INSERT INTO {p}events (id, type, payload, status, metadata, created_at, updated_at, next_attempt_at,
             published_snapshot)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8) ON CONFLICT(id) DO NOTHING";

/// Outcome: done, for an event that was never a dead letter (the common case: a plain
/// update, no RETURNING, which costs SQLite an ephemeral table per row).
pub(super) const RECORD_DONE: &str =
    "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count = 0";

/// Outcome: done, for a revived dead letter (whose record the delivery resolves).
pub(super) const RECORD_DONE_REVIVED: &str =
    "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count > 0";

/// Outcome: retry later.
pub(super) const RECORD_RETRY: &str =
    "UPDATE {p}events SET status = 'pending', retry_count = ?2, last_error = ?3, delivered = ?4,
             updated_at = ?5, next_attempt_at = ?6
         WHERE id = ?1 AND status = 'processing'";

/// Outcome: dead letter. Returns the event's dead-letter count before this death (above
/// 0: its record gets a new round).
pub(super) const RECORD_DEAD: &str =
    "UPDATE {p}events SET status = 'dlq', retry_count = ?2, last_error = ?3, delivered = ?4,
             updated_at = ?5, dlq_at = ?5, next_attempt_at = NULL, dlq_count = dlq_count + 1
         WHERE id = ?1 AND status = 'processing' RETURNING dlq_count - 1";

/// Gives one claimed event back.
pub(super) const RELEASE: &str =
    "UPDATE {p}events SET status = 'pending', updated_at = ?2, next_attempt_at = ?2
         WHERE id = ?1 AND status = 'processing'";

/// Crash recovery of every `processing` event (`?1` now), the interrupted attempt counted
/// as `store::recovery` decides (`?2` added to the retry count, `?3` the note appended).
pub(super) const RECOVER: &str =
    "UPDATE {p}events SET status = 'pending', retry_count = retry_count + ?2,
             last_error = json_insert(coalesce(last_error, '[]'), '$[#]', ?3),
             updated_at = ?1, next_attempt_at = ?1
         WHERE status = 'processing'";

/// Frees a subscription name for another id.
pub(super) const SUBSCRIPTION_FREE_NAME: &str =
    "DELETE FROM {p}subscriptions WHERE name = ?1 AND id <> ?2";

/// Stores a subscription.
pub(super) const SUBSCRIPTION_SAVE: &str =
    "INSERT INTO {p}subscriptions (id, name, event_type, created_at) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT(id) DO UPDATE SET name = excluded.name, event_type = excluded.event_type";

/// Deletes a subscription.
pub(super) const SUBSCRIPTION_DELETE: &str = "DELETE FROM {p}subscriptions WHERE id = ?1";

/// Every subscription.
pub(super) const SUBSCRIPTIONS: &str =
    "SELECT id, name, event_type, created_at FROM {p}subscriptions ORDER BY created_at, id";

/// One chunk of the history purge: done events completed at or before `?1`, at most `?2`
/// (each with whether it holds a shared `published` snapshot).
pub(super) const HISTORY_PURGE: &str =
    "SELECT rowid, id, published_snapshot IS NOT NULL FROM {p}events
         WHERE status = 'done' AND updated_at <= ?1 LIMIT ?2 + 0";

/// Deletes one event row of the history purge.
pub(super) const HISTORY_DELETE: &str = "DELETE FROM {p}events WHERE rowid = ?1";

/// The earliest due time.
pub(super) const NEXT_DUE: &str = "SELECT next_attempt_at FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' ORDER BY next_attempt_at LIMIT 1";

/// One event by id.
pub(super) const GET_EVENT: &str = "SELECT {cols} FROM {p}events WHERE id = ?1";

/// Counts by type and status.
pub(super) const COUNTS: &str =
    "SELECT type, status, count(*) FROM {p}events GROUP BY type, status ORDER BY type, status";

/// Counts by status and retry count.
pub(super) const RETRY_COUNTS: &str =
    "SELECT status, retry_count, count(*) FROM {p}events GROUP BY status, retry_count
         ORDER BY status, retry_count";

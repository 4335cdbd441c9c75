//! The statements of the hot path, subscriptions and queries (templates: `{p}` is the table
//! prefix, `{cols}` the event columns).

/// The due-events filter of priority 0 (the usual case). `INDEXED BY` pins the partial index
/// on due events: on a table where most rows are pending the planner would otherwise scan past
/// claimed rows. `LIMIT ?2 + 0` rather than `LIMIT ?2`: SQLite recompiles a statement on every
/// run when the planner has looked at a bound LIMIT, which cost more than the claim itself.
macro_rules! due_filter {
    () => {
        "FROM {p}events INDEXED BY {p}events_due
         WHERE status = 'pending' AND next_attempt_at <= ?1 AND priority = 0
         ORDER BY next_attempt_at LIMIT ?2 + 0"
    };
}

/// Due pending events with a priority of the sign `$sign` (`>` or `<`), highest first, from the
/// waiting table's lane 2 (a row there may be stale: the event must still be pending).
macro_rules! prioritised {
    ($sign:literal) => {
        concat!(
            "SELECT {ecols} FROM {p}waiting AS w INDEXED BY {p}waiting_priority
             CROSS JOIN {p}events AS e ON e.id = w.event_id
             WHERE w.lane = 2 AND w.priority ",
            $sign,
            " 0 AND w.due <= ?1 AND e.status = 'pending'
             ORDER BY w.priority DESC, w.due LIMIT ?2 + 0"
        )
    };
}

/// The meta table (schema version).
pub(super) const META: &str = "{p}meta";

/// The statistics snapshot kept in the meta table.
pub(super) const STATS_GET: &str = "SELECT value FROM {p}meta WHERE key = 'stats_snapshot'";

/// Keeps a statistics snapshot in the meta table.
pub(super) const STATS_PUT: &str = "INSERT INTO {p}meta (key, value) VALUES ('stats_snapshot', ?1)
         ON CONFLICT(key) DO UPDATE SET value = excluded.value";

/// The due events of priority 0 a claim takes (`?1` now, `?2` how many): ids only, for query
/// plans.
pub(super) const DUE: &str = concat!("SELECT id ", due_filter!());

/// The claim's SELECT of priority 0: every column of the due events.
pub(super) const CLAIM_SELECT: &str = concat!("SELECT {cols} ", due_filter!());

/// The claim's SELECT of positive priorities, taken before priority 0.
pub(super) const CLAIM_HIGH: &str = prioritised!(">");

/// The claim's SELECT of negative priorities, taken after priority 0.
pub(super) const CLAIM_LOW: &str = prioritised!("<");

/// Scheduled events whose time has come (`?1` now), earliest due first, at most `?2` (a chunk of
/// [`PROMOTE_CHUNK`](crate::store::PROMOTE_CHUNK)): their ids, priorities and due times.
pub(super) const DUE_SCHEDULED: &str =
    "SELECT event_id, priority, due FROM {p}waiting INDEXED BY {p}waiting_scheduled
         WHERE lane = 1 AND due <= ?1 ORDER BY due LIMIT ?2 + 0";

/// A scheduled event becomes pending, keeping its due time.
pub(super) const PROMOTE: &str =
    "UPDATE {p}events SET status = 'pending' WHERE id = ?1 AND status = 'scheduled'";

/// An event's row in the waiting table, written or replaced (`?2` lane, `?3` priority, `?4` due).
pub(super) const WAITING_PUT: &str =
    "INSERT OR REPLACE INTO {p}waiting (event_id, lane, priority, due) VALUES (?1, ?2, ?3, ?4)";

/// An event leaves the waiting table.
pub(super) const WAITING_DELETE: &str = "DELETE FROM {p}waiting WHERE event_id = ?1";

/// A pending event with a priority (back from an attempt: a retry, a release, a dead letter
/// sent back) enters lane 2 at its due time.
pub(super) const WAITING_PENDING: &str =
    "INSERT OR REPLACE INTO {p}waiting (event_id, lane, priority, due)
         SELECT id, 2, priority, next_attempt_at FROM {p}events
         WHERE id = ?1 AND status = 'pending' AND priority <> 0";

/// Before a crash recovery (`?1` now): the running events with a priority it sends back to
/// pending enter lane 2, due now.
pub(super) const WAITING_RECOVERED: &str =
    "INSERT OR REPLACE INTO {p}waiting (event_id, lane, priority, due)
         SELECT id, 2, priority, ?1 FROM {p}events INDEXED BY {p}events_processing
         WHERE status = 'processing' AND priority <> 0 AND cancel_requested = 0";

/// Marks one claimed event `processing`.
pub(super) const CLAIM_UPDATE: &str =
    "UPDATE {p}events SET status = 'processing', updated_at = ?2 WHERE id = ?1";

/// Inserts one event unless its id exists (idempotent publish).
pub(super) const INSERT: &str = "INSERT INTO {p}events (id, type, payload, status, metadata, created_at, updated_at, next_attempt_at,
             published_snapshot, priority, deliver_at, ordering_key, key_queued, key_prev)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) ON CONFLICT(id) DO NOTHING";

/// The event holding dedup key `?1` in a window still open at `?2`.
pub(super) const DEDUP_GET: &str =
    "SELECT event_id FROM {p}dedup WHERE key = ?1 AND expires_at > ?2";

/// Event `?2` takes dedup key `?1` until `?3` (replacing a closed window).
pub(super) const DEDUP_PUT: &str =
    "INSERT OR REPLACE INTO {p}dedup (key, event_id, expires_at) VALUES (?1, ?2, ?3)";

/// Drops the dedup windows closed by `?1`.
pub(super) const DEDUP_PURGE: &str = "DELETE FROM {p}dedup WHERE expires_at <= ?1";

/// Outcome: done, for an event that was never a dead letter (the common case: a plain
/// update, no RETURNING, which costs SQLite an ephemeral table per row).
pub(super) const RECORD_DONE: &str =
    "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count = 0 AND ordering_key IS NULL";

/// Outcome: done, for an event known (by the store's memory of the events it handed over) to
/// be the head of key `?4`'s queue and never a dead letter: the event gives up its place in
/// the same update. No change for an event that is not that (the general statements follow).
pub(super) const RECORD_DONE_HEAD: &str =
    "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL,
             key_queued = NULL
         WHERE id = ?1 AND status = 'processing' AND dlq_count = 0 AND ordering_key = ?4
             AND key_queued IS NOT NULL AND key_prev IS NULL";

/// Outcome: done, for an event the plain statement passed over (a revived dead letter, whose
/// record the delivery resolves, or an event with an ordering key, which gives up its place in
/// its key's queue): whether it was a dead letter, and, if it is in its key's queue, its key
/// (whose next event may become due) and the event ahead of it. No row for an event that is
/// not running.
pub(super) const RECORD_DONE_OTHER_READ: &str =
    "SELECT dlq_count > 0, CASE WHEN key_queued IS NOT NULL THEN ordering_key END, key_prev
         FROM {p}events WHERE id = ?1 AND status = 'processing'";

/// Outcome: done, for the events [`RECORD_DONE_OTHER_READ`] read (a plain update again, not
/// one `RETURNING` what it read).
pub(super) const RECORD_DONE_OTHER: &str =
    "UPDATE {p}events SET status = 'done', delivered = ?2, updated_at = ?3, next_attempt_at = NULL,
             key_queued = NULL, key_prev = NULL
         WHERE id = ?1 AND status = 'processing'";

/// Outcome: retry later; or, if a cancel came during the attempt (`cancel_requested`), no retry:
/// `cancelled`.
pub(super) const RECORD_RETRY: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             retry_count = ?2, last_error = ?3, delivered = ?4, updated_at = ?5,
             next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?6 END
         WHERE id = ?1 AND status = 'processing'";

/// Outcome: handlers snoozed: pending again at `?4`, retry count and errors untouched (or
/// `cancelled`, if a cancel came during the attempt).
pub(super) const RECORD_SNOOZE: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             delivered = ?2, updated_at = ?3,
             next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?4 END
         WHERE id = ?1 AND status = 'processing'";

/// One more snooze of event `?1` by subscription `?2`.
pub(super) const SNOOZE_COUNT_UP: &str =
    "INSERT INTO {p}snoozes (event_id, subscription, count) VALUES (?1, ?2, 1)
         ON CONFLICT (event_id, subscription) DO UPDATE SET count = count + 1";

/// How often subscription `?2` has snoozed event `?1`.
pub(super) const SNOOZE_COUNT: &str =
    "SELECT count FROM {p}snoozes WHERE event_id = ?1 AND subscription = ?2";

/// Outcome: dead letter (or `cancelled`, if a cancel came during the attempt). Returns the
/// event's dead-letter count before this death (above 0: its record gets a new round) and
/// whether it was cancelled instead (no record then).
pub(super) const RECORD_DEAD: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'dlq' END,
             retry_count = ?2, last_error = ?3, delivered = ?4, updated_at = ?5,
             dlq_at = CASE WHEN cancel_requested THEN NULL ELSE ?5 END, next_attempt_at = NULL,
             dlq_count = dlq_count + 1 - cancel_requested
         WHERE id = ?1 AND status = 'processing'
         RETURNING dlq_count - 1 + cancel_requested, cancel_requested, ordering_key";

/// Gives one claimed event back (`cancelled` instead, if a cancel came meanwhile).
pub(super) const RELEASE: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             updated_at = ?2, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?2 END
         WHERE id = ?1 AND status = 'processing'";

/// Crash recovery of every `processing` event (`?1` now), the interrupted attempt counted
/// as `store::recovery` decides (`?2` added to the retry count, `?3` the note appended); an
/// event cancelled during the attempt becomes `cancelled`.
pub(super) const RECOVER: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             retry_count = retry_count + ?2,
             last_error = json_insert(coalesce(last_error, '[]'), '$[#]', ?3),
             updated_at = ?1, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?1 END
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

/// The earliest due time of a pending or a scheduled event (an event waiting behind its
/// ordering key has none).
pub(super) const NEXT_DUE: &str = "SELECT min(t) FROM (
         SELECT * FROM (SELECT next_attempt_at AS t FROM {p}events INDEXED BY {p}events_due
                        WHERE status = 'pending' AND next_attempt_at IS NOT NULL
                        ORDER BY next_attempt_at LIMIT 1)
         UNION ALL
         SELECT * FROM (SELECT due AS t FROM {p}waiting INDEXED BY {p}waiting_scheduled
                        WHERE lane = 1 ORDER BY due LIMIT 1))";

/// One event by id.
pub(super) const GET_EVENT: &str = "SELECT {cols} FROM {p}events WHERE id = ?1";

/// Counts by type and status.
pub(super) const COUNTS: &str =
    "SELECT type, status, count(*) FROM {p}events GROUP BY type, status ORDER BY type, status";

/// Counts by status and retry count.
pub(super) const RETRY_COUNTS: &str =
    "SELECT status, retry_count, count(*) FROM {p}events GROUP BY status, retry_count
         ORDER BY status, retry_count";

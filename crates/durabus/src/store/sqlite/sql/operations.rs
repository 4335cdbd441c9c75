//! The statements of durable operations and scheduled jobs (templates: `{p}` is the table
//! prefix, `{op}` the operation columns).

/// The columns every operation query selects.
pub const OP_COLUMNS: &str = "id, kind, status, params, bound, cursor, total, processed, skipped, \
     errors, actor, actor_kind, cancel_requested, created_at, started_at, finished_at, \
     updated_at, last_error, cursor_key, summary, holder, lease_expires_at";

/// A new operation.
pub(super) const OP_INSERT: &str =
    "INSERT INTO {p}operations (id, kind, status, params, bound, cursor, total, actor,
             actor_kind, created_at, updated_at)
         VALUES (?1, ?2, 'pending', ?3, ?4, 0, ?5, ?6, ?7, ?8, ?8)";

/// One operation.
pub(super) const OP_GET: &str = "SELECT {op} FROM {p}operations WHERE id = ?1";

/// Operations newest first, of status `?1` and kind `?2` where given.
pub(super) const OP_LIST: &str = "SELECT {op} FROM {p}operations
         WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR kind = ?2)
         ORDER BY created_at DESC, id DESC LIMIT ?3 + 0";

/// Takes an operation (`?2` holder, `?3` lease expiry, `?4` now), once
/// `operation::state::may_claim` has allowed it.
pub(super) const OP_CLAIM: &str =
    "UPDATE {p}operations SET status = 'running', holder = ?2, lease_expires_at = ?3,
             started_at = coalesce(started_at, ?4), updated_at = ?4
         WHERE id = ?1";

/// Open operations, oldest first, at most `?1`.
pub(super) const OP_OPEN: &str = "SELECT {op} FROM {p}operations INDEXED BY {p}operations_open
         WHERE status IN ('pending', 'running') ORDER BY created_at LIMIT ?1 + 0";

/// One chunk of an operation held by `?12` (whose cursor is `?13`, `?14`, if given):
/// cursor, counts, summary (`?7`, if not NULL) and, with a status in `?8`, its end.
pub(super) const OP_ADVANCE: &str =
    "UPDATE {p}operations SET cursor = ?2, cursor_key = ?3, processed = processed + ?4,
             skipped = skipped + ?5, errors = errors + ?6, summary = coalesce(?7, summary),
             status = coalesce(?8, status), last_error = coalesce(?9, last_error),
             lease_expires_at = CASE WHEN ?8 IS NULL THEN ?10 ELSE lease_expires_at END,
             finished_at = CASE WHEN ?8 IS NULL THEN finished_at ELSE ?11 END, updated_at = ?11
         WHERE id = ?1 AND status = 'running' AND holder = ?12
             AND (?13 IS NULL OR (cursor = ?13 AND cursor_key = ?14))";

/// A cancel request (`?2` now) with the status (`?3`) and end (`?4`, if any) that
/// `operation::state::cancel` gave it.
pub(super) const OP_CANCEL: &str =
    "UPDATE {p}operations SET cancel_requested = 1, updated_at = ?2, status = ?3,
             finished_at = coalesce(?4, finished_at)
         WHERE id = ?1";

/// Lets go of an operation.
pub(super) const OP_RELEASE: &str =
    "UPDATE {p}operations SET lease_expires_at = ?3, updated_at = ?3
         WHERE id = ?1 AND status = 'running' AND holder = ?2";

/// Fails an operation.
pub(super) const OP_FAIL: &str =
    "UPDATE {p}operations SET status = 'failed', last_error = ?3, finished_at = ?4, updated_at = ?4
         WHERE id = ?1 AND status = 'running' AND holder = ?2";

/// A job's row, created if missing.
pub(super) const JOB_ENSURE: &str =
    "INSERT INTO {p}jobs (name) VALUES (?1) ON CONFLICT(name) DO NOTHING";

/// Starts a tick (`?2`) of a job for `?3` until `?4`, at `?5`, if the tick is new and no
/// live holder runs it.
pub(super) const JOB_BEGIN_TICK: &str =
    "UPDATE {p}jobs SET last_tick = ?2, holder = ?3, lock_expires_at = ?4,
             last_started_at = ?5, runs = runs + 1
         WHERE name = ?1 AND (last_tick IS NULL OR last_tick < ?2)
             AND (holder IS NULL OR lock_expires_at <= ?5)";

/// Marks a tick skipped (a run is still going), once across processes.
pub(super) const JOB_SKIP_TICK: &str = "UPDATE {p}jobs SET last_tick = ?2, skipped = skipped + 1
         WHERE name = ?1 AND (last_tick IS NULL OR last_tick < ?2)";

/// Starts a run outside the schedule.
pub(super) const JOB_BEGIN_NOW: &str =
    "UPDATE {p}jobs SET holder = ?2, lock_expires_at = ?3, last_started_at = ?4, runs = runs + 1
         WHERE name = ?1 AND (holder IS NULL OR lock_expires_at <= ?4)";

/// Ends a run.
pub(super) const JOB_END: &str =
    "UPDATE {p}jobs SET holder = NULL, lock_expires_at = NULL, last_finished_at = ?5,
             last_status = ?3, last_message = ?4
         WHERE name = ?1 AND holder = ?2";

/// Every job.
pub(super) const JOBS: &str =
    "SELECT name, last_tick, holder, last_started_at, last_finished_at, last_status, last_message,
             runs, skipped FROM {p}jobs ORDER BY name";

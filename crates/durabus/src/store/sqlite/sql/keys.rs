//! The statements of ordering keys (templates: `{p}` is the table prefix). A key's queue is its
//! events with a `key_seq` (partial index `events_key` on `(ordering_key, key_seq)`). The ones
//! run for every keyed event (a publish, a completion) return no rows from a write: SQLite
//! builds an ephemeral table for each row a `RETURNING` clause returns.

/// The place of the last event in key `?1`'s queue; no row when the key has no unfinished
/// events.
pub(super) const KEY_LAST: &str = "SELECT key_seq FROM {p}events
         WHERE ordering_key = ?1 AND key_seq IS NOT NULL ORDER BY key_seq DESC LIMIT 1";

/// Event `?1` joins its key's queue at place `?2` (a dead letter sent back).
pub(super) const KEY_JOIN: &str = "UPDATE {p}events SET key_seq = ?2 WHERE id = ?1";

/// Event `?1`'s key, if the event is in its key's queue.
pub(super) const KEY_PLACE: &str =
    "SELECT ordering_key FROM {p}events WHERE id = ?1 AND key_seq IS NOT NULL";

/// Event `?1` gives up its place in its key's queue.
pub(super) const KEY_DROP: &str = "UPDATE {p}events SET key_seq = NULL WHERE id = ?1";

/// Event `?1` no longer holds its key as a dead letter (it left its key's queue, or it was sent
/// back at the head).
pub(super) const KEY_UNHOLD: &str = "DELETE FROM {p}key_holds WHERE event_id = ?1";

/// Whether event `?1` has a place in its key's queue.
pub(super) const KEY_IN_QUEUE: &str =
    "SELECT 1 FROM {p}events WHERE id = ?1 AND key_seq IS NOT NULL";

/// The head of key `?1` and what waking it needs, all integers: its row, whether it waits
/// for its key (pending or scheduled with no due time), its `deliver_at` (0 for none), publish
/// time and priority.
pub(super) const KEY_HEAD: &str =
    "SELECT rowid, status IN ('pending', 'scheduled') AND next_attempt_at IS NULL,
             coalesce(deliver_at, 0), created_at, priority
         FROM {p}events
         WHERE ordering_key = ?1 AND key_seq IS NOT NULL ORDER BY key_seq LIMIT 1";

/// The id of the event in row `?1`.
pub(super) const KEY_HEAD_ID: &str = "SELECT id FROM {p}events WHERE rowid = ?1";

/// A waiting head, by row, becomes due: status `?2` (pending or scheduled) at `?3`.
pub(super) const KEY_WAKE: &str = "UPDATE {p}events SET status = ?2, next_attempt_at = ?3
         WHERE rowid = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL";

/// A waiting head, by row, is claimed by the completion that woke it (`?2` its due time, `?3`
/// now): it goes to the next claim without waiting in the due index.
pub(super) const KEY_HAND: &str =
    "UPDATE {p}events SET status = 'processing', next_attempt_at = ?2, updated_at = ?3
         WHERE rowid = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL";

/// Every column of the event in row `?1` (a head just claimed by [`KEY_HAND`]).
pub(super) const KEY_HANDED: &str = "SELECT {cols} FROM {p}events WHERE rowid = ?1";

/// Set-aside event `?1`, claimed by a completion and never delivered, goes back to pending at
/// its due time `?2` (`?3` now; `cancelled` instead, if a cancel came meanwhile).
pub(super) const KEY_GIVE_BACK: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             updated_at = ?3, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?2 END
         WHERE id = ?1 AND status = 'processing'";

/// Whether event `?1` is dead.
pub(super) const KEY_DEAD: &str = "SELECT 1 FROM {p}events WHERE id = ?1 AND status = 'dlq'";

/// Whether keyed event `?1` ended cancelled.
pub(super) const KEY_CANCELLED: &str = "SELECT 1 FROM {p}events
         WHERE id = ?1 AND ordering_key IS NOT NULL AND status = 'cancelled'";

/// The keyed events a crash recovery ended cancelled.
pub(super) const KEY_CANCELLED_ALL: &str =
    "SELECT id FROM {p}events WHERE key_seq IS NOT NULL AND status = 'cancelled'";

/// How many events of key `?1` wait behind event `?2`.
pub(super) const KEY_WAITING: &str =
    "SELECT count(*) FROM {p}events WHERE ordering_key = ?1 AND key_seq IS NOT NULL AND id <> ?2";

/// Event `?1` holds its key since `?2` (dead, with `hold_key_on_dead_letter`).
pub(super) const KEY_HOLD: &str = "INSERT OR REPLACE INTO {p}key_holds (event_id, held_since)
         SELECT id, ?2 FROM {p}events WHERE id = ?1 AND key_seq IS NOT NULL";

/// A dead letter's key and how many events of it were waiting.
pub(super) const KEY_DEAD_LETTER: &str =
    "UPDATE {p}dead_letters SET ordering_key = ?2, key_waiting = ?3 WHERE event_id = ?1";

/// Event `?1`'s ordering key.
pub(super) const KEY_OF: &str = "SELECT ordering_key FROM {p}events WHERE id = ?1";

/// A pending event that rejoined a busy key waits without a due time.
pub(super) const KEY_UNDUE: &str =
    "UPDATE {p}events SET next_attempt_at = NULL WHERE id = ?1 AND status = 'pending'";

//! The statements of ordering keys (templates: `{p}` is the table prefix). A key's queue is its
//! events with a `key_queued`, each pointing at the event ahead of it (`key_prev`, partial index
//! `events_key_next`), its last event a row of `key_tails`. The ones
//! run for every keyed event (a publish, a completion) return no rows from a write: SQLite
//! builds an ephemeral table for each row a `RETURNING` clause returns.

/// The last event (id) of key `?1`'s queue; no row when the key has no unfinished events.
pub(super) const KEY_TAIL: &str = "SELECT tail FROM {p}key_tails WHERE ordering_key = ?1";

/// Event `?2` is the last of key `?1`'s queue.
pub(super) const KEY_TAIL_SET: &str =
    "INSERT OR REPLACE INTO {p}key_tails (ordering_key, tail) VALUES (?1, ?2)";

/// The last event of key `?1`'s queue, `?2`, left it: `?3` (the event that was ahead of it)
/// is the last now.
pub(super) const KEY_TAIL_BACK: &str =
    "UPDATE {p}key_tails SET tail = ?3 WHERE ordering_key = ?1 AND tail = ?2";

/// The last event of key `?1`'s queue, `?2`, left it and none was ahead: the queue is empty.
pub(super) const KEY_TAIL_DROP: &str =
    "DELETE FROM {p}key_tails WHERE ordering_key = ?1 AND tail = ?2";

/// Event `?1` joins its key's queue behind event `?2` (NULL: at the head; a dead letter sent
/// back).
pub(super) const KEY_JOIN: &str =
    "UPDATE {p}events SET key_queued = 1, key_prev = ?2 WHERE id = ?1";

/// Event `?1`'s key and the event ahead of it, if the event is in its key's queue.
pub(super) const KEY_PLACE: &str =
    "SELECT ordering_key, key_prev FROM {p}events WHERE id = ?1 AND key_queued IS NOT NULL";

/// Event `?1` gives up its place in its key's queue.
pub(super) const KEY_DROP: &str =
    "UPDATE {p}events SET key_queued = NULL, key_prev = NULL WHERE id = ?1";

/// The event behind event `?1` in its key's queue: every column (a completion hands it over
/// with no second read), then its row and whether it waits
/// for its key (pending or scheduled with no due time).
pub(super) const KEY_NEXT: &str =
    "SELECT {cols}, rowid, status IN ('pending', 'scheduled') AND next_attempt_at IS NULL
         FROM {p}events WHERE key_prev = ?1";

/// The event in row `?1` now stands behind event `?2` (NULL: it is the head).
pub(super) const KEY_LINK: &str = "UPDATE {p}events SET key_prev = ?2 WHERE rowid = ?1";

/// A waiting event, by row, becomes the head of its key and due: status `?2` (pending or
/// scheduled) at `?3`.
pub(super) const KEY_WAKE: &str = "UPDATE {p}events SET status = ?2, next_attempt_at = ?3,
             key_prev = NULL
         WHERE rowid = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL";

/// A waiting event, by row, becomes the head of its key and is claimed by the completion that
/// woke it (`?2` its due time, `?3` now): it goes to the next claim without waiting in the due
/// index.
pub(super) const KEY_HAND: &str =
    "UPDATE {p}events SET status = 'processing', next_attempt_at = ?2, updated_at = ?3,
             key_prev = NULL
         WHERE rowid = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL";

/// Set-aside event `?1`, claimed by a completion and never delivered, goes back to pending at
/// its due time `?2` (`?3` now; `cancelled` instead, if a cancel came meanwhile).
pub(super) const KEY_GIVE_BACK: &str =
    "UPDATE {p}events SET status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
             updated_at = ?3, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE ?2 END
         WHERE id = ?1 AND status = 'processing'";

/// Event `?1` no longer holds its key as a dead letter (it left its key's queue, or it was sent
/// back at the head).
pub(super) const KEY_UNHOLD: &str = "DELETE FROM {p}key_holds WHERE event_id = ?1";

/// Whether event `?1` has a place in its key's queue.
pub(super) const KEY_IN_QUEUE: &str =
    "SELECT 1 FROM {p}events WHERE id = ?1 AND key_queued IS NOT NULL";

/// Whether event `?1` is dead.
pub(super) const KEY_DEAD: &str = "SELECT 1 FROM {p}events WHERE id = ?1 AND status = 'dlq'";

/// Whether keyed event `?1` ended cancelled.
pub(super) const KEY_CANCELLED: &str = "SELECT 1 FROM {p}events
         WHERE id = ?1 AND ordering_key IS NOT NULL AND status = 'cancelled'";

/// Before a crash recovery: the running events in a key's queue that it will end cancelled
/// (a cancel came during their attempt).
pub(super) const KEY_CANCELLED_ALL: &str =
    "SELECT id FROM {p}events INDEXED BY {p}events_processing
         WHERE status = 'processing' AND cancel_requested = 1 AND key_queued IS NOT NULL";

/// How many events wait behind event `?1` in its key's queue (`UNION`: a list that loops,
/// which nothing writes, would still end).
pub(super) const KEY_WAITING: &str = "WITH RECURSIVE behind(id) AS (
             SELECT id FROM {p}events WHERE key_prev = ?1
             UNION
             SELECT e.id FROM {p}events AS e JOIN behind AS b ON e.key_prev = b.id)
         SELECT count(*) FROM behind";

/// Event `?1` holds its key since `?2` (dead, with `hold_key_on_dead_letter`).
pub(super) const KEY_HOLD: &str = "INSERT OR REPLACE INTO {p}key_holds (event_id, held_since)
         SELECT id, ?2 FROM {p}events WHERE id = ?1 AND key_queued IS NOT NULL";

/// A dead letter's key and how many events of it were waiting.
pub(super) const KEY_DEAD_LETTER: &str =
    "UPDATE {p}dead_letters SET ordering_key = ?2, key_waiting = ?3 WHERE event_id = ?1";

/// Event `?1`'s ordering key.
pub(super) const KEY_OF: &str = "SELECT ordering_key FROM {p}events WHERE id = ?1";

/// A pending event that rejoined a busy key waits without a due time.
pub(super) const KEY_UNDUE: &str =
    "UPDATE {p}events SET next_attempt_at = NULL WHERE id = ?1 AND status = 'pending'";

//! The statements of ordering keys (templates: `{p}` is the table prefix). The ones run for
//! every keyed event (a publish, a completion) return no rows from a write: SQLite builds an
//! ephemeral table for each row a `RETURNING` clause returns.

/// Whether key `?1` has unfinished events.
pub(super) const KEY_BUSY: &str = "SELECT 1 FROM {p}keyed WHERE key = ?1 LIMIT 1";

/// Event `?2` joins the back of key `?1`'s queue.
pub(super) const KEY_JOIN: &str = "INSERT INTO {p}keyed (key, event_id) VALUES (?1, ?2)";

/// Event `?1`'s place in its key's queue: the key and the row's `seq`.
pub(super) const KEY_PLACE: &str = "SELECT key, seq FROM {p}keyed WHERE event_id = ?1";

/// A place in a key's queue, by `seq`, given up.
pub(super) const KEY_DROP: &str = "DELETE FROM {p}keyed WHERE seq = ?1";

/// The head of key `?1` and what waking it needs: its id, status, whether it has a due time,
/// its `deliver_at` (0 for none), publish time and priority.
pub(super) const KEY_HEAD: &str = "SELECT e.id, e.status, e.next_attempt_at IS NULL,
             coalesce(e.deliver_at, 0), e.created_at, e.priority
         FROM {p}keyed AS k JOIN {p}events AS e ON e.id = k.event_id
         WHERE k.key = ?1 ORDER BY k.seq LIMIT 1";

/// A waiting head becomes due: status `?2` (pending or scheduled) at `?3`.
pub(super) const KEY_WAKE: &str = "UPDATE {p}events SET status = ?2, next_attempt_at = ?3
         WHERE id = ?1 AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL";

/// Whether keyed event `?1` ended cancelled.
pub(super) const KEY_CANCELLED: &str = "SELECT 1 FROM {p}events
         WHERE id = ?1 AND ordering_key IS NOT NULL AND status = 'cancelled'";

/// The keyed events a crash recovery ended cancelled.
pub(super) const KEY_CANCELLED_ALL: &str = "SELECT k.event_id
         FROM {p}keyed AS k JOIN {p}events AS e ON e.id = k.event_id
         WHERE e.status = 'cancelled'";

/// How many events of key `?1` wait behind event `?2`.
pub(super) const KEY_WAITING: &str =
    "SELECT count(*) FROM {p}keyed WHERE key = ?1 AND event_id <> ?2";

/// Event `?1` holds its key since `?2` (dead, with `hold_key_on_dead_letter`).
pub(super) const KEY_HOLD: &str = "UPDATE {p}keyed SET held_since = ?2 WHERE event_id = ?1";

/// Event `?1` no longer holds its key as a dead letter.
pub(super) const KEY_UNHOLD: &str = "UPDATE {p}keyed SET held_since = NULL WHERE event_id = ?1";

/// A dead letter's key and how many events of it were waiting.
pub(super) const KEY_DEAD_LETTER: &str =
    "UPDATE {p}dead_letters SET ordering_key = ?2, key_waiting = ?3 WHERE event_id = ?1";

/// Event `?1`'s ordering key.
pub(super) const KEY_OF: &str = "SELECT ordering_key FROM {p}events WHERE id = ?1";

/// A pending event that rejoined a busy key waits without a due time.
pub(super) const KEY_UNDUE: &str =
    "UPDATE {p}events SET next_attempt_at = NULL WHERE id = ?1 AND status = 'pending'";

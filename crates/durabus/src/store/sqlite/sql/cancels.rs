//! The statements of cancels (templates: `{p}` is the table prefix).

/// What a cancel needs to know of an event.
pub(super) const CN_STATE: &str = "SELECT status, delivered, cancelled, cancel_requested, dlq_count
         FROM {p}events WHERE id = ?1";

/// A waiting event cancelled for every subscription.
pub(super) const CN_EVENT: &str =
    "UPDATE {p}events SET status = 'cancelled', next_attempt_at = NULL, updated_at = ?2
         WHERE id = ?1 AND status IN ('scheduled', 'pending')";

/// A running event: no retry after its attempt.
pub(super) const CN_REQUEST: &str = "UPDATE {p}events SET cancel_requested = 1, updated_at = ?2
         WHERE id = ?1 AND status = 'processing'";

/// One more subscription the event is cancelled for (`?2` its key).
pub(super) const CN_SUBSCRIPTION: &str =
    "UPDATE {p}events SET cancelled = json_insert(coalesce(cancelled, '[]'), '$[#]', ?2),
             updated_at = ?3
         WHERE id = ?1";

/// A cancellation on record.
pub(super) const CN_INSERT: &str = "INSERT INTO {p}cancellations
         (event_id, subscription, outcome, actor, actor_kind, reason, cancelled_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";

/// An event's cancellations, oldest first.
pub(super) const CN_LIST: &str =
    "SELECT event_id, subscription, outcome, actor, reason, cancelled_at
         FROM {p}cancellations WHERE event_id = ?1 ORDER BY seq";

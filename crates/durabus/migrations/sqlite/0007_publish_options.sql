-- Publish options: a priority (higher first among due events) and the time a scheduled event
-- was published for. A scheduled event has status 'scheduled' and its due time in
-- next_attempt_at until a claim takes it.
ALTER TABLE {p}events ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {p}events ADD COLUMN deliver_at INTEGER;
-- The waiting lane of an event, for the two indexes below: 1 = scheduled, 2 = pending with a
-- priority other than 0, NULL = neither (the usual case); `wait_at` is its due time while it
-- is in a lane. The indexes are partial on the lane and keyed on these columns of their own,
-- not on status or next_attempt_at, so the hot path's writes to an ordinary event (its claim,
-- its completion) never touch them.
ALTER TABLE {p}events ADD COLUMN wait_lane INTEGER;
ALTER TABLE {p}events ADD COLUMN wait_at INTEGER;
-- Scheduled events by due time: the claim takes the due ones, the dispatcher sleeps until the
-- earliest. Kept apart from the due index, so a million future events never lengthen a claim.
CREATE INDEX IF NOT EXISTS {p}events_scheduled ON {p}events(wait_at) WHERE wait_lane = 1;
-- Pending events with a priority other than 0, highest first.
CREATE INDEX IF NOT EXISTS {p}events_priority ON {p}events(priority DESC, wait_at)
    WHERE wait_lane = 2;
-- Cancels: the subscriptions an event is cancelled for (a JSON list of keys, NULL for none),
-- and whether a cancel asked that no retry follow the attempt running when it came.
ALTER TABLE {p}events ADD COLUMN cancelled TEXT;
ALTER TABLE {p}events ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;
-- Every cancel on record: who, why, when, what it did.
CREATE TABLE IF NOT EXISTS {p}cancellations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL,
    subscription TEXT,
    outcome TEXT NOT NULL,
    actor TEXT NOT NULL,
    actor_kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    cancelled_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {p}cancellations_event ON {p}cancellations(event_id, seq);

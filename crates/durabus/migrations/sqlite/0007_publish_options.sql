-- Publish options: a priority (higher first among due events) and the time a scheduled event
-- was published for. A scheduled event has status 'scheduled' and its due time in
-- next_attempt_at until a claim takes it.
ALTER TABLE {p}events ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {p}events ADD COLUMN deliver_at INTEGER;
-- Events waiting in a lane of their own: 1 = scheduled (until due), 2 = pending with a
-- priority other than 0, with the priority and the due time. A side table rather than
-- indexes on the events table: SQLite writes every index of a table on every insert, and
-- every index whose columns or condition an update touches, so indexes there would cost every
-- publish, claim and completion of every ordinary event. Ordinary events never enter it.
CREATE TABLE IF NOT EXISTS {p}waiting (
    event_id TEXT PRIMARY KEY NOT NULL,
    lane INTEGER NOT NULL,
    priority INTEGER NOT NULL,
    due INTEGER NOT NULL
) WITHOUT ROWID;
-- Scheduled events by due time: the claim takes the due ones, the dispatcher sleeps until the
-- earliest; a million future events never lengthen a claim of the due ones.
CREATE INDEX IF NOT EXISTS {p}waiting_scheduled ON {p}waiting(due) WHERE lane = 1;
-- Pending events with a priority, highest first.
CREATE INDEX IF NOT EXISTS {p}waiting_priority ON {p}waiting(priority DESC, due) WHERE lane = 2;
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
-- Snoozes: how often each subscription's handler has snoozed each event (its cap is
-- SubscribeOptions::max_snoozes). Written only when a handler snoozes.
CREATE TABLE IF NOT EXISTS {p}snoozes (
    event_id TEXT NOT NULL,
    subscription TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (event_id, subscription)
) WITHOUT ROWID;

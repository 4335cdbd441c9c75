-- Concurrency limits per subscription (see the crate's `concurrency` module): the limits, the
-- slots runs hold (with a lease), and the line of events waiting for a slot.
CREATE TABLE IF NOT EXISTS {p}concurrency_limits (
    subscription TEXT PRIMARY KEY NOT NULL,
    max_in_flight INTEGER NOT NULL,
    per_process INTEGER,
    set_by TEXT NOT NULL,
    set_by_kind TEXT NOT NULL,
    set_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}slots (
    subscription TEXT NOT NULL,
    event_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (subscription, event_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}slot_waiters (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    subscription TEXT NOT NULL,
    event_id TEXT NOT NULL,
    UNIQUE (subscription, event_id)
);
CREATE INDEX IF NOT EXISTS {p}slot_waiters_line ON {p}slot_waiters(subscription, seq);

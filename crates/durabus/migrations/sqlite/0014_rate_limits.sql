-- Rate limits per subscription (see the crate's `rate` module): each limit with the time of
-- its next free slot (µs), and the slots reserved for events put off until then.
CREATE TABLE IF NOT EXISTS {p}rate_limits (
    subscription TEXT PRIMARY KEY NOT NULL,
    per INTEGER NOT NULL,
    interval_ms INTEGER NOT NULL,
    next_slot_us INTEGER NOT NULL,
    set_by TEXT NOT NULL,
    set_by_kind TEXT NOT NULL,
    set_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}rate_reservations (
    event_id TEXT NOT NULL,
    subscription TEXT NOT NULL,
    slot_us INTEGER NOT NULL,
    PRIMARY KEY (event_id, subscription)
) WITHOUT ROWID;

-- Pauses (see the crate's `pause` module): every pause on record, in force while `ended_at` is
-- NULL (and `until_at`, if set, is ahead). Ids are never reused (AUTOINCREMENT): the events a pause
-- parks are due at a mark made of its id.
CREATE TABLE IF NOT EXISTS {p}pauses (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    target TEXT NOT NULL,
    reason TEXT NOT NULL,
    actor TEXT NOT NULL,
    actor_kind TEXT NOT NULL,
    paused_at INTEGER NOT NULL,
    until_at INTEGER,
    ended_at INTEGER,
    end_kind TEXT,
    ended_by TEXT,
    ended_by_kind TEXT,
    end_reason TEXT
);
-- What every process reads each refresh: the active pauses and those that ended lately.
CREATE INDEX IF NOT EXISTS {p}pauses_active ON {p}pauses(id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS {p}pauses_ended ON {p}pauses(ended_at) WHERE ended_at IS NOT NULL;

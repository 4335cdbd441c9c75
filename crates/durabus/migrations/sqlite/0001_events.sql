-- 1: events and subscriptions. `{p}` is the table prefix.
CREATE TABLE IF NOT EXISTS {p}events (
    id TEXT PRIMARY KEY NOT NULL,
    -- Events may also be written by applications through their own connections (the
    -- outbox): the table itself refuses an empty type or a payload that is not JSON.
    type TEXT NOT NULL CHECK (type <> ''),
    payload TEXT NOT NULL CHECK (json_valid(payload)),
    status TEXT NOT NULL DEFAULT 'pending',
    retry_count INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    metadata TEXT,
    delivered TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    next_attempt_at INTEGER,
    dlq_at INTEGER
);
-- As few indexes as the queries need: every index is another page written per commit.
-- Serves the claim (due pending events, earliest first) and nothing else.
CREATE INDEX IF NOT EXISTS {p}events_due ON {p}events(next_attempt_at) WHERE status = 'pending';
-- Serves the dead-letter listing, newest first.
CREATE INDEX IF NOT EXISTS {p}events_dlq ON {p}events(created_at, id) WHERE status = 'dlq';
-- Serves crash recovery and releases.
CREATE INDEX IF NOT EXISTS {p}events_processing ON {p}events(id) WHERE status = 'processing';
CREATE TABLE IF NOT EXISTS {p}subscriptions (
    id TEXT PRIMARY KEY NOT NULL,
    name TEXT UNIQUE,
    event_type TEXT NOT NULL,
    created_at INTEGER NOT NULL
);

-- 2: dead-letter records, failure groups, durable operations, scheduled jobs. `{p}` is the
-- table prefix. Dead events of earlier versions get records when this runs (in Rust, right
-- after this file: their fingerprints need the normaliser).

-- How many times an event has become a dead letter: a revived dead letter that is delivered
-- resolves its record; one that dies again adds a round to it.
ALTER TABLE {p}events ADD COLUMN dlq_count INTEGER NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS {p}dead_letters (
    -- Position in the queue; AUTOINCREMENT never reuses a number after a purge, so cursors and
    -- the upper bounds of bulk operations stay valid.
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id TEXT NOT NULL UNIQUE,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    subscription TEXT,
    last_error TEXT NOT NULL,
    causes TEXT,
    error_history TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    status TEXT NOT NULL,
    auto_retry_count INTEGER NOT NULL DEFAULT 0,
    manual_retry_count INTEGER NOT NULL DEFAULT 0,
    next_auto_retry_at INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    last_retry_at INTEGER,
    last_retry_by TEXT,
    resolved_at INTEGER,
    resolved_by TEXT,
    resolution_note TEXT,
    rounds INTEGER NOT NULL DEFAULT 1
);
-- Listings newest first by status, by type (and status), by group (and status).
CREATE INDEX IF NOT EXISTS {p}dead_letters_status ON {p}dead_letters(status, seq);
CREATE INDEX IF NOT EXISTS {p}dead_letters_type ON {p}dead_letters(event_type, status, seq);
CREATE INDEX IF NOT EXISTS {p}dead_letters_group ON {p}dead_letters(fingerprint, seq);
-- The auto-retry job: pending records whose next retry is due.
CREATE INDEX IF NOT EXISTS {p}dead_letters_auto ON {p}dead_letters(next_auto_retry_at)
    WHERE status = 'pending' AND next_auto_retry_at IS NOT NULL;
-- Retention: closed records by their last change.
CREATE INDEX IF NOT EXISTS {p}dead_letters_closed ON {p}dead_letters(updated_at)
    WHERE status IN ('resolved', 'abandoned');

-- Failure groups, counted as records change (never by scanning the records).
CREATE TABLE IF NOT EXISTS {p}dead_letter_groups (
    fingerprint TEXT PRIMARY KEY NOT NULL,
    subscription TEXT,
    signature TEXT NOT NULL,
    sample_error TEXT NOT NULL,
    count INTEGER NOT NULL,
    open INTEGER NOT NULL,
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    event_types TEXT NOT NULL
);

-- Work on many rows (bulk dead-letter actions, replays): a frozen selection, progress that
-- survives a restart, cancel between chunks.
CREATE TABLE IF NOT EXISTS {p}operations (
    id TEXT PRIMARY KEY NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    params TEXT NOT NULL,
    bound INTEGER NOT NULL,
    cursor INTEGER NOT NULL DEFAULT 0,
    total INTEGER NOT NULL,
    processed INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    actor TEXT NOT NULL,
    actor_kind TEXT NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    holder TEXT,
    lease_expires_at INTEGER,
    created_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    updated_at INTEGER NOT NULL,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS {p}operations_created ON {p}operations(created_at);
CREATE INDEX IF NOT EXISTS {p}operations_open ON {p}operations(status)
    WHERE status IN ('pending', 'running');

-- Scheduled jobs: the last tick run (each tick once, across processes), who runs one now.
CREATE TABLE IF NOT EXISTS {p}jobs (
    name TEXT PRIMARY KEY NOT NULL,
    last_tick INTEGER,
    holder TEXT,
    lock_expires_at INTEGER,
    last_started_at INTEGER,
    last_finished_at INTEGER,
    last_status TEXT,
    last_message TEXT,
    runs INTEGER NOT NULL DEFAULT 0,
    skipped INTEGER NOT NULL DEFAULT 0
);

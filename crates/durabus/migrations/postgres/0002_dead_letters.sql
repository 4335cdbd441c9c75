-- 2: dead-letter records, failure groups, durable operations, scheduled jobs. `{s}` is the
-- quoted schema name. Dead events of earlier versions get records when this runs (in Rust,
-- right after this file: their fingerprints need the normaliser).

-- How many times an event has become a dead letter: a revived dead letter that is delivered
-- resolves its record; one that dies again adds a round to it.
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS dlq_count integer NOT NULL DEFAULT 0;
ALTER TABLE {s}.event_log ADD COLUMN IF NOT EXISTS dlq_count integer NOT NULL DEFAULT 0;

CREATE TABLE IF NOT EXISTS {s}.dead_letters (
    seq bigserial PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    event_type text NOT NULL,
    payload json NOT NULL,
    subscription text,
    last_error text NOT NULL,
    causes text,
    error_history text NOT NULL,
    fingerprint text NOT NULL,
    attempts integer NOT NULL,
    status text NOT NULL,
    auto_retry_count integer NOT NULL DEFAULT 0,
    manual_retry_count integer NOT NULL DEFAULT 0,
    next_auto_retry_at bigint,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    last_retry_at bigint,
    last_retry_by text,
    resolved_at bigint,
    resolved_by text,
    resolution_note text,
    rounds integer NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS dead_letters_status ON {s}.dead_letters (status, seq);
CREATE INDEX IF NOT EXISTS dead_letters_type ON {s}.dead_letters (event_type, status, seq);
CREATE INDEX IF NOT EXISTS dead_letters_group ON {s}.dead_letters (fingerprint, seq);
CREATE INDEX IF NOT EXISTS dead_letters_auto ON {s}.dead_letters (next_auto_retry_at)
    WHERE status = 'pending' AND next_auto_retry_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS dead_letters_closed ON {s}.dead_letters (updated_at)
    WHERE status IN ('resolved', 'abandoned');

CREATE TABLE IF NOT EXISTS {s}.dead_letter_groups (
    fingerprint text PRIMARY KEY,
    subscription text,
    signature text NOT NULL,
    sample_error text NOT NULL,
    count bigint NOT NULL,
    open bigint NOT NULL,
    first_seen bigint NOT NULL,
    last_seen bigint NOT NULL,
    event_types text NOT NULL
);

CREATE TABLE IF NOT EXISTS {s}.operations (
    id uuid PRIMARY KEY,
    kind text NOT NULL,
    status text NOT NULL,
    params text NOT NULL,
    bound bigint NOT NULL,
    cursor bigint NOT NULL DEFAULT 0,
    total bigint NOT NULL,
    processed bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0,
    errors bigint NOT NULL DEFAULT 0,
    actor text NOT NULL,
    actor_kind text NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    holder text,
    lease_expires_at bigint,
    created_at bigint NOT NULL,
    started_at bigint,
    finished_at bigint,
    updated_at bigint NOT NULL,
    last_error text
);
CREATE INDEX IF NOT EXISTS operations_created ON {s}.operations (created_at);
CREATE INDEX IF NOT EXISTS operations_open ON {s}.operations (status)
    WHERE status IN ('pending', 'running');

CREATE TABLE IF NOT EXISTS {s}.jobs (
    name text PRIMARY KEY,
    last_tick bigint,
    holder text,
    lock_expires_at bigint,
    last_started_at bigint,
    last_finished_at bigint,
    last_status text,
    last_message text,
    runs bigint NOT NULL DEFAULT 0,
    skipped bigint NOT NULL DEFAULT 0
);

-- 1: live events, the event log, subscriptions. `{s}` is the quoted schema name.
CREATE TABLE IF NOT EXISTS {s}.events (
    id uuid PRIMARY KEY,
    type text NOT NULL CHECK (type <> ''),
    payload json NOT NULL,
    status text NOT NULL,
    retry_count integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,
    last_error text,
    metadata text,
    delivered text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    next_attempt_at bigint,
    dlq_at bigint,
    lease_owner text,
    lease_token uuid,
    lease_expires_at bigint,
    processing_started_at bigint
);
-- Due events: the claim walks this small partial index, never past claimed or finished rows.
CREATE INDEX IF NOT EXISTS events_due ON {s}.events (next_attempt_at) WHERE status = 'pending';
-- Held events by lease expiry: rescue of a dead worker's events, and heartbeats.
CREATE INDEX IF NOT EXISTS events_lease ON {s}.events (lease_expires_at) WHERE status = 'processing';
CREATE INDEX IF NOT EXISTS events_dlq ON {s}.events (created_at, id) WHERE status = 'dlq';
CREATE INDEX IF NOT EXISTS events_created ON {s}.events (created_at, id);
-- Completed events move here with their terminal status (the event log), so the live table
-- holds only work in progress and dead letters.
CREATE TABLE IF NOT EXISTS {s}.event_log (
    id uuid PRIMARY KEY,
    type text NOT NULL,
    payload json NOT NULL,
    status text NOT NULL,
    retry_count integer NOT NULL,
    attempts integer NOT NULL,
    last_error text,
    metadata text,
    delivered text,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS event_log_created ON {s}.event_log (created_at, id);
CREATE INDEX IF NOT EXISTS event_log_updated ON {s}.event_log (updated_at);
-- Every id stored, live or in the log: publishing is idempotent even while an event moves
-- from the live table to the log. Purges remove ids with their events.
CREATE TABLE IF NOT EXISTS {s}.event_ids (id uuid PRIMARY KEY);
CREATE TABLE IF NOT EXISTS {s}.subscriptions (
    id text PRIMARY KEY,
    name text UNIQUE,
    event_type text NOT NULL,
    created_at bigint NOT NULL
);

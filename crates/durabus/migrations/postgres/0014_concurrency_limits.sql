-- Concurrency limits per subscription (see the crate's `concurrency` module): the limits, the
-- slots runs hold (with a lease), and the line of events waiting for a slot.
CREATE TABLE IF NOT EXISTS {s}.concurrency_limits (
    subscription text PRIMARY KEY,
    max_in_flight integer NOT NULL,
    per_process integer,
    set_by text NOT NULL,
    set_by_kind text NOT NULL,
    set_at bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.slots (
    subscription text NOT NULL,
    event_id uuid NOT NULL,
    holder text NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (subscription, event_id)
);
CREATE TABLE IF NOT EXISTS {s}.slot_waiters (
    seq bigserial PRIMARY KEY,
    subscription text NOT NULL,
    event_id uuid NOT NULL,
    UNIQUE (subscription, event_id)
);
CREATE INDEX IF NOT EXISTS slot_waiters_line ON {s}.slot_waiters (subscription, seq);

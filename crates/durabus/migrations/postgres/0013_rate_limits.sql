-- Rate limits per subscription (see the crate's `rate` module): each limit with the time of
-- its next free slot (µs), and the slots reserved for events put off until then.
CREATE TABLE IF NOT EXISTS {s}.rate_limits (
    subscription text PRIMARY KEY,
    per integer NOT NULL,
    interval_ms bigint NOT NULL,
    next_slot_us bigint NOT NULL,
    set_by text NOT NULL,
    set_by_kind text NOT NULL,
    set_at bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.rate_reservations (
    event_id uuid NOT NULL,
    subscription text NOT NULL,
    slot_us bigint NOT NULL,
    PRIMARY KEY (event_id, subscription)
);

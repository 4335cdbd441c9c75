-- Periodic events: what each definition publishes, on which cron expression in which time
-- zone, whether it is paused, and where it is in its schedule (`cursor`: ticks at or before it
-- are published or skipped). Each tick's event has an id made from the name and the tick, so
-- it is stored once however many processes publish it.
CREATE TABLE IF NOT EXISTS {s}.periodic (
    name text PRIMARY KEY,
    schedule text NOT NULL,
    timezone text NOT NULL,
    event_type text NOT NULL,
    payload text NOT NULL,
    priority smallint NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    cursor bigint NOT NULL,
    last_tick bigint,
    last_event_id uuid,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

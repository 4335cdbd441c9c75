-- Periodic events: what each definition publishes, on which cron expression in which time
-- zone, whether it is paused, and where it is in its schedule (`cursor`: ticks at or before it
-- are published or skipped). Each tick's event has an id made from the name and the tick, so
-- it is stored once however many processes publish it.
CREATE TABLE IF NOT EXISTS {p}periodic (
    name TEXT PRIMARY KEY NOT NULL,
    schedule TEXT NOT NULL,
    timezone TEXT NOT NULL,
    event_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    cursor INTEGER NOT NULL,
    last_tick INTEGER,
    last_event_id TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

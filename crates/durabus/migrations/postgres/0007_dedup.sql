-- Dedup windows: the event that holds each dedup key and when its window closes. A publish
-- with a key held by an open window stores nothing and answers the holder's id; a publish
-- after the window takes the key over (one upsert, so racing publishes store one event). The
-- history purge drops closed windows.
CREATE TABLE IF NOT EXISTS {s}.dedup (
    key text PRIMARY KEY,
    event_id uuid NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS dedup_expires ON {s}.dedup (expires_at);

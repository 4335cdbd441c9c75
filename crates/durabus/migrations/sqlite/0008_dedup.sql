-- Dedup windows: the event that holds each dedup key and when its window closes. A publish
-- with a key held by an open window stores nothing and answers the holder's id; a publish
-- after the window takes the key over. The history purge drops closed windows.
CREATE TABLE IF NOT EXISTS {p}dedup (
    key TEXT PRIMARY KEY NOT NULL,
    event_id TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {p}dedup_expires ON {p}dedup(expires_at);

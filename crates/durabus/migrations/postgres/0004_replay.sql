-- 4: replay. A replay walks events by creation time, then id: the id of its position goes in
-- `cursor_key`. An operation keeps a summary of what it did beyond its counts (a replay: events
-- per type, the first handler failures). `{s}` is the schema.
ALTER TABLE {s}.operations ADD COLUMN IF NOT EXISTS cursor_key text NOT NULL DEFAULT '';
ALTER TABLE {s}.operations ADD COLUMN IF NOT EXISTS summary text;

-- 4: replay. An operation's position may need more than a number (the rest of it goes in
-- `cursor_key`), and an operation keeps a summary of what it did beyond its counts (a replay:
-- events per type, the first handler failures). `{p}` is the table prefix.
ALTER TABLE {p}operations ADD COLUMN cursor_key TEXT NOT NULL DEFAULT '';
ALTER TABLE {p}operations ADD COLUMN summary TEXT;

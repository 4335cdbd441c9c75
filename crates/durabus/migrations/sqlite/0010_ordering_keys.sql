-- Ordering keys: events of one key are handled one at a time, in publish order. The events
-- table keeps each event's key; `keyed` lists the unfinished events of every key in publish
-- order (`seq`). The first of a key (its head) is delivered like any event; the others wait
-- with no due time (`next_attempt_at` NULL, in no lane) until the head finishes and the next
-- one becomes due. `held_since`: the head died holding its key (hold_key_on_dead_letter).
ALTER TABLE {p}events ADD COLUMN ordering_key TEXT;
CREATE TABLE IF NOT EXISTS {p}keyed (
    seq INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    event_id TEXT NOT NULL UNIQUE,
    held_since INTEGER
);
CREATE INDEX IF NOT EXISTS {p}keyed_key ON {p}keyed(key, seq);
CREATE INDEX IF NOT EXISTS {p}keyed_held ON {p}keyed(held_since) WHERE held_since IS NOT NULL;
-- A dead letter's ordering key and how many later events of the key were waiting when it died.
ALTER TABLE {p}dead_letters ADD COLUMN ordering_key TEXT;
ALTER TABLE {p}dead_letters ADD COLUMN key_waiting INTEGER;

-- Ordering keys without a table of their own: an event's place in its key's queue is a column
-- of its own row (`key_seq`, ascending in the order the events joined the key; NULL once it
-- left), read through a partial index, so joining a key costs an index entry of the event's
-- insert and leaving it a column of the update that records the outcome, not a row of another
-- table written and deleted. `key_held_since`: the head died holding its key
-- (hold_key_on_dead_letter). The rows of `keyed` move over as they are.
ALTER TABLE {p}events ADD COLUMN key_seq INTEGER;
ALTER TABLE {p}events ADD COLUMN key_held_since INTEGER;
UPDATE {p}events
    SET key_seq = (SELECT k.seq FROM {p}keyed AS k WHERE k.event_id = {p}events.id),
        key_held_since = (SELECT k.held_since FROM {p}keyed AS k WHERE k.event_id = {p}events.id)
    WHERE id IN (SELECT event_id FROM {p}keyed);
DROP TABLE IF EXISTS {p}keyed;
CREATE INDEX IF NOT EXISTS {p}events_key ON {p}events(ordering_key, key_seq)
    WHERE key_seq IS NOT NULL;
CREATE INDEX IF NOT EXISTS {p}events_key_held ON {p}events(key_held_since)
    WHERE key_held_since IS NOT NULL;

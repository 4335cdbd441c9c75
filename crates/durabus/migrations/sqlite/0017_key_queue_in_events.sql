-- Ordering keys without a table of their own: an event's place in its key's queue is a column
-- of its own row (`key_seq`, ascending in the order the events joined the key; NULL once it
-- left), read through a partial index, so joining a key costs an index entry of the event's
-- insert and leaving it a column of the update that records the outcome, not a row of another
-- table written and deleted. The heads that died holding their key (hold_key_on_dead_letter),
-- rare, are rows of `key_holds`, which the hot path never touches. The rows of `keyed` move
-- over as they are.
ALTER TABLE {p}events ADD COLUMN key_seq INTEGER;
UPDATE {p}events
    SET key_seq = (SELECT k.seq FROM {p}keyed AS k WHERE k.event_id = {p}events.id)
    WHERE id IN (SELECT event_id FROM {p}keyed);
CREATE TABLE IF NOT EXISTS {p}key_holds (
    event_id TEXT PRIMARY KEY NOT NULL,
    held_since INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS {p}key_holds_since ON {p}key_holds(held_since);
INSERT INTO {p}key_holds (event_id, held_since)
    SELECT event_id, held_since FROM {p}keyed
    WHERE held_since IS NOT NULL AND event_id IN (SELECT id FROM {p}events);
DROP TABLE IF EXISTS {p}keyed;
CREATE INDEX IF NOT EXISTS {p}events_key ON {p}events(ordering_key, key_seq)
    WHERE key_seq IS NOT NULL;

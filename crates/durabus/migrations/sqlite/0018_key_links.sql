-- Ordering keys as linked queues: an event in its key's queue points at the event ahead of it
-- (`key_prev`, its id; NULL for the head), and each key's last event is a row of `key_tails`.
-- The index on `(ordering_key, key_seq)` it replaces kept every key's waiting events together,
-- so a commit that moved a thousand keys on, or a batch that queued an event behind each of a
-- thousand keys, rewrote a page of the index per key; `key_prev` holds ids, which grow with
-- publish time, so the index over it is written near its two ends. `key_seq` stays: not NULL
-- while an event is in its key's queue.
ALTER TABLE {p}events ADD COLUMN key_prev TEXT;
CREATE TABLE IF NOT EXISTS {p}key_tails (
    ordering_key TEXT PRIMARY KEY NOT NULL,
    tail TEXT NOT NULL
) WITHOUT ROWID;
-- Each queued event's predecessor, in the order of the old index (it serves the lookup).
UPDATE {p}events
    SET key_prev = (
        SELECT p.id FROM {p}events AS p
        WHERE p.ordering_key = {p}events.ordering_key AND p.key_seq IS NOT NULL
            AND p.key_seq < {p}events.key_seq
        ORDER BY p.key_seq DESC LIMIT 1)
    WHERE key_seq IS NOT NULL;
INSERT OR REPLACE INTO {p}key_tails (ordering_key, tail)
    SELECT ordering_key, id FROM (
        SELECT ordering_key, id,
            row_number() OVER (PARTITION BY ordering_key ORDER BY key_seq DESC) AS n
        FROM {p}events WHERE key_seq IS NOT NULL)
    WHERE n = 1;
DROP INDEX IF EXISTS {p}events_key;
CREATE INDEX IF NOT EXISTS {p}events_key_next ON {p}events(key_prev) WHERE key_prev IS NOT NULL;

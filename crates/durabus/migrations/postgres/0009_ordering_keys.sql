-- Ordering keys: events of one key are handled one at a time, in publish order. The events
-- table (and the event log) keep each event's key; `keyed` lists the unfinished events of every
-- key in publish order (`seq`). The first of a key (its head) is delivered like any event; the
-- others wait with no due time (`next_attempt_at` NULL) until the head finishes and the next
-- one becomes due. Every change to a key's queue holds a transaction-scoped advisory lock on
-- the key, so an insert and a head finishing in another process never miss each other.
-- `held_since`: the head died holding its key (hold_key_on_dead_letter).
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE {s}.event_log ADD COLUMN IF NOT EXISTS ordering_key text;
CREATE TABLE IF NOT EXISTS {s}.keyed (
    seq bigserial PRIMARY KEY,
    key text NOT NULL,
    event_id uuid NOT NULL UNIQUE,
    held_since bigint
);
CREATE INDEX IF NOT EXISTS keyed_key ON {s}.keyed (key, seq);
CREATE INDEX IF NOT EXISTS keyed_held ON {s}.keyed (held_since) WHERE held_since IS NOT NULL;
-- A dead letter's ordering key and how many later events of the key were waiting when it died.
ALTER TABLE {s}.dead_letters ADD COLUMN IF NOT EXISTS ordering_key text;
ALTER TABLE {s}.dead_letters ADD COLUMN IF NOT EXISTS key_waiting bigint;

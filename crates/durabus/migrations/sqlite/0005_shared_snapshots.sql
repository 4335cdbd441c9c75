-- 5: a `published` snapshot of a payload as it was published (not redacted before storing) is
-- the event's own stored payload: the event row says it has one, and no second copy is
-- written with each publish. The snapshot gets a compressed row of its own in
-- `{p}event_payloads` when the event's row is deleted (history purge, dead-letter purge), and
-- the mark is cleared when the snapshot expires or is soft-deleted. `{p}` is the table prefix.
ALTER TABLE {p}events ADD COLUMN published_snapshot INTEGER;

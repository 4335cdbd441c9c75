-- Concurrency limits per partition (see the crate's `concurrency` module): what splits a
-- subscription's events (`ordering_key` or `metadata.<field>`) and the runs of one partition
-- at once; the partition of each slot and of each event waiting in line ('' without one).
ALTER TABLE {s}.concurrency_limits ADD COLUMN IF NOT EXISTS partition_by text;
ALTER TABLE {s}.concurrency_limits ADD COLUMN IF NOT EXISTS per_partition integer;
ALTER TABLE {s}.slots ADD COLUMN IF NOT EXISTS part text NOT NULL DEFAULT '';
ALTER TABLE {s}.slot_waiters ADD COLUMN IF NOT EXISTS part text NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS slots_part ON {s}.slots (subscription, part);
CREATE INDEX IF NOT EXISTS slot_waiters_part ON {s}.slot_waiters (subscription, part, seq);
-- Under a limit with partitions, a woken event keeps its place in line until it takes a slot.
ALTER TABLE {s}.slot_waiters ADD COLUMN IF NOT EXISTS woken boolean NOT NULL DEFAULT false;
-- An event just parked finds its entries (see `concurrency_parked`).
CREATE INDEX IF NOT EXISTS slot_waiters_event ON {s}.slot_waiters (event_id);

-- Concurrency limits per partition (see the crate's `concurrency` module): what splits a
-- subscription's events (`ordering_key` or `metadata.<field>`) and the runs of one partition
-- at once; the partition of each slot and of each event waiting in line ('' without one).
ALTER TABLE {p}concurrency_limits ADD COLUMN partition_by TEXT;
ALTER TABLE {p}concurrency_limits ADD COLUMN per_partition INTEGER;
ALTER TABLE {p}slots ADD COLUMN part TEXT NOT NULL DEFAULT '';
ALTER TABLE {p}slot_waiters ADD COLUMN part TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS {p}slots_part ON {p}slots(subscription, part);
CREATE INDEX IF NOT EXISTS {p}slot_waiters_part ON {p}slot_waiters(subscription, part, seq);
-- Under a limit with partitions, a woken event keeps its place in line until it takes a slot.
ALTER TABLE {p}slot_waiters ADD COLUMN woken INTEGER NOT NULL DEFAULT 0;
-- An event just parked finds its entries (see `concurrency_parked`).
CREATE INDEX IF NOT EXISTS {p}slot_waiters_event ON {p}slot_waiters(event_id);

-- The flag that says an event is in its key's queue takes a name of its own (`key_queued`,
-- not NULL while it is): since migration 18 it is no position any more, and a process of a
-- version before 18 still running on this file while another one upgraded it would keep
-- writing `key_seq` as a position, beside no link and no tail, leaving events that nothing
-- ever wakes. Under the new name such a process's statements that name the column (every
-- publish, every keyed completion) fail with "no such column" instead (upgrade every process
-- writing to the file together).
ALTER TABLE {p}events RENAME COLUMN key_seq TO key_queued;

-- Pauses (see the crate's `pause` module): every pause on record, in force while `ended_at` is
-- NULL (and `until_at`, if set, is ahead). Ids are never reused (a sequence): the events a pause
-- parks are due at a mark made of its id.
CREATE TABLE IF NOT EXISTS {s}.pauses (
    id bigserial PRIMARY KEY,
    scope text NOT NULL,
    target text NOT NULL,
    reason text NOT NULL,
    actor text NOT NULL,
    actor_kind text NOT NULL,
    paused_at bigint NOT NULL,
    until_at bigint,
    ended_at bigint,
    end_kind text,
    ended_by text,
    ended_by_kind text,
    end_reason text
);
-- What every process reads each refresh: the active pauses and those that ended lately.
CREATE INDEX IF NOT EXISTS pauses_active ON {s}.pauses (id) WHERE ended_at IS NULL;
CREATE INDEX IF NOT EXISTS pauses_ended ON {s}.pauses (ended_at) WHERE ended_at IS NOT NULL;

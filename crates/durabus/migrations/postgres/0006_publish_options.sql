-- Publish options: a priority (higher first among due events) and the time a scheduled event
-- was published for. A scheduled event has status 'scheduled' and its due time in
-- next_attempt_at until a claim takes it. The event log keeps both for the record.
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS deliver_at bigint;
ALTER TABLE {s}.event_log ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
ALTER TABLE {s}.event_log ADD COLUMN IF NOT EXISTS deliver_at bigint;
-- Scheduled events by due time: the claim takes the due ones, the dispatcher sleeps until the
-- earliest. Kept apart from the due index, so a million future events never lengthen a claim.
CREATE INDEX IF NOT EXISTS events_scheduled ON {s}.events (next_attempt_at) WHERE status = 'scheduled';
-- Pending events with a priority other than 0, highest first: events without one (the usual
-- case) never touch it.
CREATE INDEX IF NOT EXISTS events_priority ON {s}.events (priority DESC, next_attempt_at)
    WHERE status = 'pending' AND priority <> 0;
-- Cancels: the subscriptions an event is cancelled for (a JSON list of keys, NULL for none),
-- and whether a cancel asked that no retry follow the attempt running when it came.
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS cancelled text;
ALTER TABLE {s}.events ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;
ALTER TABLE {s}.event_log ADD COLUMN IF NOT EXISTS cancelled text;
-- Every cancel on record: who, why, when, what it did.
CREATE TABLE IF NOT EXISTS {s}.cancellations (
    seq bigserial PRIMARY KEY,
    event_id uuid NOT NULL,
    subscription text,
    outcome text NOT NULL,
    actor text NOT NULL,
    actor_kind text NOT NULL,
    reason text NOT NULL,
    cancelled_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS cancellations_event ON {s}.cancellations (event_id, seq);
-- Snoozes: how often each subscription's handler has snoozed each event (its cap is
-- SubscribeOptions::max_snoozes). Written only when a handler snoozes.
CREATE TABLE IF NOT EXISTS {s}.snoozes (
    event_id uuid NOT NULL,
    subscription text NOT NULL,
    count integer NOT NULL,
    PRIMARY KEY (event_id, subscription)
);

-- Breakers across processes (see the crate's `breaker::report` module): each process's
-- report of each subscription's breaker, and the rows of shared breakers while they are open.
CREATE TABLE IF NOT EXISTS {s}.breaker_reports (
    subscription text NOT NULL,
    process text NOT NULL,
    state text NOT NULL,
    failure_rate double precision NOT NULL,
    samples integer NOT NULL,
    opened_at bigint,
    reported_at bigint NOT NULL,
    PRIMARY KEY (subscription, process)
);
CREATE TABLE IF NOT EXISTS {s}.shared_breakers (
    subscription text PRIMARY KEY,
    opened_at bigint NOT NULL,
    opened_by text NOT NULL,
    probe_holder text,
    probe_until bigint
);

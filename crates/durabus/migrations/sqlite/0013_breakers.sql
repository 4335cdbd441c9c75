-- Breakers across processes (see the crate's `breaker::report` module): each process's
-- report of each subscription's breaker, and the rows of shared breakers while they are open.
CREATE TABLE IF NOT EXISTS {p}breaker_reports (
    subscription TEXT NOT NULL,
    process TEXT NOT NULL,
    state TEXT NOT NULL,
    failure_rate REAL NOT NULL,
    samples INTEGER NOT NULL,
    opened_at INTEGER,
    reported_at INTEGER NOT NULL,
    PRIMARY KEY (subscription, process)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS {p}shared_breakers (
    subscription TEXT PRIMARY KEY NOT NULL,
    opened_at INTEGER NOT NULL,
    opened_by TEXT NOT NULL,
    probe_holder TEXT,
    probe_until INTEGER
) WITHOUT ROWID;

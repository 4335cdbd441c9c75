-- 3: the payload store: compressed snapshots of payloads per stage, and their configuration
-- per event type. `{p}` is the table prefix.

-- One B-tree (WITHOUT ROWID, keyed by event): a snapshot written with each publish costs one
-- append, not a row and an index. `payload` is NULL once soft-deleted (the row stays, with who
-- deleted it, when and why).
CREATE TABLE IF NOT EXISTS {p}event_payloads (
    event_id TEXT NOT NULL,
    stage TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    payload BLOB,
    size_original INTEGER NOT NULL,
    size_compressed INTEGER NOT NULL,
    contains_media INTEGER NOT NULL,
    contains_base64 INTEGER NOT NULL,
    deleted_at INTEGER,
    deleted_by TEXT,
    delete_reason TEXT,
    PRIMARY KEY (event_id, stage, created_at)
) WITHOUT ROWID;
-- Soft-deleted rows, for the retention of their audit records.
CREATE INDEX IF NOT EXISTS {p}event_payloads_deleted ON {p}event_payloads(deleted_at)
    WHERE deleted_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS {p}payload_config (
    event_type TEXT PRIMARY KEY NOT NULL CHECK (event_type <> ''),
    stages TEXT NOT NULL,
    retention_days INTEGER NOT NULL CHECK (retention_days >= 0),
    redact TEXT NOT NULL,
    redact_before_store INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    updated_by TEXT NOT NULL
);

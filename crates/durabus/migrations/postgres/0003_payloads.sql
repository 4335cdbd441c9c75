-- 3: the payload store: compressed snapshots of payloads per stage, and their configuration
-- per event type. `{s}` is the quoted schema name. `payload` is NULL once soft-deleted (the row
-- stays, with who deleted it, when and why).
CREATE TABLE IF NOT EXISTS {s}.event_payloads (
    event_id uuid NOT NULL,
    stage text NOT NULL,
    created_at bigint NOT NULL,
    event_type text NOT NULL,
    payload bytea,
    size_original bigint NOT NULL,
    size_compressed bigint NOT NULL,
    contains_media boolean NOT NULL,
    contains_base64 boolean NOT NULL,
    deleted_at bigint,
    deleted_by text,
    delete_reason text,
    PRIMARY KEY (event_id, stage, created_at)
);
CREATE INDEX IF NOT EXISTS event_payloads_deleted ON {s}.event_payloads (deleted_at)
    WHERE deleted_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS {s}.payload_config (
    event_type text PRIMARY KEY CHECK (event_type <> ''),
    stages text NOT NULL,
    retention_days bigint NOT NULL CHECK (retention_days >= 0),
    redact text NOT NULL,
    redact_before_store boolean NOT NULL,
    updated_at bigint NOT NULL,
    updated_by text NOT NULL
);

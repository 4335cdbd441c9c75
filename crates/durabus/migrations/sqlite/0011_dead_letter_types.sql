-- Dead-letter records by event type and status, kept by triggers as records arrive, change
-- status and are purged: the metrics read this small table at each refresh instead of counting
-- the records (most of which, resolved or abandoned, are history).
CREATE TABLE IF NOT EXISTS {p}dead_letter_types (
    event_type TEXT NOT NULL,
    status TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (event_type, status)
) WITHOUT ROWID;
INSERT OR REPLACE INTO {p}dead_letter_types (event_type, status, count)
    SELECT event_type, status, count(*) FROM {p}dead_letters GROUP BY event_type, status;
CREATE TRIGGER IF NOT EXISTS {p}dead_letter_types_insert AFTER INSERT ON {p}dead_letters
BEGIN
    INSERT INTO {p}dead_letter_types (event_type, status, count)
        VALUES (NEW.event_type, NEW.status, 1)
        ON CONFLICT (event_type, status) DO UPDATE SET count = count + 1;
END;
CREATE TRIGGER IF NOT EXISTS {p}dead_letter_types_update AFTER UPDATE OF status ON {p}dead_letters
    WHEN OLD.status <> NEW.status
BEGIN
    UPDATE {p}dead_letter_types SET count = count - 1
        WHERE event_type = OLD.event_type AND status = OLD.status;
    INSERT INTO {p}dead_letter_types (event_type, status, count)
        VALUES (NEW.event_type, NEW.status, 1)
        ON CONFLICT (event_type, status) DO UPDATE SET count = count + 1;
END;
CREATE TRIGGER IF NOT EXISTS {p}dead_letter_types_delete AFTER DELETE ON {p}dead_letters
BEGIN
    UPDATE {p}dead_letter_types SET count = count - 1
        WHERE event_type = OLD.event_type AND status = OLD.status;
END;

-- Dead-letter records by event type and status, kept by statement-level triggers (one
-- aggregated upsert per statement, so a bulk action of 100k records adds one statement, not
-- 100k) as records arrive, change status and are purged: the metrics read this small table
-- at each refresh instead of counting the records (most of which, resolved or abandoned, are
-- history).
CREATE TABLE IF NOT EXISTS {s}.dead_letter_types (
    event_type text NOT NULL,
    status text NOT NULL,
    count bigint NOT NULL,
    PRIMARY KEY (event_type, status)
);
INSERT INTO {s}.dead_letter_types (event_type, status, count)
    SELECT event_type, status, count(*) FROM {s}.dead_letters GROUP BY event_type, status
    ON CONFLICT (event_type, status) DO UPDATE SET count = excluded.count;

CREATE OR REPLACE FUNCTION {s}.dead_letter_types_count() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Rows are changed in key order so that concurrent statements lock them in one order.
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {s}.dead_letter_types AS t (event_type, status, count)
            SELECT event_type, status, count(*) FROM new_rows GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (event_type, status) DO UPDATE SET count = t.count + excluded.count;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE {s}.dead_letter_types AS t SET count = t.count - d.n
            FROM (SELECT event_type, status, count(*) AS n FROM old_rows GROUP BY 1, 2) d
            WHERE t.event_type = d.event_type AND t.status = d.status;
    ELSE
        INSERT INTO {s}.dead_letter_types AS t (event_type, status, count)
            SELECT event_type, status, sum(n) FROM (
                SELECT event_type, status, -1 AS n FROM old_rows
                UNION ALL
                SELECT event_type, status, 1 FROM new_rows
            ) changes GROUP BY 1, 2 HAVING sum(n) <> 0 ORDER BY 1, 2
            ON CONFLICT (event_type, status) DO UPDATE SET count = t.count + excluded.count;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS dead_letter_types_insert ON {s}.dead_letters;
CREATE TRIGGER dead_letter_types_insert AFTER INSERT ON {s}.dead_letters
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.dead_letter_types_count();
-- Every update (a transition table cannot go with a column list); those that change no
-- status add nothing.
DROP TRIGGER IF EXISTS dead_letter_types_update ON {s}.dead_letters;
CREATE TRIGGER dead_letter_types_update AFTER UPDATE ON {s}.dead_letters
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.dead_letter_types_count();
DROP TRIGGER IF EXISTS dead_letter_types_delete ON {s}.dead_letters;
CREATE TRIGGER dead_letter_types_delete AFTER DELETE ON {s}.dead_letters
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.dead_letter_types_count();

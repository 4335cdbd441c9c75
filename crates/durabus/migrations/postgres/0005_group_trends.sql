-- Dead letters of a failure group by creation time: the groups' hourly trend (a range of one
-- index per group, counted without reading the rows).
CREATE INDEX IF NOT EXISTS dead_letters_group_created ON {s}.dead_letters (fingerprint, created_at);

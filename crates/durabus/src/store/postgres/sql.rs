//! The PostgreSQL store's statements, built once for its schema.

/// The columns every event query selects, in the order [`super::rows::event`] reads them.
pub const EVENT_COLUMNS: &str = "id, type, payload::text AS payload, status, retry_count, last_error, \
     metadata, delivered, created_at, updated_at, next_attempt_at, dlq_at, dlq_count, priority, deliver_at, \
     cancelled, cancel_requested, ordering_key";

/// The event log's rows with the live table's columns.
pub const LOG_COLUMNS: &str = "id, type, payload::text AS payload, status, retry_count, last_error, \
     metadata, delivered, created_at, updated_at, NULL::bigint AS next_attempt_at, NULL::bigint AS dlq_at, \
     dlq_count, priority, deliver_at, cancelled, false AS cancel_requested, ordering_key";

/// Statements for one schema (`s` is the quoted schema name).
#[derive(Debug, Clone)]
pub struct PgSql {
    /// The quoted schema name.
    pub schema: String,
    pub insert: String,
    /// `insert` for events without publish options or snapshots and with distinct ids: the same
    /// rows, from five arrays instead of twenty, without the sort that keeps the first of an id
    /// given twice. Parameters `$1`–`$10` as `insert`'s, then the notification's payload.
    pub insert_plain: String,
    pub claim: String,
    pub done: String,
    pub done_fresh: String,
    pub fail: String,
    pub release: String,
    pub recover: String,
    pub renew: String,
    pub subscription_free_name: String,
    pub subscription_save: String,
    pub subscription_delete: String,
    pub subscriptions: String,
    pub next_due: String,
    pub get_event: String,
    pub counts: String,
    pub retry_counts: String,
    pub history_purge: String,
    pub dedup_take: String,
    pub dedup_get: String,
    pub dedup_purge: String,
    pub all_events: String,
    /// The statements of dead letters, operations and jobs.
    pub ops: super::sql_ops::PgOpsSql,
}

impl PgSql {
    pub fn new(s: &str) -> PgSql {
        PgSql {
            schema: s.to_owned(),
            // Stores the events whose id was never stored (the id table sees every id, live or in
            // the log) and returns the ids stored. Parameters: ids, types, payloads, metadata and
            // creation times (arrays, one per event); whether they start claimed; the lease's
            // owner, token and length; the channel to notify (sent on commit) if any were stored;
            // nine arrays of payload snapshots; the notification's payload (who sent it); due times
            // (NULL: due now; else the event is scheduled), priorities, ordering keys and whether
            // the event waits behind its key (no due time then) (arrays, one per event).
            insert: format!(
                "WITH u AS (SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[],
                                                 $21::bigint[], $22::smallint[], $23::text[], $24::bool[])
                            WITH ORDINALITY AS u(id, type, payload, metadata, created, due, priority,
                                                 okey, parked, ord)),
                 fresh AS (INSERT INTO {s}.event_ids (id) SELECT id FROM u
                           ON CONFLICT (id) DO NOTHING RETURNING id),
                 ins AS (
                     INSERT INTO {s}.events (id, type, payload, status, metadata, created_at, updated_at,
                         next_attempt_at, attempts, lease_owner, lease_token, lease_expires_at, processing_started_at,
                         priority, deliver_at, ordering_key)
                     SELECT d.id, d.type, d.payload::json,
                         CASE WHEN d.due IS NOT NULL THEN 'scheduled' WHEN $6 THEN 'processing' ELSE 'pending' END,
                         d.metadata, d.created, d.created,
                         CASE WHEN d.parked THEN NULL WHEN d.due IS NOT NULL THEN d.due
                              WHEN $6 THEN NULL ELSE d.created END,
                         CASE WHEN $6 AND d.due IS NULL THEN 1 ELSE 0 END,
                         CASE WHEN d.due IS NULL THEN $7 END, CASE WHEN d.due IS NULL THEN $8 END,
                         CASE WHEN $6 AND d.due IS NULL THEN d.created + $9 END,
                         CASE WHEN $6 AND d.due IS NULL THEN d.created END,
                         d.priority, d.due, d.okey
                     FROM (SELECT DISTINCT ON (id) * FROM u ORDER BY id, ord) AS d JOIN fresh USING (id)
                     RETURNING id),
                 n AS (SELECT count(pg_notify($10::text, $20::text)) AS c
                       FROM (SELECT 1 FROM ins WHERE $10::text IS NOT NULL LIMIT 1) AS x),
                 -- Payload snapshots of the events stored (the others are dropped).
                 snaps AS (
                     INSERT INTO {s}.event_payloads (event_id, stage, created_at, event_type, payload,
                         size_original, size_compressed, contains_media, contains_base64)
                     SELECT v.* FROM UNNEST($11::uuid[], $12::text[], $13::bigint[], $14::text[],
                         $15::bytea[], $16::bigint[], $17::bigint[], $18::bool[], $19::bool[])
                         AS v(event_id, stage, created_at, event_type, payload, so, sc, m, b)
                     WHERE v.event_id IN (SELECT id FROM ins)
                     ON CONFLICT (event_id, stage, created_at) DO NOTHING)
                 SELECT ins.id FROM ins, n"
            ),
            insert_plain: format!(
                "WITH u AS (SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[], $4::text[], $5::bigint[])
                            AS u(id, type, payload, metadata, created)),
                 fresh AS (INSERT INTO {s}.event_ids (id) SELECT id FROM u
                           ON CONFLICT (id) DO NOTHING RETURNING id),
                 ins AS (
                     INSERT INTO {s}.events (id, type, payload, status, metadata, created_at, updated_at,
                         next_attempt_at, attempts, lease_owner, lease_token, lease_expires_at, processing_started_at)
                     SELECT u.id, u.type, u.payload::json,
                         CASE WHEN $6 THEN 'processing' ELSE 'pending' END,
                         u.metadata, u.created, u.created,
                         CASE WHEN $6 THEN NULL ELSE u.created END,
                         CASE WHEN $6 THEN 1 ELSE 0 END, $7, $8,
                         CASE WHEN $6 THEN u.created + $9 END, CASE WHEN $6 THEN u.created END
                     FROM u JOIN fresh USING (id)
                     RETURNING id),
                 n AS (SELECT count(pg_notify($10::text, $11::text)) AS c
                       FROM (SELECT 1 FROM ins WHERE $10::text IS NOT NULL LIMIT 1) AS x)
                 SELECT ins.id FROM ins, n"
            ),
            // Due pending events (positive priorities first, then 0, then negative; each earliest
            // due first) and events whose lease expired (their worker is gone: the
            // interrupted attempt counts as `store::recovery` says: `$7` added to the retry
            // count, the note `$8` appended with the lost worker's name in place of `$9`),
            // locked with SKIP LOCKED so concurrent workers never take the same row. Never an
            // event this process still holds (`$6`, its tokens): its delivery may still be
            // running here, and its outcome must stay the one that counts unless another worker
            // takes the event over.
            //
            // `lazy` lets this statement's commit skip waiting for its WAL flush
            // (`synchronous_commit = off` for its own transaction only; the session keeps its
            // setting). A claim only leases events: lost in a server crash before the flush, its
            // events are due again after recovery and delivered again (at least once, as after
            // any crash), the lost lease's outcome is refused by its token, and every later
            // synchronous commit (an outcome's, a publish's) flushes the claim first.
            //
            // An expired lease on an event cancelled during its attempt ends it `cancelled`
            // (`dropped`): it is not taken over.
            //
            // Scheduled events whose time has come become pending (`promoted`, keeping their due
            // time); a statement does not see its own changes, so the next claim takes them (the
            // worker claims again at once: they are due).
            claim: format!(
                "WITH expired AS (
                     SELECT id FROM {s}.events
                     WHERE status = 'processing' AND lease_expires_at <= $1
                         AND lease_token <> ALL($6::uuid[]) AND NOT cancel_requested
                     ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                 dropped AS (
                     UPDATE {s}.events SET status = 'cancelled', next_attempt_at = NULL, updated_at = $1,
                         lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                     WHERE id IN (
                         SELECT id FROM {s}.events
                         WHERE status = 'processing' AND lease_expires_at <= $1
                             AND lease_token <> ALL($6::uuid[]) AND cancel_requested
                         LIMIT $2 FOR UPDATE SKIP LOCKED)),
                 high AS (
                     SELECT id FROM {s}.events
                     WHERE status = 'pending' AND priority <> 0 AND priority > 0 AND next_attempt_at <= $1
                     ORDER BY priority DESC, next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                 due AS (
                     SELECT id FROM {s}.events
                     WHERE status = 'pending' AND next_attempt_at <= $1 AND priority = 0
                     ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                 low AS (
                     SELECT id FROM {s}.events
                     WHERE status = 'pending' AND priority <> 0 AND priority < 0 AND next_attempt_at <= $1
                     ORDER BY priority DESC, next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
                 promoted AS (
                     UPDATE {s}.events SET status = 'pending' WHERE id IN (
                         SELECT id FROM {s}.events WHERE status = 'scheduled' AND next_attempt_at <= $1
                         ORDER BY next_attempt_at LIMIT {promote} FOR UPDATE SKIP LOCKED)
                     RETURNING id),
                 lazy AS (SELECT set_config('synchronous_commit', 'off', true)),
                 picked AS (
                     SELECT id, true AS reclaimed FROM expired
                     UNION ALL SELECT id, false FROM high
                     UNION ALL SELECT id, false FROM due
                     UNION ALL SELECT id, false FROM low LIMIT $2)
                 UPDATE {s}.events e SET
                     status = 'processing',
                     attempts = e.attempts + 1,
                     retry_count = CASE WHEN p.reclaimed THEN e.retry_count + $7 ELSE e.retry_count END,
                     last_error = CASE WHEN p.reclaimed THEN
                         (coalesce(e.last_error::jsonb, '[]'::jsonb)
                          || jsonb_build_array(replace($8::text, $9::text, coalesce(e.lease_owner, '?'))))::text
                         ELSE e.last_error END,
                     lease_owner = $3, lease_token = $4, lease_expires_at = $10 + $5,
                     processing_started_at = $1, updated_at = $1
                 FROM picked p, lazy WHERE e.id = p.id
                 RETURNING e.id, e.type, e.payload::text AS payload, e.status, e.retry_count, e.last_error,
                     e.metadata, e.delivered, e.created_at, e.updated_at, e.next_attempt_at, e.dlq_at, e.dlq_count,
                     e.priority, e.deliver_at, e.cancelled, e.cancel_requested, e.ordering_key, p.reclaimed",
                promote = crate::store::PROMOTE_CHUNK
            ),
            // Done: moved to the event log, if the caller still holds the lease (fencing).
            done: done(s, ""),
            // The same for events that never were dead letters (committed on its own).
            done_fresh: done(s, "AND e.dlq_count = 0 AND e.ordering_key IS NULL"),
            // A failed attempt: back to pending with the next attempt's time (`$7`), or, with no
            // next attempt (`$7` NULL), a dead letter; `cancelled` instead of either if a cancel
            // came during the attempt (returned, so no dead-letter record is written).
            fail: format!(
                "UPDATE {s}.events SET
                     status = CASE WHEN cancel_requested THEN 'cancelled'
                                   WHEN $7::bigint IS NULL THEN 'dlq' ELSE 'pending' END,
                     retry_count = $3, last_error = $4, delivered = $5, updated_at = $6,
                     next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE $7 END,
                     dlq_at = CASE WHEN $7::bigint IS NULL AND NOT cancel_requested THEN $6 END,
                     dlq_count = CASE WHEN $7::bigint IS NULL AND NOT cancel_requested
                                      THEN dlq_count + 1 ELSE dlq_count END,
                     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                 WHERE id = $1 AND status = 'processing' AND lease_token = $2
                 RETURNING dlq_count, cancel_requested, ordering_key"
            ),
            release: format!(
                "UPDATE {s}.events SET
                     status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
                     updated_at = $3, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE $3 END,
                     attempts = greatest(attempts - 1, 0),
                     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                 WHERE id = ANY($1) AND status = 'processing' AND lease_owner = $2"
            ),
            // This worker is starting: what nobody holds and what a dead worker held (lease
            // expired) goes back to pending (or `cancelled`, if a cancel came meanwhile), the
            // attempt counted (`$3` added to the retry
            // count, the note `$4` appended). Live leases are left alone, this process's own
            // included (its inline publishes may be running).
            recover: format!(
                "UPDATE {s}.events SET
                     status = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
                     retry_count = retry_count + $3,
                     last_error = (coalesce(last_error::jsonb, '[]'::jsonb)
                         || jsonb_build_array($4::text))::text,
                     updated_at = $1, next_attempt_at = CASE WHEN cancel_requested THEN NULL ELSE $1 END,
                     lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
                 WHERE status = 'processing'
                     AND (lease_owner IS NULL OR lease_expires_at <= $1)
                     AND (lease_token IS NULL OR lease_token <> ALL($2::uuid[]))"
            ),
            // Only the leases this process knows it holds (by token): an event whose claim
            // committed but whose reply was lost (connection killed) is not renewed, so its lease
            // runs out and another worker takes it.
            // Rows another transaction holds are skipped, never waited for: that transaction
            // is this worker's own outcome write (it ends the lease) or a claim taking over an
            // expired one. Waiting instead deadlocked with outcome writes that lock the same
            // rows in another order, and a failed renewal let live leases run out: the events
            // were handled twice. A skipped row still held next beat is renewed then. A lease is
            // never moved back: a renewal that waited long for its connection may carry an
            // earlier time than the claim that set the lease.
            // Like the claim, a renewal commits without waiting for its WAL flush (`lazy`). A
            // commit that waits becomes visible only once flushed, so a slow flush (a
            // checkpoint on a busy disk) would let other workers see the old expiry and take
            // over events whose handlers still run here. A renewal lost in a server crash only
            // shortens a lease: the event is delivered again (at least once, as after any
            // crash) and this worker's outcome is refused by its token.
            renew: format!(
                "WITH lazy AS (SELECT set_config('synchronous_commit', 'off', true)),
                 held AS (
                     SELECT id FROM {s}.events
                     WHERE status = 'processing' AND lease_owner = $1 AND lease_token = ANY($3)
                     FOR UPDATE SKIP LOCKED)
                 UPDATE {s}.events e SET lease_expires_at = greatest(e.lease_expires_at, $2)
                 FROM held h, lazy WHERE e.id = h.id"
            ),
            subscription_free_name: format!(
                "DELETE FROM {s}.subscriptions WHERE name = $1 AND id <> $2"
            ),
            subscription_save: format!(
                "INSERT INTO {s}.subscriptions (id, name, event_type, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, event_type = excluded.event_type"
            ),
            subscription_delete: format!("DELETE FROM {s}.subscriptions WHERE id = $1"),
            subscriptions: format!(
                "SELECT id, name, event_type, created_at FROM {s}.subscriptions ORDER BY created_at, id"
            ),
            next_due: format!(
                "SELECT min(t) FROM (
                     (SELECT next_attempt_at AS t FROM {s}.events WHERE status = 'pending'
                      ORDER BY next_attempt_at LIMIT 1)
                     UNION ALL
                     (SELECT next_attempt_at AS t FROM {s}.events WHERE status = 'scheduled'
                      ORDER BY next_attempt_at LIMIT 1)
                     UNION ALL
                     (SELECT lease_expires_at FROM {s}.events WHERE status = 'processing'
                      ORDER BY lease_expires_at LIMIT 1)) AS d"
            ),
            get_event: format!(
                "SELECT {EVENT_COLUMNS} FROM {s}.events WHERE id = $1
                 UNION ALL SELECT {LOG_COLUMNS} FROM {s}.event_log WHERE id = $1"
            ),
            counts: format!(
                "SELECT type, status, count(*) FROM (
                     SELECT type, status FROM {s}.events UNION ALL SELECT type, status FROM {s}.event_log) AS a
                 GROUP BY type, status ORDER BY type, status"
            ),
            retry_counts: format!(
                "SELECT status, retry_count, count(*) FROM (
                     SELECT status, retry_count FROM {s}.events
                     UNION ALL SELECT status, retry_count FROM {s}.event_log) AS a
                 GROUP BY status, retry_count ORDER BY status, retry_count"
            ),
            history_purge: format!(
                "WITH d AS (
                     DELETE FROM {s}.event_log WHERE id IN
                         (SELECT id FROM {s}.event_log WHERE status = 'done' AND updated_at <= $1 LIMIT $2)
                     RETURNING id)
                 DELETE FROM {s}.event_ids WHERE id IN (SELECT id FROM d)"
            ),
            // Takes dedup key `$1` for event `$2` until `$3`, unless an open window (one closing
            // after `$4`, now) holds it: returns a row when it took the key.
            dedup_take: format!(
                "INSERT INTO {s}.dedup AS d (key, event_id, expires_at) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO UPDATE SET event_id = excluded.event_id, expires_at = excluded.expires_at
                     WHERE d.expires_at <= $4
                 RETURNING event_id"
            ),
            dedup_get: format!("SELECT event_id FROM {s}.dedup WHERE key = $1"),
            dedup_purge: format!("DELETE FROM {s}.dedup WHERE expires_at <= $1"),
            all_events: format!(
                "(SELECT {EVENT_COLUMNS} FROM {s}.events
                  UNION ALL SELECT {LOG_COLUMNS} FROM {s}.event_log) AS all_events"
            ),
            ops: super::sql_ops::PgOpsSql::new(s),
        }
    }

    /// The listing query for `query`, newest first. Parameters, each only if its filter is
    /// set: type, created from, created before; then limit and offset. The status is written
    /// into the SQL (one of four words) and picks the table: `done` events are in the log.
    pub fn list(&self, query: &crate::store::EventQuery) -> String {
        use crate::event::EventStatus;
        let s = &self.schema;
        let source = match query.status {
            Some(EventStatus::Done) => format!("(SELECT {LOG_COLUMNS} FROM {s}.event_log) AS t"),
            Some(_) => format!("(SELECT {EVENT_COLUMNS} FROM {s}.events) AS t"),
            None => self.all_events.clone(),
        };
        let mut terms = Vec::new();
        let mut n = 0;
        let mut next = || {
            n += 1;
            n
        };
        if let Some(st) = query.status {
            terms.push(format!("status = '{}'", st.as_str()));
        }
        if query.event_type.is_some() {
            terms.push(format!("type = ${}", next()));
        }
        if query.created_from.is_some() {
            terms.push(format!("created_at >= ${}", next()));
        }
        if query.created_before.is_some() {
            terms.push(format!("created_at < ${}", next()));
        }
        if query.ordering_key.is_some() {
            terms.push(format!("ordering_key = ${}", next()));
        }
        let filter = if terms.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", terms.join(" AND "))
        };
        let (limit, offset) = (next(), next());
        format!(
            "SELECT * FROM {source} {filter} ORDER BY created_at DESC, id DESC LIMIT ${limit} OFFSET ${offset}"
        )
    }
}

/// The done statement on schema `s`, with `also` added to the rows it moves.
fn done(s: &str, also: &str) -> String {
    format!(
        "WITH o AS (SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[]) AS o(id, token, delivered)),
         moved AS (
             DELETE FROM {s}.events e USING o
             WHERE e.id = o.id AND e.status = 'processing' AND e.lease_token = o.token {also}
             RETURNING e.*, o.delivered AS now_delivered)
         INSERT INTO {s}.event_log (id, type, payload, status, retry_count, attempts, last_error,
             metadata, delivered, created_at, updated_at, dlq_count, priority, deliver_at, cancelled,
             ordering_key)
         SELECT id, type, payload, 'done', retry_count, attempts, last_error, metadata,
             now_delivered, created_at, $4, dlq_count, priority, deliver_at, cancelled, ordering_key
         FROM moved
         ON CONFLICT (id) DO NOTHING
         RETURNING id, dlq_count, ordering_key"
    )
}

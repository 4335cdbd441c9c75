//! Ordering keys on PostgreSQL: the queue of each key's unfinished events (`keyed`), in publish
//! order. The head of a key is delivered like any event; the others wait with no due time
//! until the head finishes, when the next becomes due. Every change to a key's queue first takes
//! a transaction-scoped advisory lock on the key, so that an insert and a head finishing in
//! another process are ordered: the insert sees the head gone, or the finish sees the insert.

use sqlx::{PgConnection, Row};
use uuid::Uuid;

use super::q;
use super::sql::PgSql;
use crate::error::Result;
use crate::event::EventId;

/// Takes the advisory lock of `key` until the transaction ends.
pub(super) async fn lock(conn: &mut PgConnection, key: &str) -> Result<()> {
    q("SELECT pg_advisory_xact_lock(hashtextextended($1, 7109))")
        .bind(key)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

/// Takes the advisory locks of `keys` (sorted, without repeats) in one statement, in that
/// order, until the transaction ends.
pub(super) async fn lock_all(conn: &mut PgConnection, keys: &[&str]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    q(
        "SELECT count(pg_advisory_xact_lock(hashtextextended(k, 7109)))
       FROM (SELECT k FROM UNNEST($1::text[]) WITH ORDINALITY AS u(k, ord) ORDER BY ord) AS o",
    )
    .bind(keys)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Which of `keys` have unfinished events (call with their locks held).
pub(super) async fn busy_of(
    conn: &mut PgConnection,
    sql: &PgSql,
    keys: &[&str],
) -> Result<std::collections::HashSet<String>> {
    let s = &sql.schema;
    let rows = q(&format!(
        "SELECT DISTINCT key FROM {s}.keyed WHERE key = ANY($1::text[])"
    ))
    .bind(keys)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| Ok(r.try_get::<String, _>(0)?))
        .collect()
}

/// Whether `key` has unfinished events (call with its lock held).
pub(super) async fn busy(conn: &mut PgConnection, sql: &PgSql, key: &str) -> Result<bool> {
    let s = &sql.schema;
    Ok(
        q(&format!("SELECT 1 FROM {s}.keyed WHERE key = $1 LIMIT 1"))
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?
            .is_some(),
    )
}

/// Events `ids` join the back of their keys' queues (with the keys' locks held).
pub(super) async fn join(
    conn: &mut PgConnection,
    sql: &PgSql,
    keys: &[&str],
    ids: &[Uuid],
) -> Result<()> {
    let s = &sql.schema;
    q(&format!(
        "INSERT INTO {s}.keyed (key, event_id)
         SELECT k, id FROM UNNEST($1::text[], $2::uuid[]) WITH ORDINALITY AS u(k, id, ord) ORDER BY ord
         ON CONFLICT (event_id) DO NOTHING"
    ))
    .bind(keys)
    .bind(ids)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The key event `id` is queued under, if any.
async fn key_of(conn: &mut PgConnection, sql: &PgSql, id: EventId) -> Result<Option<String>> {
    let s = &sql.schema;
    let row = q(&format!("SELECT key FROM {s}.keyed WHERE event_id = $1"))
        .bind(id.0)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.map(|r| r.try_get::<String, _>(0)).transpose()?)
}

/// Event `id` leaves its key's queue (it finished, or was cancelled or purged); if it was the
/// head, the next event of the key becomes due at `now` and the workers are woken. Nothing for
/// an event without a row.
pub(super) async fn leave(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    id: EventId,
    now: i64,
) -> Result<()> {
    let Some(key) = key_of(conn, sql, id).await? else {
        return Ok(());
    };
    lock(conn, &key).await?;
    let s = &sql.schema;
    q(&format!("DELETE FROM {s}.keyed WHERE event_id = $1"))
        .bind(id.0)
        .execute(&mut *conn)
        .await?;
    wake_head(conn, sql, channel, &key, now).await
}

/// Makes the head of `key` due if it is waiting: pending at its publish time, or scheduled at
/// its due time if that is still ahead; then wakes the workers.
async fn wake_head(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    key: &str,
    now: i64,
) -> Result<()> {
    let s = &sql.schema;
    let woke = q(&format!(
        "UPDATE {s}.events SET
             status = CASE WHEN coalesce(deliver_at, 0) > $2 THEN 'scheduled' ELSE 'pending' END,
             next_attempt_at = CASE WHEN coalesce(deliver_at, 0) > $2 THEN deliver_at ELSE created_at END
         WHERE id = (SELECT event_id FROM {s}.keyed WHERE key = $1 ORDER BY seq LIMIT 1)
             AND status IN ('pending', 'scheduled') AND next_attempt_at IS NULL
         RETURNING id"
    ))
    .bind(key)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    if woke.is_some() {
        q("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Event `id`, with `key`, was just dead-lettered: it holds its key (`hold`) or lets it move
/// on; its dead-letter record gets the key and how many later events of it were waiting.
pub(super) async fn died(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    id: EventId,
    key: &str,
    hold: bool,
    now: i64,
) -> Result<()> {
    lock(conn, key).await?;
    let s = &sql.schema;
    let waiting: i64 = q(&format!(
        "SELECT count(*) FROM {s}.keyed WHERE key = $1 AND event_id <> $2"
    ))
    .bind(key)
    .bind(id.0)
    .fetch_one(&mut *conn)
    .await?
    .try_get(0)?;
    q(&format!(
        "UPDATE {s}.dead_letters SET ordering_key = $2, key_waiting = $3 WHERE event_id = $1"
    ))
    .bind(id.0)
    .bind(key)
    .bind(waiting)
    .execute(&mut *conn)
    .await?;
    if hold {
        q(&format!(
            "UPDATE {s}.keyed SET held_since = $2 WHERE event_id = $1"
        ))
        .bind(id.0)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(())
    } else {
        leave(conn, sql, channel, id, now).await
    }
}

/// Dead event `id` was just sent back for delivery: if it still holds its key it is the head
/// and runs; if its key moved on, it joins the back of the key's queue (and waits if the key
/// is busy).
pub(super) async fn rejoin(conn: &mut PgConnection, sql: &PgSql, id: EventId) -> Result<()> {
    let s = &sql.schema;
    let key: Option<String> = q(&format!(
        "SELECT ordering_key FROM {s}.events WHERE id = $1"
    ))
    .bind(id.0)
    .fetch_optional(&mut *conn)
    .await?
    .map(|r| r.try_get::<Option<String>, _>(0))
    .transpose()?
    .flatten();
    let Some(key) = key else {
        return Ok(());
    };
    lock(conn, &key).await?;
    let held = q(&format!(
        "UPDATE {s}.keyed SET held_since = NULL WHERE event_id = $1"
    ))
    .bind(id.0)
    .execute(&mut *conn)
    .await?
    .rows_affected()
        == 1;
    if held {
        return Ok(());
    }
    let wait = busy(conn, sql, &key).await?;
    join(conn, sql, &[key.as_str()], &[id.0]).await?;
    if wait {
        q(&format!(
            "UPDATE {s}.events SET next_attempt_at = NULL WHERE id = $1 AND status = 'pending'"
        ))
        .bind(id.0)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// What happens to an event in its key's queue (see [`apply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyOp {
    /// It leaves (finished, cancelled, purged): [`leave`].
    Leave,
    /// It was dead-lettered, holding its key or not: [`died`].
    Died { hold: bool },
    /// It was sent back for delivery: [`rejoin`].
    Rejoin,
}

/// Applies `ops` (each with its event's key) in the order of their keys: every transaction
/// takes the advisory locks of several keys in that one order (inserts do too), so two of
/// them never wait for each other in a circle.
pub(super) async fn apply(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    mut ops: Vec<(String, EventId, KeyOp)>,
    now: i64,
) -> Result<()> {
    if ops.is_empty() {
        return Ok(());
    }
    ops.sort_by(|a, b| a.0.cmp(&b.0));
    // The plain case, events leaving (completions), set-based: one statement each for the
    // locks, the queue rows and the heads made due, whatever their number.
    if ops.iter().all(|(_, _, op)| *op == KeyOp::Leave) {
        let mut keys: Vec<&str> = ops.iter().map(|(k, _, _)| k.as_str()).collect();
        keys.dedup();
        lock_all(conn, &keys).await?;
        let ids: Vec<Uuid> = ops.iter().map(|(_, id, _)| id.0).collect();
        let s = &sql.schema;
        q(&format!(
            "DELETE FROM {s}.keyed WHERE event_id = ANY($1::uuid[])"
        ))
        .bind(&ids)
        .execute(&mut *conn)
        .await?;
        return wake_heads(conn, sql, channel, &keys, now).await;
    }
    for (key, id, op) in ops {
        match op {
            KeyOp::Leave => leave(conn, sql, channel, id, now).await?,
            KeyOp::Died { hold } => died(conn, sql, channel, id, &key, hold, now).await?,
            KeyOp::Rejoin => rejoin(conn, sql, id).await?,
        }
    }
    Ok(())
}

/// [`wake_head`] for every key of `keys` (locked), in one statement. Each key's head is
/// found through the `(key, seq)` index and its event by primary key, whatever the planner's
/// statistics say: joined the other way round, a table analysed while nearly empty was read
/// in full once per head (35–50 ms a statement with 800 events waiting, its key locks held
/// all the while).
async fn wake_heads(
    conn: &mut PgConnection,
    sql: &PgSql,
    channel: &str,
    keys: &[&str],
    now: i64,
) -> Result<()> {
    let s = &sql.schema;
    let woke = q(&format!(
        "UPDATE {s}.events AS e SET
             status = CASE WHEN coalesce(e.deliver_at, 0) > $2 THEN 'scheduled' ELSE 'pending' END,
             next_attempt_at = CASE WHEN coalesce(e.deliver_at, 0) > $2 THEN e.deliver_at ELSE e.created_at END
         WHERE e.id = ANY(ARRAY(
                 SELECT h.event_id FROM UNNEST($1::text[]) AS k(key)
                 CROSS JOIN LATERAL (SELECT event_id FROM {s}.keyed
                     WHERE keyed.key = k.key ORDER BY seq LIMIT 1) AS h))
             AND e.status IN ('pending', 'scheduled') AND e.next_attempt_at IS NULL
         RETURNING e.id"
    ))
    .bind(keys)
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    if !woke.is_empty() {
        q("SELECT pg_notify($1, '')")
            .bind(channel)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The keys of events `ids`, for [`apply`]: the key each is queued under (`queued`), or the
/// key it was published with.
pub(super) async fn keys_of(
    conn: &mut PgConnection,
    sql: &PgSql,
    ids: &[EventId],
) -> Result<Vec<(String, EventId)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let s = &sql.schema;
    let raw: Vec<Uuid> = ids.iter().map(|i| i.0).collect();
    let rows = q(&format!(
        "SELECT e.id, coalesce(k.key, e.ordering_key) FROM UNNEST($1::uuid[]) AS u(id)
         LEFT JOIN {s}.keyed AS k ON k.event_id = u.id
         LEFT JOIN {s}.events AS e ON e.id = u.id
         WHERE coalesce(k.key, e.ordering_key) IS NOT NULL"
    ))
    .bind(&raw)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.try_get::<String, _>(1)?,
                EventId(r.try_get::<Uuid, _>(0)?),
            ))
        })
        .collect()
}

/// The keyed events that have finished without leaving their key's queue (ended `cancelled` by
/// a lease that ran out during a cancel, say, or gone): the safety net a store runs now and
/// then. Returns them.
pub(super) async fn strays(conn: &mut PgConnection, sql: &PgSql) -> Result<Vec<EventId>> {
    let s = &sql.schema;
    let rows = q(&format!(
        "SELECT k.event_id FROM {s}.keyed AS k LEFT JOIN {s}.events AS e ON e.id = k.event_id
         WHERE e.id IS NULL OR e.status IN ('cancelled', 'done')
            OR (e.status = 'dlq' AND k.held_since IS NULL)
         ORDER BY k.key"
    ))
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|r| Ok(EventId(r.try_get::<Uuid, _>(0)?)))
        .collect()
}

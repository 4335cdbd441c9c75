//! The limits behind the PostgreSQL figures, measured in the same run: raw SQL on a fresh
//! schema holding durabus's own tables (created by the library, so the indexes a write pays for
//! are the same), the same ~200-byte rows, no library in the loop. Each library figure is then
//! also a ratio to its limit, as `raw_sqlite_commit_eps` does for SQLite.

use std::time::Instant;

use durabus::sqlx::{self, AssertSqlSafe, PgPool};
use serde::Serialize;
use uuid::Uuid;

use super::harness::event;
use crate::cmd::Db;

/// The raw limits (events per second).
#[derive(Debug, Default, Clone, Serialize)]
pub struct Limits {
    /// One caller, one row per `INSERT`, each its own commit.
    pub one_row_commit_eps: f64,
    /// The same commits one every 2 ms, as the latency figures publish: the p50 and p99 of one
    /// commit (µs), the floor of a publish's latency (a publish is at least one commit).
    pub spaced_commit_p50_us: f64,
    pub spaced_commit_p99_us: f64,
    /// `INSERT … SELECT FROM unnest(…)`, 1,000 rows per statement, one caller, into empty tables
    /// (as every bulk insert here).
    pub unnest_insert_eps: f64,
    /// `COPY … FROM STDIN` (text format), 1,000 rows per `COPY`, one caller.
    pub copy_insert_eps: f64,
    /// The library's design in raw SQL: the `unnest` insert, each id also written to the id
    /// table that keeps publishing idempotent while events move to the log (`ON CONFLICT DO
    /// NOTHING`, only the fresh ids stored), 1,000 rows per statement, one caller.
    pub unnest_with_ids_eps: f64,
    /// Claim 100 due rows (`FOR UPDATE SKIP LOCKED`) and complete them (one statement moving
    /// them to the event log), 4 callers at once, over a backlog.
    pub claim_complete_eps: f64,
    /// End to end in raw SQL: one caller inserts rows by `unnest`, 1,000 per statement, while
    /// 4 callers claim and complete them as above, until every row is in the event log. Both
    /// halves share the database and the machine's cores, as publisher and worker do in the
    /// end-to-end figure.
    pub end_to_end_eps: f64,
}

/// The columns every raw insert writes.
pub(super) const COLUMNS: &str =
    "id, type, payload, status, created_at, updated_at, next_attempt_at";

/// The same rows the library benches publish: (id, type, payload).
pub(super) fn rows(from: u64, to: u64) -> anyhow::Result<Vec<(Uuid, String, String)>> {
    (from..to)
        .map(|i| {
            let e = event(i)?;
            Ok((e.id.0, e.event_type, e.payload))
        })
        .collect()
}

fn now_ms() -> i64 {
    durabus::Timestamp::now().as_millis()
}

/// Measures every limit on a fresh schema made by the library (dropped by the caller).
pub async fn measure(db: &Db, quick: bool) -> anyhow::Result<Limits> {
    let bus = db.builder().build().await?;
    bus.shutdown().await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(5)
        .connect(&db.target)
        .await?;
    let table = format!("\"{}\".events", db.schema);
    let log = format!("\"{}\".event_log", db.schema);
    let scale = |full: u64, small: u64| if quick { small } else { full };
    let mut next = 0u64;
    let mut take = |n: u64| {
        let range = (next, next + n);
        next += n;
        range
    };

    let (a, b) = take(scale(3_000, 300));
    let one = rows(a, b)?;
    let started = Instant::now();
    let insert =
        format!("INSERT INTO {table} ({COLUMNS}) VALUES ($1, $2, $3::json, 'pending', $4, $4, $4)");
    for row in &one {
        insert_one(&pool, &insert, row).await?;
    }
    let one_row_commit_eps = one.len() as f64 / started.elapsed().as_secs_f64();

    let (a, b) = take(scale(1_000, 100));
    let mut spaced = Vec::new();
    for row in &rows(a, b)? {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        let started = Instant::now();
        insert_one(&pool, &insert, row).await?;
        spaced.push(started.elapsed().as_secs_f64() * 1e6);
    }
    spaced.sort_by(f64::total_cmp);
    let spaced_commit_p50_us = super::harness::percentile(&spaced, 0.50);
    let spaced_commit_p99_us = super::harness::percentile(&spaced, 0.99);

    // Each bulk insert starts from empty tables, as the library's batch figure starts from a
    // fresh schema: a later one would otherwise pay for the rows (and the checkpoints) of the
    // earlier ones.
    let ids = format!("\"{}\".event_ids", db.schema);
    let empty = async || -> anyhow::Result<()> {
        sqlx::query(AssertSqlSafe(format!("TRUNCATE {table}, {ids}")))
            .execute(&pool)
            .await?;
        Ok(())
    };
    empty().await?;
    let unnest_insert_eps = in_thousands(take(scale(200_000, 20_000)), async |chunk| {
        unnest(&pool, &table, &chunk).await
    })
    .await?;
    empty().await?;
    let copy_insert_eps = in_thousands(take(scale(200_000, 20_000)), async |chunk| {
        copy(&pool, &table, &chunk).await
    })
    .await?;
    empty().await?;
    let unnest_with_ids_eps = in_thousands(take(scale(200_000, 20_000)), async |chunk| {
        unnest_with_ids(&pool, &table, &ids, &chunk).await
    })
    .await?;

    // The last insert's rows are the backlog: claim and complete all of them.
    let backlog = scale(200_000, 20_000);
    let claim = format!(
        "WITH c AS (SELECT id FROM {table} WHERE status = 'pending' AND next_attempt_at <= $1 \
         ORDER BY next_attempt_at LIMIT 100 FOR UPDATE SKIP LOCKED) \
         UPDATE {table} e SET status = 'processing', lease_owner = 'raw', lease_token = $2, \
         lease_expires_at = $1 + 30000, processing_started_at = $1, attempts = e.attempts + 1 \
         FROM c WHERE e.id = c.id RETURNING e.id"
    );
    let complete = format!(
        "WITH moved AS (DELETE FROM {table} WHERE id = ANY($1) AND lease_token = $2 RETURNING *) \
         INSERT INTO {log} (id, type, payload, status, retry_count, attempts, last_error, \
         metadata, delivered, created_at, updated_at) \
         SELECT id, type, payload, 'done', retry_count, attempts, last_error, metadata, \
         delivered, created_at, $3 FROM moved"
    );
    let cycles = Cycles {
        pool: pool.clone(),
        claim,
        complete,
    };
    let claim_complete_eps = timed(backlog, async || cycles.run(None).await).await?;
    ensure_empty(&pool, &table).await?;

    // End to end: a publisher and the claim loops at once. The loops stop once the publisher
    // is done and a claim finds nothing.
    let (a, b) = take(scale(100_000, 10_000));
    let published = tokio::sync::watch::channel(false);
    let end_to_end_eps = timed(b - a, async || {
        let loops = cycles.run(Some(published.1.clone()));
        let publisher = async {
            let result =
                in_thousands((a, b), async |chunk| unnest(&pool, &table, &chunk).await).await;
            published.0.send_replace(true);
            result
        };
        let (loops, publisher) = tokio::join!(loops, publisher);
        publisher?;
        loops
    })
    .await?;
    ensure_empty(&pool, &table).await?;
    pool.close().await;
    Ok(Limits {
        one_row_commit_eps,
        spaced_commit_p50_us,
        spaced_commit_p99_us,
        unnest_insert_eps,
        copy_insert_eps,
        unnest_with_ids_eps,
        claim_complete_eps,
        end_to_end_eps,
    })
}

/// Raw claim-then-complete cycles from 4 callers.
struct Cycles {
    pool: PgPool,
    claim: String,
    complete: String,
}

impl Cycles {
    /// Runs the 4 callers until a claim finds nothing: at once over a backlog (`published`
    /// `None`), or once `published` says the publisher is done.
    async fn run(
        &self,
        published: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> anyhow::Result<()> {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let (pool, claim, complete) =
                (self.pool.clone(), self.claim.clone(), self.complete.clone());
            let published = published.clone();
            tasks.spawn(async move {
                loop {
                    // Read before the claim: a claim that finds nothing after the publisher
                    // finished has seen every row.
                    let done = published.as_ref().is_none_or(|p| *p.borrow());
                    let token = Uuid::now_v7();
                    let ids: Vec<Uuid> = sqlx::query_scalar(AssertSqlSafe(claim.as_str()))
                        .bind(now_ms())
                        .bind(token)
                        .fetch_all(&pool)
                        .await?;
                    if ids.is_empty() {
                        if done {
                            return anyhow::Ok(());
                        }
                        // Caught up with the publisher: wait a little, as a worker waits for
                        // its wake-up, instead of spending the database's time on empty claims.
                        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        continue;
                    }
                    sqlx::query(AssertSqlSafe(complete.as_str()))
                        .bind(&ids)
                        .bind(token)
                        .bind(now_ms())
                        .execute(&pool)
                        .await?;
                }
            });
        }
        while let Some(done) = tasks.join_next().await {
            done??;
        }
        Ok(())
    }
}

/// Fails if a claim loop left rows behind.
async fn ensure_empty(pool: &PgPool, table: &str) -> anyhow::Result<()> {
    let left: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(pool)
        .await?;
    anyhow::ensure!(left == 0, "the raw claim loop left {left} events behind");
    Ok(())
}

/// One row by the one-row `insert` statement, committed on its own.
pub(super) async fn insert_one(
    pool: &PgPool,
    insert: &str,
    (id, ty, payload): &(Uuid, String, String),
) -> anyhow::Result<()> {
    sqlx::query(AssertSqlSafe(insert))
        .bind(id)
        .bind(ty)
        .bind(payload)
        .bind(now_ms())
        .execute(pool)
        .await?;
    Ok(())
}

/// Inserts rows `a..b` with `insert`, 1,000 at a time; returns rows per second.
async fn in_thousands(
    (a, b): (u64, u64),
    mut insert: impl AsyncFnMut(Vec<(Uuid, String, String)>) -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    for start in (a..b).step_by(1000) {
        insert(rows(start, (start + 1000).min(b))?).await?;
    }
    Ok((b - a) as f64 / started.elapsed().as_secs_f64())
}

/// Runs `f` and returns `n` per second of its time.
async fn timed(n: u64, f: impl AsyncFnOnce() -> anyhow::Result<()>) -> anyhow::Result<f64> {
    let started = Instant::now();
    f().await?;
    Ok(n as f64 / started.elapsed().as_secs_f64())
}

/// One `INSERT … SELECT FROM unnest(…)` of `rows`.
async fn unnest(pool: &PgPool, table: &str, rows: &[(Uuid, String, String)]) -> anyhow::Result<()> {
    let sql = format!(
        "INSERT INTO {table} ({COLUMNS}) \
         SELECT i, t, p::json, 'pending', $4, $4, $4 FROM unnest($1::uuid[], $2::text[], $3::text[]) AS r(i, t, p)"
    );
    run_unnest(pool, &sql, rows).await
}

/// The `unnest` insert of `rows`, storing only ids the id table did not hold yet.
pub(super) async fn unnest_with_ids(
    pool: &PgPool,
    table: &str,
    id_table: &str,
    rows: &[(Uuid, String, String)],
) -> anyhow::Result<()> {
    let sql = format!(
        "WITH u AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]) AS r(i, t, p)), \
         fresh AS (INSERT INTO {id_table} (id) SELECT i FROM u ON CONFLICT (id) DO NOTHING RETURNING id) \
         INSERT INTO {table} ({COLUMNS}) \
         SELECT i, t, p::json, 'pending', $4, $4, $4 FROM u JOIN fresh ON fresh.id = u.i"
    );
    run_unnest(pool, &sql, rows).await
}

/// Runs an insert statement taking the rows' ids, types and payloads as arrays (`$1`–`$3`)
/// and the time (`$4`).
async fn run_unnest(
    pool: &PgPool,
    sql: &str,
    rows: &[(Uuid, String, String)],
) -> anyhow::Result<()> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.0).collect();
    let types: Vec<&str> = rows.iter().map(|r| r.1.as_str()).collect();
    let payloads: Vec<&str> = rows.iter().map(|r| r.2.as_str()).collect();
    sqlx::query(AssertSqlSafe(sql))
        .bind(&ids)
        .bind(&types)
        .bind(&payloads)
        .bind(now_ms())
        .execute(pool)
        .await?;
    Ok(())
}

/// Escapes a value for `COPY`'s text format.
fn copy_text(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
}

/// One `COPY … FROM STDIN` of `rows`.
async fn copy(pool: &PgPool, table: &str, rows: &[(Uuid, String, String)]) -> anyhow::Result<()> {
    let now = now_ms();
    let mut text = String::with_capacity(rows.len() * 320);
    for (id, ty, payload) in rows {
        text.push_str(&id.to_string());
        text.push('\t');
        copy_text(ty, &mut text);
        text.push('\t');
        copy_text(payload, &mut text);
        text.push_str(&format!("\tpending\t{now}\t{now}\t{now}\n"));
    }
    let mut conn = pool.acquire().await?;
    let mut copy = conn
        .copy_in_raw(&format!("COPY {table} ({COLUMNS}) FROM STDIN"))
        .await?;
    copy.send(text.into_bytes()).await?;
    copy.finish().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::copy_text;

    #[test]
    fn copy_text_escapes_what_the_format_reserves() {
        let mut out = String::new();
        copy_text("a\\b\tc\nd\re", &mut out);
        assert_eq!(out, "a\\\\b\\tc\\nd\\re");
    }
}

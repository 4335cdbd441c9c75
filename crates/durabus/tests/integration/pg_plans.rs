//! The PostgreSQL claim's plan at scale: with 1,000,000 completed events in the log and 100,000
//! pending, the claim must walk the partial index of due events (and of held events for
//! expired leases), never the table. Rows are loaded with set-based SQL; `ANALYZE` gives the
//! planner real statistics.

use crate::support::{drop_schema, pg_available, pg_url, unique_schema};
use durabus::EventBus;
use durabus::sqlx::{self, AssertSqlSafe, Row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_walks_the_due_index_at_a_million_events_of_history() {
    if !pg_available().await {
        return;
    }
    let schema = unique_schema();
    let bus = EventBus::builder()
        .postgres_with(
            pg_url(),
            durabus::PgOptions {
                schema: schema.clone(),
                ..durabus::PgOptions::default()
            },
        )
        .build()
        .await
        .unwrap();
    bus.shutdown().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&pg_url())
        .await
        .unwrap();
    let s = format!("\"{schema}\"");
    let payload = r#"{"order_id": 1, "note": "plan test"}"#;
    for sql in [
        format!(
            "INSERT INTO {s}.event_log (id, type, payload, status, retry_count, attempts, created_at, updated_at)
             SELECT gen_random_uuid(), 'plan.done', '{payload}', 'done', 0, 1, g, g
             FROM generate_series(1, 1000000) g"
        ),
        format!(
            "INSERT INTO {s}.events (id, type, payload, status, created_at, updated_at, next_attempt_at)
             SELECT gen_random_uuid(), 'plan.pending', '{payload}', 'pending', g, g, g
             FROM generate_series(1, 100000) g"
        ),
        format!(
            "INSERT INTO {s}.events (id, type, payload, status, created_at, updated_at,
                 lease_owner, lease_token, lease_expires_at, attempts)
             SELECT gen_random_uuid(), 'plan.held', '{payload}', 'processing', g, g,
                 'w', gen_random_uuid(), 2000000000000 + g, 1
             FROM generate_series(1, 1000) g"
        ),
        format!("ANALYZE {s}.events"),
        format!("ANALYZE {s}.event_log"),
    ] {
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&pool).await.unwrap();
    }
    let claim = durabus::store::postgres::claim_statement(&s);
    // The claim as the worker sends it: now, 256 rows, a lease of 30 s, no tokens held.
    let explain = format!("EXPLAIN {claim}");
    let rows = sqlx::query(AssertSqlSafe(explain))
        .bind(1_000_000_000_000i64)
        .bind(256i64)
        .bind("plan-worker")
        .bind(uuid::Uuid::now_v7())
        .bind(30_000i64)
        .bind(Vec::<uuid::Uuid>::new())
        .bind(1i32)
        .bind("interrupted")
        .bind("{worker}")
        .bind(1_000_000_000_000i64)
        .fetch_all(&pool)
        .await
        .unwrap();
    let plan: Vec<String> = rows.iter().map(|r| r.get::<String, _>(0)).collect();
    let text = plan.join("\n");
    println!("{text}");
    assert!(text.contains("events_due"), "{text}");
    assert!(text.contains("events_lease"), "{text}");
    assert!(
        !plan.iter().any(|l| l.contains("Seq Scan")),
        "the claim scans a table:\n{text}"
    );
    pool.close().await;
    drop_schema(&schema).await;
}

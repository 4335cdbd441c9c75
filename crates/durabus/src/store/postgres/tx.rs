//! Transactions that a cancelled caller cannot leave open.
//!
//! sqlx 0.9 counts a transaction as open only once PostgreSQL has answered its `BEGIN`. A
//! future dropped while it waits for that answer (an aborted task, a timeout, a `select!`)
//! therefore queues no `ROLLBACK`, and the connection goes back to the pool inside a
//! transaction that nothing ends. The next borrower's statements run in it: its writes hold
//! their locks, are invisible to every other connection and are never committed. A replay
//! runner aborted at that moment made the next runner's claim vanish this way (upstream:
//! sqlx issue 4393, fixed after 0.9.0).
//!
//! [`begin`] runs the `BEGIN` on a task of its own. A caller that goes away while it waits
//! drops only the task's handle; the task still receives the open transaction and drops it,
//! which rolls it back the usual way before the connection is pooled again.

use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

use crate::error::{Error, Result};

/// Opens a transaction on `pool` (see the module comment for why not `pool.begin()`).
pub(super) async fn begin(pool: &PgPool) -> Result<Transaction<'static, Postgres>> {
    let pool = pool.clone();
    match tokio::spawn(async move { pool.begin().await }).await {
        Ok(tx) => Ok(tx?),
        Err(e) if e.is_cancelled() => Err(Error::Shutdown),
        Err(e) => Err(Error::Internal(format!(
            "beginning a transaction panicked: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Future;
    use std::task::Poll;

    use sqlx::Connection;
    use sqlx::postgres::PgPoolOptions;

    use super::begin;

    fn url() -> String {
        std::env::var("DURABUS_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
    }

    /// A pool of one connection (so every statement meets the one a cancelled `BEGIN` used),
    /// or `None` when PostgreSQL is unreachable outside CI.
    async fn one_connection() -> Option<sqlx::PgPool> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&url())
            .await;
        match pool {
            Ok(pool) => Some(pool),
            Err(e) if std::env::var("CI").is_err() => {
                eprintln!("skipped: PostgreSQL unreachable: {e}");
                None
            }
            Err(e) => panic!("PostgreSQL unreachable in CI: {e}"),
        }
    }

    /// The id of the transaction a statement on `pool` runs in.
    async fn txid(pool: &sqlx::PgPool) -> i64 {
        sqlx::query_scalar("SELECT txid_current()")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// With sqlx 0.9's `pool.begin()` in place of [`begin`], this fails.
    #[tokio::test]
    async fn a_begin_cancelled_while_it_waits_leaves_no_transaction_open() {
        let Some(pool) = one_connection().await else {
            return;
        };
        let mut monitor = sqlx::PgConnection::connect(&url()).await.unwrap();
        let mut cancelled = 0;
        for round in 0..20 {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&pool)
                .await
                .unwrap();
            // The begin is polled once, which sends its `BEGIN` (or starts the task that
            // does), and dropped once PostgreSQL has run it (as another connection sees), before
            // anything reads the answer.
            let mut pending = Box::pin(begin(&pool));
            let finished =
                std::future::poll_fn(|cx| Poll::Ready(pending.as_mut().poll(cx).is_ready())).await;
            assert!(!finished, "round {round}: one poll finished the begin");
            let mut open = false;
            let start = std::time::Instant::now();
            while start.elapsed() < std::time::Duration::from_secs(10) {
                let state: Option<String> =
                    sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
                        .bind(pid)
                        .fetch_optional(&mut monitor)
                        .await
                        .unwrap()
                        .flatten();
                open = state.as_deref() == Some("idle in transaction");
                if open {
                    break;
                }
            }
            drop(pending);
            if open {
                cancelled += 1;
            }
            // On its own, each statement is a transaction of its own; inside a transaction
            // left open, both run in that one.
            let first = txid(&pool).await;
            let second = txid(&pool).await;
            assert_ne!(
                first, second,
                "round {round}: statements ran inside the cancelled begin's transaction"
            );
        }
        assert_eq!(cancelled, 20, "begins dropped with their transaction open");
        // A begin that is not cancelled still works.
        let mut tx = begin(&pool).await.unwrap();
        let first: i64 = sqlx::query_scalar("SELECT txid_current()")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        let second: i64 = sqlx::query_scalar("SELECT txid_current()")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(first, second, "one transaction");
        tx.commit().await.unwrap();
    }
}

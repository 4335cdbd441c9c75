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
//! which rolls it back the usual way before the connection is pooled again. (So a begin whose
//! caller went away still takes a connection, runs `BEGIN` and `ROLLBACK`, and gives it back.)

use sqlx::{Postgres, Transaction};

use super::pool::Pool;
use crate::error::{Error, Result};

/// Opens a transaction on `pool` (see the module comment for why not a plain begin).
pub(super) async fn begin(pool: &Pool) -> Result<Transaction<'static, Postgres>> {
    let pool = pool.clone();
    match tokio::spawn(async move { pool.begin().await }).await {
        Ok(tx) => Ok(tx?),
        // The runtime is shutting down.
        Err(e) if e.is_cancelled() => Err(Error::StoreClosed),
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::future::Future;
    use std::str::FromStr;
    use std::task::Poll;
    use std::time::{Duration, Instant};

    use sqlx::Connection;
    use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::watch;

    use super::begin;
    use crate::store::postgres::pool::Pool;

    fn options() -> PgConnectOptions {
        let url = std::env::var("DURABUS_TEST_PG_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        PgConnectOptions::from_str(&url).unwrap()
    }

    /// A TCP proxy to PostgreSQL that holds back the server's answers while `gate` is false.
    /// Returns its port.
    async fn gated_proxy(server: (String, u16), gate: watch::Receiver<bool>) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect((server.0.as_str(), server.1)).await else {
                    continue;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = upstream.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                let mut gate = gate.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        let n = match server_read.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        if gate.wait_for(|open| *open).await.is_err()
                            || client_write.write_all(&buf[..n]).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    /// The id of the transaction a statement on `pool` runs in.
    async fn txid(pool: &sqlx::PgPool) -> i64 {
        sqlx::query_scalar("SELECT txid_current()")
            .fetch_one(pool)
            .await
            .unwrap()
    }

    /// PostgreSQL answers `BEGIN` only once the test lets it through, so the begin is dropped
    /// at a known point: `BEGIN` has run (another connection sees the session in a
    /// transaction) and its answer has not been read. With sqlx 0.9's `pool.begin()` in place
    /// of [`begin`], the statements after it run inside that transaction and this fails.
    #[tokio::test]
    async fn a_begin_dropped_before_its_answer_leaves_no_transaction_open() {
        let direct = options();
        let mut monitor = match sqlx::PgConnection::connect_with(&direct).await {
            Ok(c) => c,
            Err(e) if std::env::var("CI").is_err() => {
                eprintln!("skipped: PostgreSQL unreachable: {e}");
                return;
            }
            Err(e) => panic!("PostgreSQL unreachable in CI: {e}"),
        };
        let (gate, gate_rx) = watch::channel(true);
        let server = (direct.get_host().to_owned(), direct.get_port());
        let port = gated_proxy(server, gate_rx).await;
        // One connection, so every statement meets the one the dropped begin used; no ping
        // before handing it out (its answer would be held back too).
        let pool = Pool::new(
            PgPoolOptions::new()
                .max_connections(1)
                .test_before_acquire(false)
                .connect_with(direct.clone().host("127.0.0.1").port(port))
                .await
                .unwrap(),
        );
        for round in 0..5 {
            let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(pool.inner())
                .await
                .unwrap();
            // The connection is back in the pool (its ping on return answered) before the gate
            // closes.
            while pool.num_idle() == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            gate.send_replace(false);
            let mut pending = Box::pin(begin(&pool));
            let start = Instant::now();
            loop {
                // It cannot finish while its answer is held back.
                let finished =
                    std::future::poll_fn(|cx| Poll::Ready(pending.as_mut().poll(cx).is_ready()))
                        .await;
                assert!(
                    !finished,
                    "round {round}: the begin finished behind the gate"
                );
                let state: Option<String> =
                    sqlx::query_scalar("SELECT state FROM pg_stat_activity WHERE pid = $1")
                        .bind(pid)
                        .fetch_optional(&mut monitor)
                        .await
                        .unwrap()
                        .flatten();
                if state.as_deref() == Some("idle in transaction") {
                    break;
                }
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "round {round}: BEGIN never ran ({state:?})"
                );
            }
            drop(pending);
            gate.send_replace(true);
            // On its own, each statement is a transaction of its own; inside a transaction
            // left open, both run in that one.
            let first = txid(&pool).await;
            let second = txid(&pool).await;
            assert_ne!(
                first, second,
                "round {round}: statements ran inside the dropped begin's transaction"
            );
        }
        // A begin that is not dropped still works.
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

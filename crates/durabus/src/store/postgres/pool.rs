//! The store's connection pool, counting the bus's statements that wait for a connection.
//!
//! sqlx reports a pool's open and idle connections but not who waits for one, and waiting is
//! the first sign of an undersized pool: statements queue in the process long before
//! PostgreSQL looks busy. Every statement of the store takes its connection through
//! [`Pool::acquire`] or [`Pool::begin`], which count the callers inside them. On a pool shared
//! with the application ([`PgStore::from_pool`](super::PgStore::from_pool)) only the bus's own
//! statements are counted.

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

/// A [`PgPool`] whose acquisitions are counted while they wait. Derefs to the pool for its
/// sizes and its connect options.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    inner: PgPool,
    waiting: Arc<AtomicU64>,
}

/// One caller counted as waiting until it is dropped (also when its future is dropped).
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicU64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Pool {
    pub(super) fn new(inner: PgPool) -> Self {
        Pool {
            inner,
            waiting: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The pool itself (for the application that shares it).
    pub(super) fn inner(&self) -> &PgPool {
        &self.inner
    }

    /// A connection, counted as a waiter until it is handed out.
    pub(super) async fn acquire(&self) -> Result<PoolConnection<Postgres>, sqlx::Error> {
        let _waiting = Waiting::enter(&self.waiting);
        self.inner.acquire().await
    }

    /// A transaction, its connection counted as a waiter until it is handed out (not while
    /// `BEGIN` runs). Callers go through [`super::tx::begin`], which makes it safe to drop.
    pub(super) async fn begin(&self) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
        let conn = self.acquire().await?;
        // What `PgPool::begin` does after its own acquire (public, hidden from sqlx's docs;
        // the lock file pins the version).
        Transaction::begin(conn, None).await
    }

    /// The bus's statements waiting for a connection now.
    pub(super) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }
}

impl Deref for Pool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.inner
    }
}

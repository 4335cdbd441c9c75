//! The PostgreSQL store's options, schema names and worker identities.

use std::time::Duration;

use uuid::Uuid;

use crate::error::{Error, Result};

/// The schema used unless another is configured.
pub const DEFAULT_SCHEMA: &str = "durabus";

/// Options of the PostgreSQL store.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The PostgreSQL schema holding the bus's tables, created if missing. Independent buses
    /// can share one database under different schemas. Defaults to [`DEFAULT_SCHEMA`].
    pub schema: String,
    /// Connections in the pool. Defaults to 10.
    pub max_connections: u32,
    /// How long a claimed event stays with its worker without a heartbeat before other workers
    /// may take it over (the abandonment timeout). Defaults to 5 minutes; heartbeats renew it
    /// every third of it. The store's own connections (not a pool passed to
    /// [`PgStore::from_pool`](super::PgStore::from_pool)) also tell the server to end a session
    /// whose transaction idles, or whose client stops acknowledging data, for this long
    /// (within 2 s and 60 s: `idle_in_transaction_session_timeout`, `tcp_user_timeout`), so a
    /// worker cut off mid-transaction does not keep its events locked from the others.
    pub lease: Duration,
    /// How long a call waits for a connection (for example while PostgreSQL is down) before
    /// failing with [`Error::Unavailable`]. Defaults to 5 s.
    pub acquire_timeout: Duration,
    /// Listen for other processes' publishes with `LISTEN/NOTIFY`. Defaults to `true`; without
    /// it, workers find new events by polling.
    pub listen: bool,
    /// Create the schema if it does not exist. Defaults to `true`; with `false`, connecting to
    /// a database without durabus's tables in the schema fails with [`Error::NotADatabase`]
    /// (inspection tools never create anything). Either way, a schema an earlier version made
    /// is migrated to this version, as on SQLite.
    pub create: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        PgOptions {
            schema: DEFAULT_SCHEMA.to_owned(),
            max_connections: 10,
            lease: Duration::from_secs(300),
            acquire_timeout: Duration::from_secs(5),
            listen: true,
            create: true,
        }
    }
}

/// Checks a schema name: ASCII letters, digits and `_`, not starting with a digit, 1 to 48
/// characters (it is written into SQL and into the notification channel's name).
pub fn validate_schema(schema: &str) -> Result<()> {
    let ok = !schema.is_empty()
        && schema.len() <= 48
        && schema
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !schema.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "schema",
            format!("{schema:?} is not a schema name durabus uses"),
            "1 to 48 ASCII letters, digits or '_', not starting with a digit",
        ))
    }
}

/// This process's identity on the rows it holds: host, process id and a random part.
pub(super) fn worker_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    let tag = Uuid::now_v7().simple().to_string();
    format!("{host}:{}:{}", std::process::id(), &tag[tag.len() - 8..])
}

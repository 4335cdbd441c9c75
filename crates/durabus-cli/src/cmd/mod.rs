//! One module per subcommand.

pub mod bench;
pub mod bench_worker;
pub mod concurrency_limits;
pub mod demo;
pub mod dlq;
pub mod events;
pub mod jobs;
pub mod metrics;
pub mod operations;
pub mod pauses;
pub mod payloads;
pub mod periodic;
pub mod rate_limits;
pub mod replay;
pub mod serve;
pub mod stats;
pub mod worker;

use std::path::Path;
use std::sync::Arc;

use durabus::{BusBuilder, EventBus, PgOptions, PgStore, SqliteOptions, SqliteStore, Store};

/// What every command gets besides its database: output format and who is acting.
#[derive(Debug, Clone)]
pub struct Context {
    /// Print JSON instead of tables.
    pub json: bool,
    /// Who is acting.
    pub actor: durabus::Actor,
}

/// The OS user running the command, for the actor's name: `$USER` (or `$LOGNAME`), else the
/// name of this process's user id in `/etc/passwd`.
pub fn os_user() -> String {
    ["USER", "LOGNAME", "USERNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.trim().is_empty()))
        .or_else(passwd_name)
        .unwrap_or_else(|| "unknown".into())
}

fn passwd_name() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .to_owned();
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            (f.nth(1)? == uid).then(|| name.to_owned())
        })
}

/// The database the command works on: an SQLite file, or a PostgreSQL URL.
#[derive(Debug, Clone)]
pub struct Db {
    /// The file path or the `postgres://` URL, as text (a path that is not UTF-8 is shown
    /// with replacement characters here; [`path`](Self::path) keeps its bytes).
    pub target: String,
    /// The SQLite file, byte for byte as given.
    pub path: std::path::PathBuf,
    /// The prefix of durabus's table names in an SQLite file.
    pub table_prefix: String,
    /// The schema of durabus's tables in PostgreSQL.
    pub schema: String,
}

impl Db {
    /// Whether the target is a PostgreSQL URL.
    pub fn is_postgres(&self) -> bool {
        self.target.starts_with("postgres://") || self.target.starts_with("postgresql://")
    }

    /// The SQLite file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the database may already hold events (an SQLite file that exists; PostgreSQL
    /// always may).
    pub fn exists(&self) -> bool {
        self.is_postgres() || self.path().exists()
    }

    /// The target for messages, without a password.
    pub fn display(&self) -> String {
        if !self.is_postgres() {
            return self.target.clone();
        }
        match (self.target.find("://"), self.target.rfind('@')) {
            (Some(scheme), Some(at)) if self.target[scheme + 3..at].contains(':') => {
                let user_end = self.target[scheme + 3..at]
                    .find(':')
                    .map_or(at, |i| scheme + 3 + i);
                format!("{}:***{}", &self.target[..user_end], &self.target[at..])
            }
            _ => self.target.clone(),
        }
    }

    /// Refuses options that do not apply to this kind of database, rather than ignoring them.
    pub fn check_flags(&self) -> Result<(), String> {
        if self.target == ":memory:" || self.target.starts_with("memory:") {
            return Err(
                "--db :memory: is an in-memory database private to the process that opens it: \
                 each durabus command is a process of its own and would see an empty database; \
                 give an SQLite file path or a postgres:// URL"
                    .into(),
            );
        }
        if self.is_postgres() && self.table_prefix != durabus::store::sqlite::DEFAULT_PREFIX {
            return Err(
                "--table-prefix applies to SQLite files; for PostgreSQL, use --schema".into(),
            );
        }
        if !self.is_postgres() && self.schema != durabus::store::postgres::DEFAULT_SCHEMA {
            return Err(
                "--schema applies to PostgreSQL (--db postgres://…); for SQLite, use --table-prefix"
                    .into(),
            );
        }
        Ok(())
    }

    /// The options that select this database on the command line.
    pub fn cli_args(&self) -> String {
        let mut args = format!("--db {}", self.display());
        if self.is_postgres() && self.schema != durabus::store::postgres::DEFAULT_SCHEMA {
            args.push_str(&format!(" --schema {}", self.schema));
        }
        if !self.is_postgres() && self.table_prefix != durabus::store::sqlite::DEFAULT_PREFIX {
            args.push_str(&format!(" --table-prefix {}", self.table_prefix));
        }
        args
    }

    fn sqlite_options(&self) -> SqliteOptions {
        SqliteOptions {
            table_prefix: self.table_prefix.clone(),
            ..SqliteOptions::default()
        }
    }

    /// PostgreSQL store options for this database.
    pub fn pg_options(&self) -> PgOptions {
        PgOptions {
            schema: self.schema.clone(),
            ..PgOptions::default()
        }
    }

    /// A bus builder on this database (created if missing).
    pub fn builder(&self) -> BusBuilder {
        if self.is_postgres() {
            EventBus::builder().postgres_with(&self.target, self.pg_options())
        } else {
            EventBus::builder().sqlite_with(self.path(), self.sqlite_options())
        }
    }
}

/// Opens an existing database for inspection; never creates one.
pub async fn open_existing(db: &Db) -> anyhow::Result<Arc<dyn Store>> {
    if db.is_postgres() {
        let options = PgOptions {
            create: false,
            listen: false,
            max_connections: 2,
            ..db.pg_options()
        };
        return Ok(Arc::new(PgStore::connect(&db.target, options).await?));
    }
    let options = SqliteOptions {
        create: false,
        ..db.sqlite_options()
    };
    Ok(Arc::new(SqliteStore::open(db.path(), options).await?))
}

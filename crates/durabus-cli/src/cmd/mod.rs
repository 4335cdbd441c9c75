//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod dlq;
pub mod events;
pub mod stats;

use std::path::PathBuf;
use std::sync::Arc;

use durabus::{SqliteOptions, SqliteStore, Store};

/// The database the command works on.
#[derive(Debug, Clone)]
pub struct Db {
    /// The file.
    pub path: PathBuf,
    /// The prefix of durabus's table names in it.
    pub table_prefix: String,
}

impl Db {
    /// Store options for this database.
    pub fn options(&self) -> SqliteOptions {
        SqliteOptions {
            table_prefix: self.table_prefix.clone(),
            ..SqliteOptions::default()
        }
    }
}

/// Opens an existing database for inspection; never creates one.
pub async fn open_existing(db: &Db) -> anyhow::Result<Arc<dyn Store>> {
    let options = SqliteOptions {
        create: false,
        ..db.options()
    };
    Ok(Arc::new(SqliteStore::open(&db.path, options).await?))
}

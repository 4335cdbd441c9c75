//! One module per subcommand.

pub mod bench;
pub mod demo;
pub mod dlq;
pub mod events;
pub mod stats;

use std::path::Path;
use std::sync::Arc;

use durabus::{SqliteOptions, SqliteStore, Store};

/// Opens an existing database for inspection; never creates one.
pub async fn open_existing(db: &Path) -> anyhow::Result<Arc<dyn Store>> {
    let options = SqliteOptions {
        create: false,
        ..SqliteOptions::default()
    };
    Ok(Arc::new(SqliteStore::open(db, options).await?))
}

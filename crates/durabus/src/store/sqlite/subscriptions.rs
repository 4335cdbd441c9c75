//! Subscription rows on SQLite.

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::SqliteStore;
use super::op::WriteOp;
use super::sql::Sql;
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::{SubscriptionRow, SubscriptionStore};

struct Save(SubscriptionRow);

impl WriteOp for Save {
    type Reply = ();

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<()> {
        let row = &self.0;
        if let Some(name) = &row.name {
            conn.execute(&sql.subscription_free_name, params![name, row.id])?;
        }
        conn.execute(
            &sql.subscription_save,
            params![row.id, row.name, row.event_type, row.created_at.as_millis()],
        )?;
        Ok(())
    }
}

struct Delete(String);

impl WriteOp for Delete {
    type Reply = bool;

    fn apply(&self, conn: &Connection, sql: &Sql, _now: Timestamp) -> Result<bool> {
        Ok(conn.execute(&sql.subscription_delete, [&self.0])? == 1)
    }
}

#[async_trait]
impl SubscriptionStore for SqliteStore {
    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()> {
        let now = row.created_at;
        self.write(Save(row), now).await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.write(Delete(id.to_owned()), Timestamp(0)).await
    }

    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>> {
        let sql = self.sql.clone();
        self.read(move |c| {
            c.prepare_cached(&sql.subscriptions)?
                .query_map([], |r| {
                    Ok(SubscriptionRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        event_type: r.get(2)?,
                        created_at: Timestamp(r.get(3)?),
                    })
                })?
                .collect()
        })
        .await
    }
}

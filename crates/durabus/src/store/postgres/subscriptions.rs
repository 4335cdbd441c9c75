//! Subscription rows on PostgreSQL.

use async_trait::async_trait;
use sqlx::Row;

use super::{PgStore, q, tx};
use crate::clock::Timestamp;
use crate::error::Result;
use crate::store::{SubscriptionRow, SubscriptionStore};

#[async_trait]
impl SubscriptionStore for PgStore {
    async fn save_subscription(&self, row: SubscriptionRow) -> Result<()> {
        self.noted(async {
            self.check()?;
            let mut tx = tx::begin(&self.pool).await?;
            if let Some(name) = &row.name {
                // Processes starting together with one subscription name: one at a time.
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                    .bind(format!("durabus:{}:subscription:{name}", self.schema))
                    .execute(&mut *tx)
                    .await?;
                q(&self.sql.subscription_free_name)
                    .bind(name)
                    .bind(&row.id)
                    .execute(&mut *tx)
                    .await?;
            }
            q(&self.sql.subscription_save)
                .bind(&row.id)
                .bind(&row.name)
                .bind(&row.event_type)
                .bind(row.created_at.as_millis())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    async fn delete_subscription(&self, id: &str) -> Result<bool> {
        self.noted(async {
            self.check()?;
            Ok(q(&self.sql.subscription_delete)
                .bind(id)
                .execute(&mut *self.pool.acquire().await?)
                .await?
                .rows_affected()
                == 1)
        })
        .await
    }

    async fn subscriptions(&self) -> Result<Vec<SubscriptionRow>> {
        self.noted(async {
            self.check()?;
            q(&self.sql.subscriptions)
                .fetch_all(&mut *self.pool.acquire().await?)
                .await?
                .iter()
                .map(|r| {
                    Ok(SubscriptionRow {
                        id: r.try_get(0)?,
                        name: r.try_get(1)?,
                        event_type: r.try_get(2)?,
                        created_at: Timestamp(r.try_get(3)?),
                    })
                })
                .collect()
        })
        .await
    }
}

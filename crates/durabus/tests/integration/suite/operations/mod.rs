//! Bulk dead-letter operations (a frozen selection, chunks, resume, cancel) and scheduled jobs
//! (once per tick, skipped while running).

mod bulk;
mod store_calls;
pub use bulk::*;
pub use store_calls::*;

use std::sync::Arc;

use std::sync::atomic::AtomicBool;

use std::time::Duration;

use durabus::{
    Action, BulkRequest, DeadLetterFilter, DeadLetterStatus, ErrorKind, JobStart, OperationStatus,
    RunOptions,
};

use super::dead_letters::{ann, paying_bus};

use crate::support::*;

fn pay(status: Option<DeadLetterStatus>) -> DeadLetterFilter {
    DeadLetterFilter {
        event_type: Some("pay.*".into()),
        status: status.into_iter().collect(),
        ..DeadLetterFilter::default()
    }
}

/// One chunk of bulk operation `op` as runner `holder` would write it, by the store's calls
/// alone: the next `n` records of its selection, acted on with its progress in one
/// transaction. A runner that does this and dies holds the operation until its lease runs out.
async fn chunk(
    store: &Arc<dyn durabus::Store>,
    op_id: &str,
    holder: &str,
    n: usize,
    now: durabus::Timestamp,
) -> durabus::Result<durabus::ActReport> {
    let op = store.operation_get(op_id).await?.expect("the operation");
    let params: durabus::dlq::BulkParams = serde_json::from_value(op.params.clone()).unwrap();
    let rows = store
        .dlq_select(&params.filter, op.cursor, op.bound, n)
        .await?;
    let finished = rows.len() < n;
    let cursor = if finished {
        op.bound
    } else {
        rows.last().map_or(op.cursor, |r| r.1)
    };
    let batch = durabus::ActBatch {
        ids: rows.iter().map(|r| r.0).collect(),
        action: params.action,
        actor: op.actor.clone(),
        still_matching: Some(params.filter),
        read_back: false,
        chunk: Some(durabus::ChunkWrite {
            operation: op.id.clone(),
            holder: holder.into(),
            lease: Duration::from_secs(30),
            advance: durabus::operation::Advance {
                cursor,
                finish: finished.then_some(OperationStatus::Completed),
                expect_cursor: Some((op.cursor, op.cursor_key.clone())),
                ..Default::default()
            },
        }),
    };
    store.dlq_act(batch, now).await
}

fn options(holder: &str, chunk: usize) -> RunOptions {
    RunOptions {
        chunk: Some(chunk),
        holder: holder.into(),
        ..RunOptions::default()
    }
}

//! Bulk dead-letter actions as a kind of durable operation. Each chunk reads the next records
//! of the frozen selection (its filter, after the cursor, up to the bound fixed at submit),
//! then acts on them and writes the operation's progress in one transaction; the store checks
//! each record against the selection again as it locks it, so a record that changed since the
//! read is passed over rather than acted on.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::filter::DeadLetterFilter;
use super::lifecycle::Action;
use crate::error::{Error, Result};
use crate::operation::{
    Advance, Kind, Operation, OperationKind, OperationStatus, RunContext, Work,
};
use crate::store::{ActBatch, ChunkWrite};

/// The parameters of a bulk action, as its operation stores them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkParams {
    /// The selection.
    #[serde(default)]
    pub filter: DeadLetterFilter,
    /// The action.
    pub action: Action,
    /// Whether an empty filter (everything) was meant.
    #[serde(default)]
    pub all: bool,
}

impl BulkParams {
    /// The operation kind that applies `action`.
    pub fn kind_of(action: &Action) -> OperationKind {
        match action {
            Action::Retry => OperationKind::DeadLetterRetry,
            Action::Resolve { .. } => OperationKind::DeadLetterResolve,
            Action::Abandon { .. } => OperationKind::DeadLetterAbandon,
            Action::Purge => OperationKind::DeadLetterPurge,
        }
    }
}

/// Bulk dead-letter actions (retry, resolve, abandon, purge) as a kind of operation.
#[derive(Debug, Clone, Copy, Default)]
pub struct BulkKind;

impl Kind for BulkKind {
    fn kinds(&self) -> &'static [OperationKind] {
        &[
            OperationKind::DeadLetterRetry,
            OperationKind::DeadLetterResolve,
            OperationKind::DeadLetterAbandon,
            OperationKind::DeadLetterPurge,
        ]
    }

    fn work(&self, op: &Operation, ctx: RunContext) -> Result<Box<dyn Work>> {
        let params: BulkParams = serde_json::from_value(op.params.clone())
            .map_err(|e| Error::corrupt(format!("the parameters of operation {}", op.id), e))?;
        Ok(Box::new(Bulk { ctx, params }))
    }
}

/// One run of a bulk action.
struct Bulk {
    ctx: RunContext,
    params: BulkParams,
}

#[async_trait]
impl Work for Bulk {
    async fn step(&mut self, op: &Operation) -> Result<Operation> {
        // A cancel asked for since the last chunk stops the operation before this one.
        let op = match self.ctx.store.operation_get(&op.id).await? {
            Some(fresh) if fresh.cancel_requested => return self.cancel(&fresh).await,
            Some(fresh) => fresh,
            None => op.clone(),
        };
        let limit = self.ctx.chunk();
        let rows = self
            .ctx
            .store
            .dlq_select(&self.params.filter, op.cursor, op.bound, limit)
            .await?;
        let finished = rows.len() < limit;
        let cursor = match rows.last() {
            _ if finished => op.bound,
            Some((_, seq)) => *seq,
            None => op.cursor,
        };
        let batch = ActBatch {
            ids: rows.into_iter().map(|(id, _)| id).collect(),
            action: self.params.action.clone(),
            actor: op.actor.clone(),
            still_matching: Some(self.params.filter.clone()),
            read_back: false,
            chunk: Some(ChunkWrite {
                operation: op.id.clone(),
                holder: self.ctx.options.holder.clone(),
                lease: self.ctx.options.lease,
                advance: Advance {
                    cursor,
                    finish: finished.then_some(OperationStatus::Completed),
                    expect_cursor: Some((op.cursor, op.cursor_key.clone())),
                    ..Advance::default()
                },
            }),
        };
        let rows = batch.ids.len();
        let report = self
            .ctx
            .paced(rows, self.ctx.store.dlq_act(batch, self.ctx.now()))
            .await?;
        if let (Some(t), Some(action)) = (&self.ctx.telemetry, op.kind.dead_letter_action()) {
            t.dead_letter_action(action, op.actor.kind.as_str(), report.applied);
        }
        report
            .operation
            .ok_or_else(|| Error::Internal("a bulk chunk was written without its progress".into()))
    }

    async fn cancel(&mut self, op: &Operation) -> Result<Operation> {
        self.ctx.finish_cancelled(op).await
    }

    async fn fail(&mut self, op: &Operation, error: &Error) {
        self.ctx.fail_plainly(op, error).await;
    }
}

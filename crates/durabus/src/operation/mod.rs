//! Durable operations: work over many rows (bulk dead-letter actions, and replays) that is
//! submitted, then run in chunks that survive a crash and resume, can be cancelled between
//! chunks, and records who started it and what it did.
//!
//! - [`Operation`], [`OperationKind`], [`OperationStatus`]: the data, as stored.
//! - [`state`]: who may take an operation, what a cancel does, what a runner does next (pure).
//! - [`Runner`]: claims an operation and drives its chunks; it knows nothing of kinds. Each kind
//!   implements [`Kind`] (its chunks are a [`Work`]) in the module that owns its data: bulk
//!   dead-letter actions in [`crate::dlq`], replays in [`crate::replay`].
//! - [`Operations`]: the service operators use (list, cancel, run, resume), with every kind of
//!   this build registered.
//!
//! The selection is frozen at submit: the filter plus an upper bound (`bound`, the highest
//! position that existed then), so rows that arrive later are never swept in. A chunk and the
//! operation's progress (`cursor`, counts) are written in one transaction: a chunk is done
//! exactly once, however often the process running it dies.

mod kind;
mod pace;
mod runner;
mod service;
pub mod state;

pub use kind::{OPERATION_KINDS, OperationKind};
pub use pace::{Pace, PaceConfig};
pub use runner::{Kind, Kinds, RunContext, RunOptions, Runner, Work, default_pace, passing};
pub use service::Operations;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

/// Where an operation is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationStatus {
    /// Submitted, not started yet.
    Pending,
    /// Running (or its process died and it waits to be resumed).
    Running,
    /// Every row of the selection was processed.
    Completed,
    /// Stopped by an error it could not get past.
    Failed,
    /// Cancelled (between chunks).
    Cancelled,
}

impl OperationStatus {
    /// Every status.
    pub const ALL: [OperationStatus; 5] = [
        OperationStatus::Pending,
        OperationStatus::Running,
        OperationStatus::Completed,
        OperationStatus::Failed,
        OperationStatus::Cancelled,
    ];

    /// The name stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationStatus::Pending => "pending",
            OperationStatus::Running => "running",
            OperationStatus::Completed => "completed",
            OperationStatus::Failed => "failed",
            OperationStatus::Cancelled => "cancelled",
        }
    }

    /// Whether the operation has finished (completed, failed or cancelled).
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            OperationStatus::Completed | OperationStatus::Failed | OperationStatus::Cancelled
        )
    }
}

impl fmt::Display for OperationStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for OperationStatus {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        OperationStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "status",
                    format!("{s:?} is not an operation status"),
                    "pending, running, completed, failed or cancelled",
                )
            })
    }
}

/// An operation as stored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Operation {
    /// Its id (a UUID).
    pub id: String,
    /// What it does.
    pub kind: OperationKind,
    /// Where it is.
    pub status: OperationStatus,
    /// What it was given (the filter, the action's note, …), as JSON.
    pub params: serde_json::Value,
    /// The highest position in the selection (fixed at submit).
    pub bound: i64,
    /// The last position processed.
    pub cursor: i64,
    /// The rest of that position where the store needs more than a number (a replay on
    /// PostgreSQL walks by creation time, then id: this is the id). Empty otherwise.
    pub cursor_key: String,
    /// Rows selected at submit.
    pub total: u64,
    /// Rows acted on.
    pub processed: u64,
    /// Rows passed over (their state no longer allowed the action, or they were gone).
    pub skipped: u64,
    /// Rows that failed.
    pub errors: u64,
    /// Who submitted it.
    pub actor: Actor,
    /// Whether a cancel was asked for (it stops at the next chunk).
    pub cancel_requested: bool,
    /// The runner that holds it (a running operation), if any.
    pub holder: Option<String>,
    /// When the holder's lease runs out: another runner may take it over from then.
    pub lease_expires_at: Option<Timestamp>,
    /// When it was submitted.
    pub created_at: Timestamp,
    /// When it started.
    pub started_at: Option<Timestamp>,
    /// When it finished.
    pub finished_at: Option<Timestamp>,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Why it failed, if it did.
    pub last_error: Option<String>,
    /// What it has done beyond the counts (a replay: events per type, handler failures), as
    /// JSON.
    pub summary: Option<serde_json::Value>,
}

impl Operation {
    /// How long it ran (or has been running, until `now`), in milliseconds.
    pub fn duration_ms(&self, now: Timestamp) -> i64 {
        match self.started_at {
            Some(start) => self.finished_at.unwrap_or(now).as_millis() - start.as_millis(),
            None => 0,
        }
    }
}

/// An operation to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOperation {
    /// Its id.
    pub id: String,
    /// What it does.
    pub kind: OperationKind,
    /// Its parameters.
    pub params: serde_json::Value,
    /// The upper bound of the selection.
    pub bound: i64,
    /// Rows selected.
    pub total: u64,
    /// Who submits it.
    pub actor: Actor,
}

/// What one chunk of an operation did, written in one transaction by
/// [`OperationStore::operation_advance`](crate::store::OperationStore::operation_advance).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Advance {
    /// The new position.
    pub cursor: i64,
    /// The rest of the new position (see [`Operation::cursor_key`]).
    pub cursor_key: String,
    /// Rows acted on in this chunk.
    pub processed: u64,
    /// Rows passed over.
    pub skipped: u64,
    /// Rows that failed.
    pub errors: u64,
    /// Events to publish in the same transaction (stored `pending`, the dispatcher woken).
    pub events: Vec<crate::event::NewEvent>,
    /// The new summary (`None`: keep it).
    pub summary: Option<serde_json::Value>,
    /// Ends the operation with this status (`completed`, `failed` or `cancelled`).
    pub finish: Option<OperationStatus>,
    /// Why it failed (with `finish: failed`).
    pub error: Option<String>,
    /// Writes only if the operation's cursor is still this one (number and key): the chunk
    /// was read after it, so a chunk written twice (two runners of one holder) is refused.
    /// `None`: any cursor.
    pub expect_cursor: Option<(i64, String)>,
}

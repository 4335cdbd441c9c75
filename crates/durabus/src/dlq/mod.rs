//! The dead-letter queue, for operators: list and inspect records, see failures grouped by
//! cause, act on one record or (as a durable operation) on everything a filter selects. Every
//! function here works on a store alone, so the CLI, the admin API and applications call the
//! same code. The records' rules live in [`crate::dead_letter`].

mod inspector;
mod service;

pub use inspector::{DEFAULT_LIMIT, DlqInspector, Page};
pub use service::{
    BulkRequest, DeadLetterPage, DeadLetterSummaryPage, DeadLetters, Preview, SAMPLES,
};

//! The contract suite: every test here runs against every store.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

pub mod breaker;
pub mod dlq;
pub mod history;
pub mod lifecycle;
pub mod publish;
pub mod retry;
pub mod store;

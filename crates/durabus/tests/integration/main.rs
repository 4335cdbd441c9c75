//! The library's integration tests, in one binary (one test binary per crate links the library
//! and its database drivers once): the contract suite run against every store, the behaviour
//! specific to each store, the outbox, logs, the deployment files and the layer check. Each file
//! is a module; `suite/` holds the contract suite and `support/` the harness every module uses.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod backpressure;
mod contract;
mod deploy;
mod layers;
mod nul_text;
mod otel;
mod outbox;
mod pg_plans;
mod postgres;
mod retry_log;
mod spans;
mod sqlite;
mod sqlite_wal;
mod suite;
mod support;
mod testing;

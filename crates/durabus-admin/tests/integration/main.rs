//! The admin API's integration tests, in one binary: every route through `oneshot` on SQLite
//! and PostgreSQL (`api`), hostile input (`hostile`), and the harness they share (`support`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[macro_use]
mod support;

mod api;
mod hostile;

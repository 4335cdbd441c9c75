//! The CLI's integration tests, in one binary: the `durabus` binary run as a user runs it
//! (`cli`), hostile arguments and files (`hostile`), `durabus serve` (`serve`), and several
//! `bench-worker` processes on one PostgreSQL database (`workers`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod cli;
mod hostile;
mod ordered;
mod serve;
mod workers;

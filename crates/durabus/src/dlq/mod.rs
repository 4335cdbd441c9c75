//! Dead letters: the record kept for every event whose delivery failed every allowed attempt,
//! its lifecycle, failure groups, and the operator's queue over them.
//!
//! - **Records** ([`DeadLetter`], [`DeadLetterSummary`]) and **deaths** ([`Death`],
//!   [`plan_death`]): what the dispatcher knows when an event dies and the record write it
//!   plans, in the transaction that moves the event to `dlq`.
//! - **Lifecycle** ([`apply`]): the operator's actions and what each changes, a pure function
//!   every store calls inside its transaction.
//! - **Groups** ([`fingerprint`], [`DeadLetterGroup`]): records with one normalised failure.
//! - **Filters** ([`DeadLetterFilter`], [`Keyset`]): which records a listing or a bulk action
//!   covers.
//! - **Auto retry and retention** ([`rounds`]): the rounds of the scheduled jobs, written once
//!   above the store.
//! - **Bulk actions** ([`BulkKind`]): a kind of durable operation; each chunk reads the next
//!   records of its frozen selection and acts on them with its progress in one transaction.
//! - **The spec's view** ([`DlqInspector`]: dead *events*) and **the operator's**
//!   ([`DeadLetters`]: records, groups, actions, bulk actions as durable operations). Both work
//!   on a store alone, so the CLI, the admin API and applications call the same code.
//!
//! ```text
//!              dies                retry (auto or manual)
//!   (event) ─────────▶ pending ───────────────────────────▶ retrying
//!                       │  ▲  ◀──── fails every attempt ────┘   │
//!               abandon │  │ retry                              │ delivered
//!                       ▼  │                                    ▼
//!                     abandoned ───────── resolve ─────────▶ resolved
//!   pending ── resolve (note) ──▶ resolved
//! ```
//!
//! Auto-retry: [`DeadLetterPolicy::auto_retry`] (1 h, 6 h, 24 h by default): the first auto
//! retry is due that long after the record was created, each later one that long after the
//! previous retry; after the last, retries are manual only. Abandoning stops auto-retry.

mod bulk;
mod death;
mod filter;
pub mod fingerprint;
mod groups;
mod inspector;
mod lifecycle;
mod record;
pub mod rounds;
mod service;

pub use crate::actor::{AUTO_RETRY, Actor, ActorKind};
pub use bulk::{BulkKind, BulkParams};
pub use death::{
    Death, DeathWrite, Existing, SYSTEM_DEAD_LETTER, SYSTEM_FAILURE_GROUP_NEW, plan_death,
    split_error,
};
pub use filter::{DeadLetterFilter, Head, Keyset, MAX_PAGE};
pub use groups::{
    DeadLetterGroup, GROUP_TYPES_LISTED, GroupDelta, GroupTrend, NEW_WITHIN, TREND_HOURS,
    group_delta, sum_deltas, trends,
};
pub use inspector::{DEFAULT_LIMIT, DlqInspector, Page};
pub use lifecycle::{Action, Change, DeadLetterPolicy, MAX_NOTE, State, apply};
pub use record::{DeadLetter, DeadLetterStatus, DeadLetterSummary, ErrorRound};
pub use service::{
    BulkRequest, DeadLetterPage, DeadLetterSummaryPage, DeadLetters, Preview, SAMPLES,
};

#[cfg(test)]
mod tests;

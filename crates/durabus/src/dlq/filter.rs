//! Which dead letters a listing or a bulk operation covers, and keyset pages.

use serde::{Deserialize, Serialize};

use super::record::DeadLetterStatus;
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;

/// Which dead letters a listing or a bulk operation covers. Every field narrows; an empty
/// filter is everything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeadLetterFilter {
    /// Only these statuses.
    pub status: Vec<DeadLetterStatus>,
    /// Only these event types: exact, or globs with `*`.
    pub event_type: Option<String>,
    /// Only failures of this subscription (its key).
    pub subscription: Option<String>,
    /// Only this failure group.
    pub group: Option<String>,
    /// Only records created at or after this time.
    pub created_from: Option<Timestamp>,
    /// Only records created before this time.
    pub created_before: Option<Timestamp>,
}

impl DeadLetterFilter {
    /// Whether the filter selects everything.
    pub fn is_empty(&self) -> bool {
        *self == DeadLetterFilter::default()
    }

    /// Checks the filter: a pattern that is not a valid glob, a group that is not a
    /// fingerprint, a subscription or group holding a NUL character (no stored name holds
    /// one). (A time range that ends before it starts selects nothing.)
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = &self.event_type {
            crate::pattern::Pattern::new(t)?;
        }
        if let Some(s) = &self.subscription {
            crate::text::check_no_nul("subscription", s, "a subscription's name or id")?;
        }
        if self
            .group
            .as_ref()
            .is_some_and(|g| g.is_empty() || g.chars().count() > 64 || g.contains('\0'))
        {
            return Err(Error::invalid(
                "group",
                "not a failure group's fingerprint",
                "a fingerprint of 1 to 64 characters, as dlq groups lists them",
            ));
        }
        Ok(())
    }
}

/// What a filter looks at of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head<'a> {
    /// Its status.
    pub status: DeadLetterStatus,
    /// Its event's type.
    pub event_type: &'a str,
    /// The subscription that failed last.
    pub subscription: Option<&'a str>,
    /// Its failure group.
    pub fingerprint: &'a str,
    /// When it was created.
    pub created_at: Timestamp,
}

impl DeadLetterFilter {
    /// Whether a record with `head` is in the selection (the stores evaluate the same in SQL
    /// to list; a bulk action checks it again, with this, on each record it locks).
    pub fn matches(&self, head: &Head<'_>) -> bool {
        (self.status.is_empty() || self.status.contains(&head.status))
            && self.event_type.as_ref().is_none_or(|t| {
                crate::pattern::Pattern::new(t).is_ok_and(|p| p.matches(head.event_type))
            })
            && self
                .subscription
                .as_ref()
                .is_none_or(|s| head.subscription == Some(s.as_str()))
            && self.group.as_ref().is_none_or(|g| g == head.fingerprint)
            && self.created_from.is_none_or(|f| head.created_at >= f)
            && self.created_before.is_none_or(|b| head.created_at < b)
    }

    /// Refuses record `id` with [`Error::Conflict`] when `head` no longer matches: a record
    /// that changed since a selection found it is passed over, not acted on.
    pub fn check(&self, id: EventId, head: &Head<'_>) -> Result<()> {
        if self.matches(head) {
            return Ok(());
        }
        Err(Error::Conflict {
            what: format!("dead letter {id}"),
            status: head.status.as_str().to_owned(),
            message: format!(
                "dead letter {id} is {} and no longer matches the selection it was found by",
                head.status
            ),
        })
    }
}

/// A page of a keyset listing: records with `seq` below `before` (newest first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keyset {
    /// Start after this position (exclusive): the `seq` of the last record of the previous
    /// page. `None`: the first page.
    pub before: Option<i64>,
    /// Most records to return. Defaults to 50; at most 1000.
    pub limit: u32,
}

/// The most records one page may hold.
pub const MAX_PAGE: u32 = 1000;

impl Default for Keyset {
    fn default() -> Self {
        Keyset {
            before: None,
            limit: 50,
        }
    }
}

impl Keyset {
    /// Refuses a page over [`MAX_PAGE`].
    pub fn validate(&self) -> Result<()> {
        if self.limit > MAX_PAGE {
            return Err(Error::invalid(
                "limit",
                format!("{} records in a page", self.limit),
                format!("1 to {MAX_PAGE}"),
            ));
        }
        Ok(())
    }
}

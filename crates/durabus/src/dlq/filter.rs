//! Which dead letters a listing or a bulk operation covers, and keyset pages.

use serde::{Deserialize, Serialize};

use super::record::DeadLetterStatus;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

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

    /// Checks the filter: a pattern that is not a valid glob, an empty time range.
    pub fn validate(&self) -> Result<()> {
        if let Some(t) = &self.event_type {
            crate::pattern::Pattern::new(t)?;
        }
        if let (Some(from), Some(before)) = (self.created_from, self.created_before)
            && from >= before
        {
            return Err(Error::InvalidConfig(format!(
                "empty time range: from ({from}) must be before to ({before})"
            )));
        }
        if self
            .group
            .as_ref()
            .is_some_and(|g| g.is_empty() || g.len() > 64)
        {
            return Err(Error::InvalidConfig(
                "a group is a fingerprint of 1 to 64 characters".into(),
            ));
        }
        Ok(())
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
            return Err(Error::InvalidConfig(format!(
                "a page holds at most {MAX_PAGE} records, not {}",
                self.limit
            )));
        }
        Ok(())
    }
}

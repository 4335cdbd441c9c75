//! Failure groups: dead letters with one fingerprint, counted as records change.

use serde::Serialize;

use super::record::DeadLetterStatus;
use crate::clock::Timestamp;

/// A failure group: dead letters with one fingerprint.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroup {
    /// The fingerprint.
    pub fingerprint: String,
    /// The subscription that failed.
    pub subscription: Option<String>,
    /// The normalised message.
    pub signature: String,
    /// One message as it was written.
    pub sample_error: String,
    /// Records in the group, any status.
    pub count: u64,
    /// Of those, pending or retrying.
    pub open: u64,
    /// When the first of them died.
    pub first_seen: Timestamp,
    /// When the last of them died.
    pub last_seen: Timestamp,
    /// The event types involved (at most 20 listed).
    pub event_types: Vec<String>,
}

/// The most event types a group lists.
pub const GROUP_TYPES_LISTED: usize = 20;

/// A change to a failure group's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDelta {
    /// The group.
    pub fingerprint: String,
    /// Added to its record count.
    pub count: i64,
    /// Added to its open count.
    pub open: i64,
}

fn open(status: Option<DeadLetterStatus>) -> i64 {
    i64::from(status.is_some_and(DeadLetterStatus::is_open))
}

/// How a record's move from `before` to `after` (`None`: no record) changes its group.
pub fn group_delta(
    fingerprint: &str,
    before: Option<DeadLetterStatus>,
    after: Option<DeadLetterStatus>,
) -> GroupDelta {
    GroupDelta {
        fingerprint: fingerprint.to_owned(),
        count: i64::from(after.is_some()) - i64::from(before.is_some()),
        open: open(after) - open(before),
    }
}

/// Sums group changes by group, dropping the ones that change nothing: what a store writes
/// once per group after acting on many records.
pub fn sum_deltas(deltas: impl IntoIterator<Item = GroupDelta>) -> Vec<GroupDelta> {
    let mut out: Vec<GroupDelta> = Vec::new();
    for d in deltas {
        match out.iter_mut().find(|o| o.fingerprint == d.fingerprint) {
            Some(o) => {
                o.count += d.count;
                o.open += d.open;
            }
            None => out.push(d),
        }
    }
    out.retain(|d| d.count != 0 || d.open != 0);
    out
}

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

/// The hours of a group's trend ([`GroupTrend::hourly`]).
pub const TREND_HOURS: usize = 24;

/// How recent a group's first dead letter must be for [`GroupTrend::new`].
pub const NEW_WITHIN: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

const HOUR_MS: i64 = 3_600_000;

/// A failure group with its recent history, as the dashboard shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupTrend {
    /// The group.
    #[serde(flatten)]
    pub group: DeadLetterGroup,
    /// Whether its first dead letter is less than a day old (an error not seen before).
    pub new: bool,
    /// Its dead letters per hour over the last [`TREND_HOURS`] hours, oldest first, by when
    /// each record was created; the last hour ends now.
    pub hourly: Vec<u64>,
}

/// Where a trend's hours start: [`TREND_HOURS`] hours before `now`, and how long one is.
pub fn trend_window(now: Timestamp) -> (Timestamp, i64) {
    (
        Timestamp(now.as_millis() - TREND_HOURS as i64 * HOUR_MS),
        HOUR_MS,
    )
}

/// Whether a group was active within the trend's window starting at `since` (the others' hours
/// are all zero and need no query).
pub fn active_since(group: &DeadLetterGroup, since: Timestamp) -> bool {
    group.last_seen >= since
}

/// `groups` with their trends from the store's `buckets` (`(fingerprint, hour, count)`, hour 0
/// starting at the window's start), read at `now`.
pub fn trends(
    groups: Vec<DeadLetterGroup>,
    buckets: &[(String, i64, u64)],
    now: Timestamp,
) -> Vec<GroupTrend> {
    let new_since = now.as_millis() - i64::try_from(NEW_WITHIN.as_millis()).unwrap_or(i64::MAX);
    groups
        .into_iter()
        .map(|group| {
            let mut hourly = vec![0u64; TREND_HOURS];
            for (_, hour, n) in buckets.iter().filter(|b| b.0 == group.fingerprint) {
                // A record created at `now` exactly falls past the end: it is this hour's.
                let i = usize::try_from(*hour).unwrap_or(0).min(TREND_HOURS - 1);
                hourly[i] += n;
            }
            GroupTrend {
                new: group.first_seen.as_millis() >= new_since,
                hourly,
                group,
            }
        })
        .collect()
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

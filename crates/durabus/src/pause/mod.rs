//! Pausing deliveries: one subscription, every subscription whose name matches a pattern, or
//! the whole bus; until an operator resumes it, or until a time. Durable and cluster-wide: a
//! pause is a row in the store, every process of the bus reads the active ones (its own at
//! once, the others' within [`BusConfig::pause_refresh`](crate::BusConfig::pause_refresh)),
//! and every pause and its end are on record with actor and reason.
//!
//! What a pause does:
//! - A paused subscription's handler is not run. An event it has not handled yet is *parked*:
//!   it stays `pending` (publishing goes on, the backlog is visible) with a due time no claim
//!   reaches, the pause's own mark ([`parked_at`]), until the pause ends; its other
//!   subscriptions' handlers run as usual. No attempt is counted and no breaker hears of it.
//! - When the pause ends (resumed, or its `until` passes) its parked events are due at once,
//!   in one transaction with the end. An event parked by a pause that ended meanwhile (a race
//!   with a delivery) is woken by the next refresh of any process.
//! - A pause of the whole bus stops every process from claiming; an event a process holds
//!   already is parked like a paused subscription's. `publish` stores and returns without
//!   waiting for a delivery.
//! - Handlers already running finish.
//!
//! The rules here are pure; the stores keep the rows and park and wake events.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::actor::Actor;
use crate::clock::Timestamp;
use crate::error::{Error, Result};

mod service;

pub use service::Pauses;

/// The longest reason a pause or a resume may carry, in characters.
pub const REASON_MAX_CHARS: usize = 1000;

/// The longest subscription name or name pattern a pause may name, in characters.
pub const TARGET_MAX_CHARS: usize = 255;

/// The longest a pause may last, in seconds (a year): a pause meant to last longer has no
/// `until`.
pub const MAX_PAUSE_SECONDS: u64 = 366 * 24 * 3600;

/// The actor name an expired pause records as having ended it (kind `auto`).
pub const EXPIRY_ACTOR: &str = "pause-expiry";

/// The due time of events parked by pause 0: parked events are due at `PARK_BASE + pause id`
/// (milliseconds, about the year 5138), a time no claim reaches, and one index seek finds the
/// events of one pause.
pub const PARK_BASE: i64 = 100_000_000_000_000;

/// The due time of an event parked by pause `id`.
pub fn parked_at(id: i64) -> Timestamp {
    Timestamp(PARK_BASE.saturating_add(id))
}

/// The pause that parked an event due at `due`, if `due` is a parking mark.
pub fn parked_by(due: Timestamp) -> Option<i64> {
    (due.0 >= PARK_BASE).then(|| due.0 - PARK_BASE)
}

/// What a pause covers.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "target", rename_all = "snake_case")]
pub enum PauseScope {
    /// Every subscription: no process claims events.
    Bus,
    /// The subscription with this name (or, for an unnamed one, this id).
    Subscription(String),
    /// Every subscription whose name matches this pattern (`*` matches any run of characters,
    /// so `payments-*` covers `payments-eu` and `payments-us`).
    Matching(String),
}

impl PauseScope {
    /// The kind as stored and shown: `bus`, `subscription` or `matching`.
    pub fn kind(&self) -> &'static str {
        match self {
            PauseScope::Bus => "bus",
            PauseScope::Subscription(_) => "subscription",
            PauseScope::Matching(_) => "matching",
        }
    }

    /// The subscription or pattern (`""` for the bus).
    pub fn target(&self) -> &str {
        match self {
            PauseScope::Bus => "",
            PauseScope::Subscription(t) | PauseScope::Matching(t) => t,
        }
    }

    /// The scope stored as `kind` and `target`, if `kind` is one.
    pub fn parse(kind: &str, target: &str) -> Option<PauseScope> {
        match kind {
            "bus" => Some(PauseScope::Bus),
            "subscription" => Some(PauseScope::Subscription(target.to_owned())),
            "matching" => Some(PauseScope::Matching(target.to_owned())),
            _ => None,
        }
    }

    /// Whether it covers the subscription whose delivery key (its name, or its id) is `key`.
    pub fn covers(&self, key: &str) -> bool {
        match self {
            PauseScope::Bus => true,
            PauseScope::Subscription(name) => name == key,
            PauseScope::Matching(pattern) => glob(pattern, key),
        }
    }

    /// Refuses an empty, blank or over-long target.
    pub fn validate(&self) -> Result<()> {
        match self {
            PauseScope::Bus => Ok(()),
            PauseScope::Subscription(t) | PauseScope::Matching(t) => crate::text::check(
                "target",
                t,
                TARGET_MAX_CHARS,
                Some("a pause names the subscription (or the pattern) it covers"),
            ),
        }
    }
}

impl fmt::Display for PauseScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PauseScope::Bus => f.write_str("the whole bus"),
            PauseScope::Subscription(t) => write!(f, "subscription {t:?}"),
            PauseScope::Matching(t) => write!(f, "subscriptions matching {t:?}"),
        }
    }
}

/// `text` matched against `pattern`, where `*` matches any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return text.is_empty();
    };
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// A pause to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseRequest {
    /// What it covers.
    pub scope: PauseScope,
    /// When it ends by itself; `None`: when an operator resumes it.
    pub until: Option<Timestamp>,
    /// Who pauses.
    pub actor: Actor,
    /// Why (required: 1 to [`REASON_MAX_CHARS`] characters, not blank).
    pub reason: String,
}

impl PauseRequest {
    /// Checks it at `now`: fails with [`Error::Invalid`] for a blank or over-long reason or
    /// target, or an `until` that is not in the future or more than [`MAX_PAUSE_SECONDS`]
    /// ahead.
    pub fn validate(&self, now: Timestamp) -> Result<()> {
        self.actor.validate()?;
        self.scope.validate()?;
        crate::text::check(
            "reason",
            &self.reason,
            REASON_MAX_CHARS,
            Some("a pause needs a reason"),
        )?;
        if let Some(until) = self.until {
            let accepted = "a time in the future, at most a year ahead";
            if until <= now {
                return Err(Error::invalid(
                    "until",
                    format!("{until} is not in the future (now: {now})"),
                    accepted,
                ));
            }
            if now.until(until).as_secs() > MAX_PAUSE_SECONDS {
                return Err(Error::invalid(
                    "until",
                    format!("{until} is more than a year ahead"),
                    accepted,
                ));
            }
        }
        Ok(())
    }
}

/// Which pauses a resume ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeTarget {
    /// The pause with this id.
    Id(i64),
    /// Every active pause with exactly this scope (a subscription paused by a pattern stays
    /// paused until that pause ends).
    Scope(PauseScope),
}

/// Pauses to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeRequest {
    /// Which.
    pub target: ResumeTarget,
    /// Who resumes.
    pub actor: Actor,
    /// Why (optional, at most [`REASON_MAX_CHARS`] characters).
    pub reason: Option<String>,
}

impl ResumeRequest {
    /// Fails with [`Error::Invalid`] for an over-long reason or a bad scope.
    pub fn validate(&self) -> Result<()> {
        self.actor.validate()?;
        if let ResumeTarget::Scope(s) = &self.target {
            s.validate()?;
        }
        if let Some(r) = &self.reason {
            crate::text::check("reason", r, REASON_MAX_CHARS, None)?;
        }
        Ok(())
    }
}

/// How a pause ended.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseEndKind {
    /// An operator or the application resumed it.
    Resumed,
    /// Its `until` passed.
    Expired,
}

impl PauseEndKind {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseEndKind::Resumed => "resumed",
            PauseEndKind::Expired => "expired",
        }
    }

    /// The kind stored as `text`, if it is one.
    pub fn parse(text: &str) -> Option<PauseEndKind> {
        [PauseEndKind::Resumed, PauseEndKind::Expired]
            .into_iter()
            .find(|k| k.as_str() == text)
    }
}

/// The end of a pause.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PauseEnd {
    /// Resumed or expired.
    pub kind: PauseEndKind,
    /// When.
    pub at: Timestamp,
    /// Who resumed it (for an expired pause, the bus: kind `auto`).
    pub actor: Actor,
    /// Why, if a reason was given.
    pub reason: Option<String>,
}

/// A pause on record.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Its id (increasing).
    pub id: i64,
    /// What it covers.
    pub scope: PauseScope,
    /// Who paused.
    pub actor: Actor,
    /// Why.
    pub reason: String,
    /// When it started.
    pub paused_at: Timestamp,
    /// When it ends by itself, if it does.
    pub until: Option<Timestamp>,
    /// How it ended; `None` while it is active.
    pub ended: Option<PauseEnd>,
    /// Events it holds parked now (0 once it ended).
    pub parked: u64,
}

impl Pause {
    /// Whether it is in force at `now`: not ended, and its `until` (if any) still ahead.
    pub fn active_at(&self, now: Timestamp) -> bool {
        self.ended.is_none() && self.until.is_none_or(|u| u > now)
    }
}

/// The active pauses as a process sees them: what the dispatcher asks before it runs a
/// handler or claims.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseSet {
    pauses: Vec<Pause>,
}

impl PauseSet {
    /// A set of `pauses` (ended ones are left out).
    pub fn new(pauses: Vec<Pause>) -> PauseSet {
        PauseSet {
            pauses: pauses.into_iter().filter(|p| p.ended.is_none()).collect(),
        }
    }

    /// Whether no pause is active.
    pub fn is_empty(&self) -> bool {
        self.pauses.is_empty()
    }

    /// The pauses in the set, oldest first.
    pub fn pauses(&self) -> &[Pause] {
        &self.pauses
    }

    /// The oldest pause in force at `now` that covers the subscription keyed `key`.
    pub fn covering(&self, key: &str, now: Timestamp) -> Option<&Pause> {
        self.pauses
            .iter()
            .find(|p| p.active_at(now) && p.scope.covers(key))
    }

    /// The oldest pause of the whole bus in force at `now`.
    pub fn bus(&self, now: Timestamp) -> Option<&Pause> {
        self.pauses
            .iter()
            .find(|p| p.active_at(now) && p.scope == PauseScope::Bus)
    }

    /// The earliest `until` of the pauses in the set, if any has one: when the set changes by
    /// itself.
    pub fn next_expiry(&self) -> Option<Timestamp> {
        self.pauses.iter().filter_map(|p| p.until).min()
    }
}

#[cfg(test)]
mod tests;

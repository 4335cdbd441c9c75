//! Periodic events: "publish this event on this cron expression". An application registers
//! each one by name ([`Periodic`], [`EventBus::periodic`](crate::EventBus::periodic)); the
//! definition is stored, so operators list, pause, resume and remove it from the CLI
//! (`durabus periodic`), the admin API and the dashboard ([`Periodics`]).
//!
//! - **Once per tick, cluster-wide.** Every started bus with the scheduler on
//!   ([`SchedulerConfig::enabled`](crate::SchedulerConfig)) publishes the ticks that come due;
//!   a tick's event has an id made from the name and the tick ([`tick_id`]), so however many
//!   processes publish it, it is stored once (the idempotent publish).
//! - **Time zones.** The expression (5 fields, or 6 with seconds first) is read in the
//!   definition's IANA time zone (`Europe/Paris`; UTC by default), daylight saving included:
//!   `0 9 * * *` in `Europe/Paris` is 09:00 local time all year.
//! - **Missed ticks.** After a time with no bus running, the latest missed tick is published
//!   once (late), the earlier ones not at all. A paused definition skips its ticks; resumed, it
//!   goes on from the next one.
//! - **Registration** (on every start of the application, typically) stores or updates the
//!   definition and keeps its paused flag and its place in the schedule. `remove` deletes it
//!   until the application registers it again: to stop one for good, remove it from the code
//!   too, or pause it.
//! - The event carries metadata `periodic` (the name) and `periodic_tick` (the tick, in ms
//!   since the epoch).

mod manage;
mod runner;

use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use manage::Periodics;
pub(crate) use runner::run;

use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::{EventId, NewEvent};
use crate::options::{PRIORITY_MAX, PRIORITY_MIN};
use crate::pattern::validate_event_type;

/// The metadata key naming the periodic definition an event was published by.
pub const META_PERIODIC: &str = "periodic";
/// The metadata key holding the tick an event was published for (ms since the epoch).
pub const META_TICK: &str = "periodic_tick";
/// The longest name a periodic definition may have, in bytes.
pub const NAME_MAX: usize = 100;

/// A periodic event to register: a name, a cron expression, a time zone and the event to
/// publish on each tick.
///
/// ```
/// use durabus::Periodic;
///
/// let digest = Periodic::new("daily-digest", "0 9 * * *", "digest.due", &serde_json::json!({"kind": "daily"}))?
///     .timezone("Europe/Paris")
///     .priority(5);
/// assert!(digest.check().is_ok());
/// # Ok::<(), durabus::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Periodic {
    name: String,
    schedule: String,
    timezone: String,
    event_type: String,
    payload: String,
    priority: i16,
}

impl Periodic {
    /// `event_type` with `payload` published on each tick of `schedule` (UTC unless
    /// [`timezone`](Self::timezone) says otherwise). Fails with [`Error::InvalidPayload`] for a
    /// payload that does not serialise; the rest is checked by [`check`](Self::check).
    pub fn new<T: Serialize + ?Sized>(
        name: &str,
        schedule: &str,
        event_type: &str,
        payload: &T,
    ) -> Result<Periodic> {
        let payload =
            serde_json::to_string(payload).map_err(|e| Error::InvalidPayload(e.to_string()))?;
        Ok(Periodic {
            name: name.to_owned(),
            schedule: schedule.to_owned(),
            timezone: "UTC".to_owned(),
            event_type: event_type.to_owned(),
            payload,
            priority: 0,
        })
    }

    /// Reads the schedule in this IANA time zone (`Europe/Paris`, `America/New_York`).
    #[must_use]
    pub fn timezone(mut self, timezone: &str) -> Self {
        timezone.clone_into(&mut self.timezone);
        self
    }

    /// The published events' priority (see [`PublishOptions::priority`](crate::PublishOptions::priority)).
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// Checks every field: fails with [`Error::Invalid`] for a name that is empty, too long or
    /// has characters other than letters, digits, `.`, `_`, `-` and `:`; a schedule that is
    /// not a cron expression; an unknown time zone; or a priority out of range; and with
    /// [`Error::InvalidEventType`] for a bad event type. Registering runs this first.
    pub fn check(&self) -> Result<()> {
        check_name(&self.name)?;
        validate_event_type(&self.event_type)?;
        Schedule::parse(&self.schedule, &self.timezone)?;
        if !(PRIORITY_MIN..=PRIORITY_MAX).contains(&self.priority) {
            return Err(Error::invalid(
                "priority",
                format!("{} is out of range", self.priority),
                format!("a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}"),
            ));
        }
        Ok(())
    }

    /// The row to store for this definition, registered at `now` (where its schedule starts).
    pub(crate) fn row(&self, now: Timestamp) -> PeriodicRow {
        PeriodicRow {
            name: self.name.clone(),
            schedule: self.schedule.clone(),
            timezone: self.timezone.clone(),
            event_type: self.event_type.clone(),
            payload: self.payload.clone(),
            priority: self.priority,
            paused: false,
            cursor: now,
            last_tick: None,
            last_event_id: None,
            created_at: now,
            updated_at: now,
        }
    }
}

/// Checks a periodic definition's name (see [`Periodic::check`]).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= NAME_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "name",
            format!("{name:?} is not a periodic event's name"),
            format!("1 to {NAME_MAX} letters, digits, '.', '_', '-' or ':'"),
        ))
    }
}

/// A periodic definition as stored: what it publishes, whether it is paused, and where it is
/// in its schedule.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeriodicRow {
    /// Its name (unique on the database).
    pub name: String,
    /// Its cron expression.
    pub schedule: String,
    /// The IANA time zone the expression is read in.
    pub timezone: String,
    /// The type of the events it publishes.
    pub event_type: String,
    /// Their payload (JSON text).
    pub payload: String,
    /// Their priority.
    pub priority: i16,
    /// Whether its ticks are skipped.
    pub paused: bool,
    /// Ticks at or before this time are published or skipped: the next one is the first after
    /// it.
    pub cursor: Timestamp,
    /// The last tick it published, if any.
    pub last_tick: Option<Timestamp>,
    /// The event that tick published.
    pub last_event_id: Option<EventId>,
    /// When it was first registered.
    pub created_at: Timestamp,
    /// When it was last registered, paused or resumed.
    pub updated_at: Timestamp,
}

impl PeriodicRow {
    /// Its schedule, parsed. Fails like [`Periodic::check`] (a row written by a newer
    /// version, say).
    pub fn parsed(&self) -> Result<Schedule> {
        Schedule::parse(&self.schedule, &self.timezone)
    }

    /// The tick to publish at `now`, if one is due: the latest tick after the cursor and not
    /// after `now` (earlier missed ones are skipped). `None` while paused.
    pub fn due(&self, schedule: &Schedule, now: Timestamp) -> Option<Timestamp> {
        if self.paused {
            return None;
        }
        let first = schedule.next_after(self.cursor)?;
        if first > now {
            return None;
        }
        Some(schedule.latest_at(now).unwrap_or(first).max(first))
    }

    /// The event a tick publishes: its id made from the name and the tick.
    pub fn event(&self, tick: Timestamp) -> Result<NewEvent> {
        let payload: Value = serde_json::from_str(&self.payload)
            .map_err(|e| Error::InvalidPayload(e.to_string()))?;
        let mut event = NewEvent::new(&self.event_type, &payload)?
            .with_id(tick_id(&self.name, tick))
            .priority(self.priority);
        event
            .metadata
            .insert(META_PERIODIC.to_owned(), self.name.clone());
        event
            .metadata
            .insert(META_TICK.to_owned(), tick.as_millis().to_string());
        Ok(event)
    }
}

/// A periodic definition as listed: the stored row and its next tick.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeriodicInfo {
    /// The stored definition.
    #[serde(flatten)]
    pub row: PeriodicRow,
    /// When it publishes next (`None` while paused, or for a schedule with no future tick).
    pub next_tick: Option<Timestamp>,
}

impl PeriodicInfo {
    /// `row` with its next tick as of `now`.
    pub fn of(row: PeriodicRow, now: Timestamp) -> PeriodicInfo {
        let next_tick = if row.paused {
            None
        } else {
            row.parsed()
                .ok()
                .and_then(|s| s.next_after(row.cursor.max(now)))
        };
        PeriodicInfo { row, next_tick }
    }
}

/// A cron expression read in a time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    cron: croner::Cron,
    tz: chrono_tz::Tz,
}

impl Schedule {
    /// Parses `schedule` in `timezone`: fails with [`Error::Invalid`] (field `schedule` or
    /// `timezone`).
    pub fn parse(schedule: &str, timezone: &str) -> Result<Schedule> {
        let cron = croner::Cron::from_str(schedule).map_err(|e| {
            Error::invalid(
                "schedule",
                format!("{schedule:?} is not a cron expression: {e}"),
                "a cron expression of 5 fields (or 6, seconds first), such as \"0 9 * * *\"",
            )
        })?;
        let tz = chrono_tz::Tz::from_str(timezone).map_err(|_| {
            Error::invalid(
                "timezone",
                format!("{timezone:?} is not a time zone"),
                "an IANA time zone name, such as \"UTC\" or \"Europe/Paris\"",
            )
        })?;
        Ok(Schedule { cron, tz })
    }

    /// The first tick after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let local = chrono::DateTime::from_timestamp_millis(t.as_millis())?.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|d| Timestamp(d.timestamp_millis()))
    }

    /// The latest tick at or before `t`.
    pub fn latest_at(&self, t: Timestamp) -> Option<Timestamp> {
        let local = chrono::DateTime::from_timestamp_millis(t.as_millis())?.with_timezone(&self.tz);
        self.cron
            .find_previous_occurrence(&local, true)
            .ok()
            .map(|d| Timestamp(d.timestamp_millis()))
    }
}

/// The id of the event definition `name` publishes for `tick`: a UUID version 7 with the
/// tick as its time and the rest from a hash of the name and the tick, the same in every
/// process (and every version: the hash is FNV-1a, fixed here), so a tick is stored once.
pub fn tick_id(name: &str, tick: Timestamp) -> EventId {
    let fnv = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in name
            .as_bytes()
            .iter()
            .chain(&tick.as_millis().to_be_bytes())
        {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    let (a, b) = (fnv(1).to_be_bytes(), fnv(2).to_be_bytes());
    let mut rest = [0u8; 10];
    rest[..8].copy_from_slice(&a);
    rest[8..].copy_from_slice(&b[..2]);
    let ms = u64::try_from(tick.as_millis()).unwrap_or(0);
    EventId(uuid::Builder::from_unix_timestamp_millis(ms, &rest).into_uuid())
}

#[cfg(test)]
mod tests;

//! Publish options: when an event becomes due and its priority among due events. One builder
//! for every way of publishing: set it on a [`NewEvent`](crate::NewEvent) with
//! [`NewEvent::with_options`](crate::NewEvent::with_options) (or the shortcuts
//! [`NewEvent::deliver_at`](crate::NewEvent::deliver_at), [`delay`](crate::NewEvent::delay) and
//! [`priority`](crate::NewEvent::priority)) and publish it with `publish_event`,
//! `enqueue_event`, `enqueue_batch` or either outbox.
//!
//! ```
//! use std::time::Duration;
//! use durabus::{NewEvent, PublishOptions};
//!
//! let reminder = NewEvent::new("reminder.due", &serde_json::json!({"user": 7}))?
//!     .with_options(PublishOptions::new().delay(Duration::from_secs(24 * 3600)).priority(5));
//! assert_eq!(reminder.options.priority_value(), 5);
//! # Ok::<(), durabus::Error>(())
//! ```
//!
//! **Scheduled events.** An event due later than the moment it is published is stored with
//! status [`Scheduled`](crate::EventStatus::Scheduled) and is not delivered before its time; a
//! time in the past (or now) means now. The dispatcher sleeps until the earliest due time, and
//! a publish of an earlier one wakes it. `publish` of a scheduled event returns once it is
//! stored (it cannot wait for a delivery that lies in the future).
//!
//! **Priorities.** Among the events due at a claim, higher priorities are taken first, and
//! within one priority the earliest due first (publish order for events due at once). A
//! priority is a number from [`PRIORITY_MIN`] to [`PRIORITY_MAX`]; the default is 0. Under a
//! backlog that never drains, lower priorities wait: a steady stream of priority-10 events
//! faster than the handlers starves priority 0 for as long as it lasts (no ageing). Use
//! priorities to let urgent events overtake a backlog, not as a share of the throughput.
//!
//! **Dedup windows.** [`PublishOptions::dedup`] names a key and a window: a second publish with
//! the same key inside the window stores nothing and returns the id of the first event (the
//! window runs from the first one's publish). After the window the key is free again, and the
//! next publish with it stores a new event and opens a new window. Keys are bus-wide (put the
//! event type in the key to scope it to one type). An event id given with
//! [`NewEvent::with_id`](crate::NewEvent::with_id) is the window-less case: an id is stored
//! once, forever.

use std::time::Duration;

use crate::clock::Timestamp;
use crate::error::{Error, Result};

/// The lowest priority an event may have.
pub const PRIORITY_MIN: i16 = -100;
/// The highest priority an event may have.
pub const PRIORITY_MAX: i16 = 100;
/// The longest delay (and the furthest due time from now) an event may be published with:
/// about 100 years, far beyond any use, near enough to keep every time representable.
pub const DELAY_MAX: Duration = Duration::from_secs(100 * 366 * 24 * 3600);

/// When and in what order an event is delivered. [`Default`] is due now, priority 0: what
/// every publish without options does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PublishOptions {
    when: Option<When>,
    priority: i16,
    dedup: Option<Dedup>,
    ordering_key: Option<String>,
}

/// The longest an ordering key may be, in bytes.
pub const ORDERING_KEY_MAX: usize = 255;

/// The longest a dedup key may be, in bytes.
pub const DEDUP_KEY_MAX: usize = 255;

/// A dedup key and its window (see [`PublishOptions::dedup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// The key: 1 to [`DEDUP_KEY_MAX`] bytes.
    pub key: String,
    /// How long after the first publish with the key a second one is a duplicate.
    pub window: Duration,
}

impl Dedup {
    /// When the window of a key first published at `now` closes.
    pub fn expires(&self, now: Timestamp) -> Timestamp {
        now.plus(self.window)
    }
}

/// A due time: fixed, or relative to the moment of publishing (the bus's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum When {
    At(Timestamp),
    After(Duration),
}

impl PublishOptions {
    /// Due now, priority 0.
    pub fn new() -> PublishOptions {
        PublishOptions::default()
    }

    /// Not delivered before `at`. A time in the past means now. Replaces an earlier
    /// [`delay`](Self::delay).
    #[must_use]
    pub fn deliver_at(mut self, at: Timestamp) -> Self {
        self.when = Some(When::At(at));
        self
    }

    /// Not delivered before `delay` after the moment it is published (read on the bus's
    /// clock). Replaces an earlier [`deliver_at`](Self::deliver_at). At most [`DELAY_MAX`].
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.when = Some(When::After(delay));
        self
    }

    /// Among due events, higher priorities are delivered first. From [`PRIORITY_MIN`] to
    /// [`PRIORITY_MAX`]; the default is 0.
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// A second publish with `key` within `window` of the first stores nothing and returns the
    /// first event's id. `key` is 1 to [`DEDUP_KEY_MAX`] bytes; `window` is more than zero and at
    /// most [`DELAY_MAX`] ([`check`](Self::check) refuses others).
    #[must_use]
    pub fn dedup(mut self, key: impl Into<String>, window: Duration) -> Self {
        self.dedup = Some(Dedup {
            key: key.into(),
            window,
        });
        self
    }

    /// Events with the same ordering key are handled strictly one at a time and in publish
    /// order, by every subscription, across all workers and processes; events of different keys
    /// run in parallel. A failing event holds its key through its retries; dead-lettered, it
    /// lets the key move on, unless the failing subscription has
    /// [`hold_key_on_dead_letter`](crate::SubscribeOptions::hold_key_on_dead_letter). 1 to
    /// [`ORDERING_KEY_MAX`] bytes.
    #[must_use]
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// The ordering key set, if any.
    pub fn ordering_key_value(&self) -> Option<&str> {
        self.ordering_key.as_deref()
    }

    /// The dedup key and window set, if any.
    pub fn dedup_value(&self) -> Option<&Dedup> {
        self.dedup.as_ref()
    }

    /// The priority set (0 unless [`priority`](Self::priority) set another).
    pub fn priority_value(&self) -> i16 {
        self.priority
    }

    /// When an event published at `now` with these options is due, if that is later than
    /// `now` (a scheduled event); `None` for an event due at once.
    pub fn due_at(&self, now: Timestamp) -> Option<Timestamp> {
        let due = match self.when? {
            When::At(at) => at,
            When::After(delay) => now.plus(delay),
        };
        (due > now).then_some(due)
    }

    /// Checks the options against their ranges: fails with [`Error::Invalid`] (kind
    /// [`InvalidInput`](crate::ErrorKind::InvalidInput)) for a priority out of range, a delay
    /// longer than [`DELAY_MAX`], a due time past the year 9999, an empty or over-long dedup
    /// key or a dedup window of zero or over [`DELAY_MAX`]. Every way of publishing runs
    /// this (through [`NewEvent::check`](crate::NewEvent::check)) before anything is written.
    pub fn check(&self) -> Result<()> {
        if !(PRIORITY_MIN..=PRIORITY_MAX).contains(&self.priority) {
            return Err(Error::invalid(
                "priority",
                format!("{} is out of range", self.priority),
                format!("a whole number from {PRIORITY_MIN} to {PRIORITY_MAX}"),
            ));
        }
        if let Some(k) = &self.ordering_key
            && (k.is_empty() || k.len() > ORDERING_KEY_MAX || k.contains('\0'))
        {
            return Err(Error::invalid(
                "ordering_key",
                format!("a key of {} bytes", k.len()),
                format!("1 to {ORDERING_KEY_MAX} bytes, no NUL character"),
            ));
        }
        if let Some(d) = &self.dedup {
            if d.key.is_empty() || d.key.len() > DEDUP_KEY_MAX || d.key.contains('\0') {
                return Err(Error::invalid(
                    "dedup_key",
                    format!("a key of {} bytes", d.key.len()),
                    format!("1 to {DEDUP_KEY_MAX} bytes, no NUL character"),
                ));
            }
            if d.window.is_zero() || d.window > DELAY_MAX {
                return Err(Error::invalid(
                    "dedup_window",
                    format!("{} ms", d.window.as_millis()),
                    "more than 0 and at most 100 years",
                ));
            }
        }
        match self.when {
            Some(When::After(delay)) if delay > DELAY_MAX => Err(Error::invalid(
                "delay",
                format!("{} ms is too long", delay.as_millis()),
                "at most 100 years",
            )),
            Some(When::At(at)) if !at.is_writable() => Err(Error::invalid(
                "deliver_at",
                format!("{} ms since the epoch is out of range", at.as_millis()),
                "a time from the year 0000 to 9999",
            )),
            _ => Ok(()),
        }
    }
}

/// Parses a delay as an operator types it: a whole number followed by `ms`, `s`, `m`, `h` or
/// `d` (`90s`, `15m`, `2h`, `1d`). A negative number, a missing or unknown unit, or a delay
/// beyond [`DELAY_MAX`] is refused with [`Error::Invalid`] naming `field`.
pub fn parse_delay(field: &str, text: &str) -> Result<Duration> {
    let accepted =
        "a whole number of ms, s, m, h or d (for example 90s, 15m, 2h), at most 100 years";
    let refuse = |why: &str| Error::invalid(field, format!("{text:?} {why}"), accepted);
    let t = text.trim();
    if t.starts_with('-') {
        return Err(refuse("is negative"));
    }
    let split = t
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| refuse("has no unit"))?;
    let (digits, unit) = t.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| refuse("does not start with a whole number"))?;
    let ms_per = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(refuse("has an unknown unit")),
    };
    let ms = n.checked_mul(ms_per).ok_or_else(|| refuse("is too long"))?;
    let d = Duration::from_millis(ms);
    if d > DELAY_MAX {
        return Err(refuse("is too long"));
    }
    Ok(d)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn an_event_is_scheduled_only_for_a_time_after_now() {
        let now = Timestamp(1_000);
        assert_eq!(PublishOptions::new().due_at(now), None);
        let at = |t| PublishOptions::new().deliver_at(Timestamp(t)).due_at(now);
        assert_eq!(at(999), None, "the past means now");
        assert_eq!(at(1_000), None, "now means now");
        assert_eq!(at(1_001), Some(Timestamp(1_001)));
        let after = |ms| {
            PublishOptions::new()
                .delay(Duration::from_millis(ms))
                .due_at(now)
        };
        assert_eq!(after(0), None);
        assert_eq!(after(250), Some(Timestamp(1_250)));
        // The last of deliver_at and delay counts.
        let both = PublishOptions::new()
            .deliver_at(Timestamp(5_000))
            .delay(Duration::from_millis(10));
        assert_eq!(both.due_at(now), Some(Timestamp(1_010)));
    }

    #[test]
    fn priorities_and_due_times_out_of_range_are_typed_errors() {
        for p in [PRIORITY_MIN, 0, PRIORITY_MAX] {
            assert!(PublishOptions::new().priority(p).check().is_ok(), "{p}");
        }
        for p in [PRIORITY_MIN - 1, PRIORITY_MAX + 1, i16::MIN, i16::MAX] {
            let e = PublishOptions::new().priority(p).check().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(
                e.invalid_value().map(|i| i.field).as_deref(),
                Some("priority")
            );
        }
        let far = PublishOptions::new().delay(DELAY_MAX + Duration::from_millis(1));
        assert_eq!(
            far.check()
                .unwrap_err()
                .invalid_value()
                .map(|i| i.field)
                .as_deref(),
            Some("delay")
        );
        let far = PublishOptions::new().deliver_at(Timestamp(i64::MAX));
        assert_eq!(
            far.check()
                .unwrap_err()
                .invalid_value()
                .map(|i| i.field)
                .as_deref(),
            Some("deliver_at")
        );
        assert!(PublishOptions::new().delay(DELAY_MAX).check().is_ok());
        assert!(
            PublishOptions::new()
                .deliver_at(Timestamp(-5))
                .check()
                .is_ok()
        );
    }

    #[test]
    fn dedup_keys_and_windows_out_of_range_are_typed_errors() {
        let field = |o: PublishOptions| {
            o.check()
                .err()
                .and_then(|e| e.invalid_value())
                .map(|i| i.field)
        };
        let minute = Duration::from_secs(60);
        assert_eq!(field(PublishOptions::new().dedup("order-7", minute)), None);
        assert_eq!(
            field(PublishOptions::new().dedup("k".repeat(DEDUP_KEY_MAX), minute)),
            None
        );
        assert_eq!(
            field(PublishOptions::new().dedup("", minute)).as_deref(),
            Some("dedup_key")
        );
        assert_eq!(
            field(PublishOptions::new().dedup("k".repeat(DEDUP_KEY_MAX + 1), minute)).as_deref(),
            Some("dedup_key")
        );
        assert_eq!(
            field(PublishOptions::new().dedup("k", Duration::ZERO)).as_deref(),
            Some("dedup_window")
        );
        assert_eq!(
            field(PublishOptions::new().dedup("k", DELAY_MAX + minute)).as_deref(),
            Some("dedup_window")
        );
        let d = PublishOptions::new().dedup("k", minute);
        assert_eq!(
            d.dedup_value().map(|d| d.expires(Timestamp(1_000))),
            Some(Timestamp(61_000))
        );
    }

    #[test]
    fn delays_parse_with_units_and_refuse_the_rest() {
        assert_eq!(
            parse_delay("delay", "90s").ok(),
            Some(Duration::from_secs(90))
        );
        assert_eq!(
            parse_delay("delay", "15m").ok(),
            Some(Duration::from_secs(900))
        );
        assert_eq!(
            parse_delay("delay", "250ms").ok(),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            parse_delay("delay", "2h").ok(),
            Some(Duration::from_secs(7200))
        );
        assert_eq!(
            parse_delay("delay", "1d").ok(),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(parse_delay("delay", "0s").ok(), Some(Duration::ZERO));
        for bad in [
            "-5s",
            "5",
            "s",
            "5x",
            "",
            "1.5h",
            "99999999999999999999d",
            "40000d",
        ] {
            let e = parse_delay("delay", bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad}");
        }
    }
}

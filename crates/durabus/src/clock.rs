//! Time, injected: the bus reads every timestamp through a [`Clock`], so tests can drive back-off,
//! schedules and timeouts without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::sync::watch;

/// A point in time: milliseconds since the Unix epoch (UTC). Serialised as an RFC 3339 string;
/// deserialised from such a string or from a number of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .description(Some(
                "A point in time, RFC 3339 (an offset is converted to UTC; answers are in UTC)",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for Timestamp {}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TimestampVisitor)
    }
}

/// Reads a timestamp from an RFC 3339 string (a number is refused: it would be ambiguous
/// between seconds and milliseconds), without buffering.
struct TimestampVisitor;

/// What [`TimestampVisitor`] accepts, as serde's "expected".
const EXPECTED_TIME: &str = "an RFC 3339 time from year 0000 to 9999, such as 2026-01-01T00:00:00Z";

impl serde::de::Visitor<'_> for TimestampVisitor {
    type Value = Timestamp;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(EXPECTED_TIME)
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Timestamp, E> {
        Timestamp::parse_rfc3339(text).map_err(|e| {
            let problem = e.split_once("; expected").map_or(e.as_str(), |(p, _)| p);
            E::custom(format!("{problem}, expected {EXPECTED_TIME}"))
        })
    }
}

impl std::str::FromStr for Timestamp {
    type Err = String;
    /// Parses RFC 3339 as [`Timestamp::parse_rfc3339`] does, and, for people typing times,
    /// also a time without an offset (`2026-01-01T00:00:00`, `2026-01-01 00:00:00`), taken as
    /// UTC.
    fn from_str(s: &str) -> Result<Self, String> {
        Timestamp::parse_rfc3339(s).or_else(|e| {
            ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
                .iter()
                .find_map(|f| chrono::NaiveDateTime::parse_from_str(s, f).ok())
                .map(|t| Timestamp(t.and_utc().timestamp_millis()))
                .filter(|t| t.is_writable())
                .ok_or(e)
        })
    }
}

impl Timestamp {
    /// Parses an RFC 3339 time with its offset (`2026-01-01T00:00:00Z`,
    /// `2026-01-01T01:00:00+01:00`, fractions allowed; the offset is converted to UTC), years
    /// 0000 to 9999: JSON Schema's `date-time`, what the admin API takes.
    pub fn parse_rfc3339(s: &str) -> Result<Timestamp, String> {
        let t = chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(|e| {
                format!(
                    "invalid timestamp {s:?}: {e}; expected RFC 3339 such as 2026-01-01T00:00:00Z"
                )
            })?;
        if !t.is_writable() {
            return Err(format!(
                "invalid timestamp {s:?}: outside the years 0000 to 9999 once converted to UTC"
            ));
        }
        Ok(t)
    }

    /// The first millisecond RFC 3339 can write (0000-01-01T00:00:00.000Z).
    pub const MIN_RFC3339: Timestamp = Timestamp(-62_167_219_200_000);

    /// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z).
    pub const MAX_RFC3339: Timestamp = Timestamp(253_402_300_799_999);

    /// Whether the time can be written in RFC 3339: the years 0000 to 9999, UTC.
    pub fn is_writable(self) -> bool {
        (Self::MIN_RFC3339.0..=Self::MAX_RFC3339.0).contains(&self.0)
    }

    /// The current time of the system clock.
    pub fn now() -> Timestamp {
        SystemClock.now()
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> i64 {
        self.0
    }

    /// This time plus `d` (saturating).
    #[must_use]
    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// This time minus `d` (saturating).
    #[must_use]
    pub fn minus(self, d: Duration) -> Timestamp {
        Timestamp(
            self.0
                .saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
        )
    }

    /// How long from `self` until `later`; zero if `later` is not after `self`.
    pub fn until(self, later: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(later.0.saturating_sub(self.0)).unwrap_or(0))
    }

    /// The time as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_millis(self.0.unsigned_abs())
        } else {
            UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs())
        }
    }

    /// The time from a [`SystemTime`].
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Timestamp(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

impl std::fmt::Display for Timestamp {
    /// RFC 3339 with milliseconds, UTC; a time RFC 3339 cannot write (before year 0000, after
    /// 9999) as its milliseconds since the Unix epoch, never a panic.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 0 && self.is_writable() {
            f.pad(&humantime::format_rfc3339_millis(self.to_system_time()).to_string())
        } else if let Some(t) =
            chrono::DateTime::from_timestamp_millis(self.0).filter(|_| self.is_writable())
        {
            f.pad(&t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        } else {
            f.pad(&format!("{} ms since 1970-01-01T00:00:00Z", self.0))
        }
    }
}

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Timestamp;

    /// A receiver that changes whenever the clock jumps (a manual clock advanced by a test).
    /// The system clock never jumps and returns `None`.
    fn jumps(&self) -> Option<watch::Receiver<i64>> {
        None
    }
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }
}

/// How far a newly measured offset must differ from the one in use before an [`OffsetClock`]
/// takes it: smaller differences are measurement noise (half a round trip), and taking them
/// would move the clock back and forth by a few milliseconds.
pub const OFFSET_TOLERANCE_MS: i64 = 5;

/// A measurement taking longer than this round trip says too little about the other clock to
/// be used.
pub const OFFSET_MAX_ROUND_TRIP: Duration = Duration::from_secs(1);

/// The system clock corrected by its offset to another clock: a database server's. A bus on
/// PostgreSQL reads time through one by default, so every process of a cluster decides leases,
/// back-off and schedules on the server's clock however far its own host's clock is off: the
/// store measures the offset when it connects and again at every lease heartbeat (see
/// [`offset_from`]). Clones share the offset.
#[derive(Debug, Clone, Default)]
pub struct OffsetClock {
    offset_ms: Arc<AtomicI64>,
}

impl OffsetClock {
    /// A clock `offset_ms` milliseconds ahead of the system clock (behind if negative).
    pub fn new(offset_ms: i64) -> Self {
        OffsetClock {
            offset_ms: Arc::new(AtomicI64::new(offset_ms)),
        }
    }

    /// The offset in use, in milliseconds: the other clock minus the system clock.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }

    /// Takes a newly measured offset if it differs from the one in use by more than
    /// [`OFFSET_TOLERANCE_MS`]. Returns whether it did.
    pub fn adjust(&self, measured_ms: i64) -> bool {
        let current = self.offset_ms();
        if measured_ms.abs_diff(current) <= OFFSET_TOLERANCE_MS.unsigned_abs() {
            return false;
        }
        self.offset_ms.store(measured_ms, Ordering::Relaxed);
        true
    }
}

impl Clock for OffsetClock {
    fn now(&self) -> Timestamp {
        Timestamp(SystemClock.now().0.saturating_add(self.offset_ms()))
    }
}

/// The offset of another clock that read `theirs` between this clock's readings `sent` and
/// `received`: `theirs` minus the midpoint, correct to within half the round trip. `None` when
/// the readings cannot be trusted: this clock went backwards between them, or the round trip
/// took longer than [`OFFSET_MAX_ROUND_TRIP`].
pub fn offset_from(sent: Timestamp, theirs: Timestamp, received: Timestamp) -> Option<i64> {
    let trip = received.0.checked_sub(sent.0)?;
    let max = i64::try_from(OFFSET_MAX_ROUND_TRIP.as_millis()).unwrap_or(i64::MAX);
    if !(0..=max).contains(&trip) {
        return None;
    }
    Some(theirs.0.saturating_sub(sent.0.saturating_add(trip / 2)))
}

/// A clock that moves only when told to. Advancing it wakes the dispatcher, so events whose
/// retry time has come are delivered without real waiting.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    tx: Arc<watch::Sender<i64>>,
}

impl ManualClock {
    /// A manual clock that starts at `start`.
    pub fn new(start: Timestamp) -> Self {
        let (tx, _) = watch::channel(start.0);
        ManualClock {
            now: Arc::new(AtomicI64::new(start.0)),
            tx: Arc::new(tx),
        }
    }

    /// Moves the clock forward by `d`.
    pub fn advance(&self, d: Duration) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let now = self.now.fetch_add(ms, Ordering::SeqCst).saturating_add(ms);
        self.tx.send_replace(now);
    }

    /// Sets the clock to `t`.
    pub fn set(&self, t: Timestamp) {
        self.now.store(t.0, Ordering::SeqCst);
        self.tx.send_replace(t.0);
    }
}

impl Default for ManualClock {
    /// Starts at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        ManualClock::new(Timestamp(1_767_225_600_000))
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.now.load(Ordering::SeqCst))
    }

    fn jumps(&self) -> Option<watch::Receiver<i64>> {
        Some(self.tx.subscribe())
    }
}

/// Waits until `clock` reads `at` or later: in real time on the system clock; on a manual
/// clock until it is moved there (looking again whenever it jumps, and after the real time
/// the wait would take).
pub(crate) async fn sleep_until(clock: &dyn Clock, at: Timestamp) {
    let mut jumps = clock.jumps();
    loop {
        let now = clock.now();
        if now >= at {
            return;
        }
        let wait = now.until(at);
        match jumps.as_mut() {
            Some(rx) => {
                tokio::select! {
                    changed = rx.changed() => {
                        if changed.is_err() {
                            jumps = None;
                        }
                    }
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            None => tokio::time::sleep(wait).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advances_and_notifies() {
        let clock = ManualClock::new(Timestamp(1_000));
        let rx = clock.jumps();
        clock.advance(Duration::from_millis(250));
        assert_eq!(clock.now(), Timestamp(1_250));
        assert_eq!(rx.map(|r| r.has_changed().unwrap_or(false)), Some(true));
        assert!(SystemClock.jumps().is_none());
    }

    #[test]
    fn an_offset_clock_reads_the_other_clock_within_half_a_round_trip() {
        // The server read 300,000 ms later than the midpoint of a 4 ms round trip.
        assert_eq!(
            offset_from(Timestamp(1_000), Timestamp(301_002), Timestamp(1_004)),
            Some(300_000)
        );
        assert_eq!(
            offset_from(Timestamp(1_000), Timestamp(-299_000), Timestamp(1_000)),
            Some(-300_000)
        );
        // Backwards, or too slow to say anything.
        assert_eq!(
            offset_from(Timestamp(1_000), Timestamp(0), Timestamp(999)),
            None
        );
        assert_eq!(
            offset_from(Timestamp(0), Timestamp(0), Timestamp(1_001)),
            None
        );
        let clock = OffsetClock::new(0);
        let shared = clock.clone();
        assert!(!clock.adjust(OFFSET_TOLERANCE_MS), "noise is not taken");
        assert!(clock.adjust(300_000));
        assert_eq!(shared.offset_ms(), 300_000, "clones share the offset");
        let ahead = shared.now().0 - SystemClock.now().0;
        assert!((299_000..=300_000).contains(&ahead), "{ahead}");
        assert!(clock.adjust(-5_000));
        assert!(shared.now() < SystemClock.now());
    }

    #[test]
    fn timestamp_arithmetic_and_display() {
        let t = Timestamp(1_767_225_600_000);
        assert_eq!(t.plus(Duration::from_secs(1)), Timestamp(1_767_225_601_000));
        assert_eq!(
            t.minus(Duration::from_secs(1)),
            Timestamp(1_767_225_599_000)
        );
        assert_eq!(
            t.until(t.plus(Duration::from_millis(5))),
            Duration::from_millis(5)
        );
        assert_eq!(t.plus(Duration::from_millis(5)).until(t), Duration::ZERO);
        assert_eq!(t.to_string(), "2026-01-01T00:00:00.000Z");
        assert_eq!(Timestamp::from_system_time(t.to_system_time()), t);
    }

    #[test]
    fn timestamp_serde_round_trips_as_rfc3339_and_refuses_anything_else() {
        let t = Timestamp(1_767_225_600_123);
        let json = serde_json::to_string(&t).unwrap_or_default();
        assert_eq!(json, "\"2026-01-01T00:00:00.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).ok(), Some(t));
        // The API documents RFC 3339 strings (format date-time): numbers are refused, every
        // RFC 3339 time is read, an offset converted to UTC.
        for bad in [
            "1767225600123",
            "-1000",
            "\"yesterday\"",
            "\"2026-13-01T00:00:00Z\"",
            "\"0000-01-01T00:00:00+00:01\"",
        ] {
            assert!(serde_json::from_str::<Timestamp>(bad).is_err(), "{bad}");
        }
        for (text, millis) in [
            ("1970-01-01T00:00:00Z", 0),
            ("1970-01-01T01:00:00+01:00", 0),
            ("1969-12-31T23:59:59Z", -1000),
            ("0306-10-09T23:26:19+03:15", -52_486_458_521_000),
        ] {
            assert_eq!(text.parse::<Timestamp>(), Ok(Timestamp(millis)), "{text}");
            let json = format!("{text:?}");
            assert_eq!(
                serde_json::from_str::<Timestamp>(&json).ok(),
                Some(Timestamp(millis))
            );
        }
        // People typing a time may leave the offset out (UTC); the API, following its
        // document (format date-time), does not.
        for (text, millis) in [
            ("2026-01-01T00:00:00.123", 1_767_225_600_123),
            ("2026-01-01 00:00:00", 1_767_225_600_000),
        ] {
            assert_eq!(text.parse::<Timestamp>(), Ok(Timestamp(millis)), "{text}");
            assert!(serde_json::from_str::<Timestamp>(&format!("{text:?}")).is_err());
        }
    }

    #[test]
    fn a_time_rfc3339_cannot_write_is_shown_never_panicked_on() {
        assert_eq!(Timestamp(-1000).to_string(), "1969-12-31T23:59:59.000Z");
        assert_eq!(
            Timestamp::MIN_RFC3339.to_string(),
            "0000-01-01T00:00:00.000Z"
        );
        assert!(!Timestamp(Timestamp::MIN_RFC3339.0 - 1).is_writable());
        assert_eq!(
            Timestamp(Timestamp::MIN_RFC3339.0 - 1).to_string(),
            "-62167219200001 ms since 1970-01-01T00:00:00Z"
        );
        assert!(Timestamp::MAX_RFC3339.is_writable());
        assert_eq!(
            Timestamp::MAX_RFC3339.to_string(),
            "9999-12-31T23:59:59.999Z"
        );
        assert!(
            Timestamp(i64::MAX)
                .to_string()
                .ends_with("ms since 1970-01-01T00:00:00Z")
        );
    }
}

//! The circuit breaker of one subscription: a pure state machine, the clock passed in.
//!
//! ```text
//! closed ──(> 50 % failed, ≥ 4 samples in 1 min)──→ open
//! open ──(30 s elapsed)──→ half-open
//! half-open ──(probe succeeds)──→ closed
//! half-open ──(probe fails)──→ open
//! ```
//!
//! While open, the subscription's handler is skipped and the event is deferred for it (not
//! dropped, not counted as a failed attempt). Half-open lets exactly one probe through at a time.

use std::collections::VecDeque;
use std::time::Duration;

use serde::Serialize;

use crate::clock::Timestamp;
use crate::error::{Error, Result};

/// Thresholds of the circuit breaker. The defaults are the retry policy document's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// Opens when the share of failed outcomes in the window is above this. Defaults to 0.5.
    pub failure_threshold: f64,
    /// Outcomes needed in the window before it may open. Defaults to 4.
    pub min_samples: u32,
    /// The sliding window of outcomes. Defaults to 60 s.
    pub window: Duration,
    /// How long it stays open before letting a probe through. Defaults to 30 s.
    pub open_for: Duration,
    /// How long an event skipped while a probe is in flight waits before it is looked at
    /// again. Defaults to 1 s.
    pub probe_wait: Duration,
    /// Shared across the processes of the bus (named subscriptions; see [`report`]): a
    /// breaker that opens in one process opens in every process within its
    /// [`pause_refresh`](crate::BusConfig::pause_refresh), and half-open lets one probe through
    /// for the whole cluster. Defaults to `false` (each process decides for itself).
    pub shared: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failure_threshold: 0.5,
            min_samples: 4,
            window: Duration::from_secs(60),
            open_for: Duration::from_secs(30),
            probe_wait: Duration::from_secs(1),
            shared: false,
        }
    }
}

impl BreakerConfig {
    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if !(self.failure_threshold > 0.0 && self.failure_threshold < 1.0) {
            return Err(Error::invalid(
                "breaker.failure_threshold",
                format!("{}", self.failure_threshold),
                "a number between 0 and 1, both excluded",
            ));
        }
        if self.min_samples == 0 || self.window.is_zero() || self.open_for.is_zero() {
            return Err(Error::invalid(
                "breaker",
                format!(
                    "min_samples {}, window {:?}, open_for {:?}",
                    self.min_samples, self.window, self.open_for
                ),
                "min_samples, window and open_for all above zero",
            ));
        }
        Ok(())
    }
}

/// Where a breaker is.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Handlers run.
    Closed,
    /// Handlers are skipped; events are deferred.
    Open,
    /// One probe may run to decide between closed and open.
    HalfOpen,
}

impl BreakerState {
    /// The state's name: `closed`, `open`, `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The state named `text`, if it is one.
    pub fn parse(text: &str) -> Option<BreakerState> {
        [
            BreakerState::Closed,
            BreakerState::Open,
            BreakerState::HalfOpen,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for BreakerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What dispatch may do with a subscription's handler for one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Run it (closed).
    Run,
    /// Run it as the one half-open probe. Its outcome must be recorded, or the probe released.
    Probe,
    /// Skip it; the event is deferred until `retry_at`.
    Skip {
        /// When the breaker may admit it again.
        retry_at: Timestamp,
    },
}

/// A state change, for logging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// Before.
    pub from: BreakerState,
    /// After.
    pub to: BreakerState,
}

/// One subscription's breaker.
#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
    /// Outcomes in the window, one entry per millisecond: (time, runs, failures). Bounded by
    /// the window's length in ms whatever the event rate.
    outcomes: VecDeque<(Timestamp, u32, u32)>,
    /// Sums over `outcomes`.
    runs: u64,
    failures: u64,
    opened_at: Option<Timestamp>,
    probe_in_flight: bool,
    /// When a probe last closed it (here or, shared, in another process): an opening from
    /// before then is over.
    closed_at: Option<Timestamp>,
}

/// A breaker as the query API shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BreakerSnapshot {
    /// State.
    pub state: BreakerState,
    /// Share of failed outcomes in the window (0 when there are none).
    pub failure_rate: f64,
    /// Outcomes in the window.
    pub samples: u32,
    /// When it last opened, while open or half-open.
    pub opened_at: Option<Timestamp>,
    /// Whether a half-open probe is running.
    pub probe_in_flight: bool,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Self {
        Breaker {
            config,
            state: BreakerState::Closed,
            outcomes: VecDeque::new(),
            runs: 0,
            failures: 0,
            opened_at: None,
            probe_in_flight: false,
            closed_at: None,
        }
    }

    fn clear_outcomes(&mut self) {
        self.outcomes.clear();
        self.runs = 0;
        self.failures = 0;
    }

    fn push(&mut self, now: Timestamp, failed: bool) {
        let f = u32::from(failed);
        match self.outcomes.back_mut() {
            Some((t, runs, fails)) if *t == now => {
                *runs = runs.saturating_add(1);
                *fails = fails.saturating_add(f);
            }
            _ => self.outcomes.push_back((now, 1, f)),
        }
        self.runs += 1;
        self.failures += u64::from(f);
    }

    /// The state at `now` (an open breaker whose time is up reads as half-open).
    pub fn state(&self, now: Timestamp) -> BreakerState {
        match (self.state, self.opened_at) {
            (BreakerState::Open, Some(at)) if now >= at.plus(self.config.open_for) => {
                BreakerState::HalfOpen
            }
            (s, _) => s,
        }
    }

    fn prune(&mut self, now: Timestamp) {
        let horizon = now.minus(self.config.window);
        while let Some(&(t, runs, fails)) = self.outcomes.front() {
            if t > horizon {
                break;
            }
            self.outcomes.pop_front();
            self.runs -= u64::from(runs);
            self.failures -= u64::from(fails);
        }
    }

    fn move_to(&mut self, to: BreakerState) -> Option<Transition> {
        let from = self.state;
        self.state = to;
        (from != to).then_some(Transition { from, to })
    }

    /// Decides whether the handler may run for one event. Sets the probe flag when it admits
    /// the probe, so a second event dispatched concurrently is skipped. Returns the transition
    /// open → half-open when the open time is up.
    pub fn admit(&mut self, now: Timestamp) -> (Admission, Option<Transition>) {
        let mut transition = None;
        if self.state == BreakerState::Open && self.state(now) == BreakerState::HalfOpen {
            transition = self.move_to(BreakerState::HalfOpen);
        }
        let admission = match self.state {
            BreakerState::Closed => Admission::Run,
            BreakerState::Open => Admission::Skip {
                retry_at: self.opened_at.unwrap_or(now).plus(self.config.open_for),
            },
            BreakerState::HalfOpen if self.probe_in_flight => Admission::Skip {
                retry_at: now.plus(self.config.probe_wait),
            },
            BreakerState::HalfOpen => {
                self.probe_in_flight = true;
                Admission::Probe
            }
        };
        (admission, transition)
    }

    /// Records the outcome of a handler run admitted by [`admit`](Self::admit).
    pub fn record(&mut self, now: Timestamp, success: bool) -> Option<Transition> {
        match self.state {
            BreakerState::HalfOpen => {
                self.probe_in_flight = false;
                if success {
                    // A fresh start: the failures that opened it are history.
                    self.clear_outcomes();
                    self.opened_at = None;
                    self.closed_at = Some(now);
                    self.move_to(BreakerState::Closed)
                } else {
                    self.opened_at = Some(now);
                    self.move_to(BreakerState::Open)
                }
            }
            BreakerState::Closed => {
                self.push(now, !success);
                self.prune(now);
                if self.runs >= u64::from(self.config.min_samples)
                    && self.failures as f64 / self.runs as f64 > self.config.failure_threshold
                {
                    // The outcomes stay, so the query API shows the rate that opened it.
                    self.opened_at = Some(now);
                    self.move_to(BreakerState::Open)
                } else {
                    None
                }
            }
            // An outcome of a run admitted before the breaker opened: it changes nothing.
            BreakerState::Open => None,
        }
    }

    /// Releases an admitted probe that did not run (an earlier handler of the same event
    /// failed first), so the next event can probe. Without this the breaker would stay
    /// half-open with a probe "in flight" forever.
    pub fn release_probe(&mut self) {
        self.probe_in_flight = false;
    }

    /// Opens it as another process's breaker opened at `at` (a shared breaker): open until
    /// `at + open_for`, then half-open. Nothing changes if it is open since `at` already, or
    /// a probe closed it after `at` (that opening is over).
    pub fn force_open(&mut self, at: Timestamp) -> Option<Transition> {
        if self.opened_at == Some(at) && self.state != BreakerState::Closed
            || self.closed_at.is_some_and(|c| c >= at)
        {
            return None;
        }
        self.opened_at = Some(at);
        self.probe_in_flight = false;
        self.move_to(BreakerState::Open)
    }

    /// Closes it at `now` as another process's probe closed the shared breaker: a fresh start.
    pub fn force_close(&mut self, now: Timestamp) -> Option<Transition> {
        if self.state == BreakerState::Closed {
            return None;
        }
        self.clear_outcomes();
        self.closed_at = Some(now);
        self.opened_at = None;
        self.probe_in_flight = false;
        self.move_to(BreakerState::Closed)
    }

    /// The breaker as the query API shows it, at `now`.
    pub fn snapshot(&self, now: Timestamp) -> BreakerSnapshot {
        let horizon = now.minus(self.config.window);
        let (samples, failed) = self
            .outcomes
            .iter()
            .filter(|(t, _, _)| *t > horizon)
            .fold((0u64, 0u64), |(r, f), (_, runs, fails)| {
                (r + u64::from(*runs), f + u64::from(*fails))
            });
        BreakerSnapshot {
            state: self.state(now),
            failure_rate: if samples == 0 {
                0.0
            } else {
                failed as f64 / samples as f64
            },
            samples: u32::try_from(samples).unwrap_or(u32::MAX),
            opened_at: self.opened_at,
            probe_in_flight: self.probe_in_flight,
        }
    }
}

pub mod report;

#[cfg(test)]
mod tests;

//! Retry policy: defaults, per-subscription overrides and their merge, the delay formula, jitter.
//!
//! Attempt 1 runs at once; attempt `N` (N ≥ 2) waits `min(base * multiplier^(N-2), max)`, with
//! ±10 % random jitter. `max_retries` retries means `max_retries + 1` attempts in all.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How often and how fast a failed event is retried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    /// Retries after the first attempt. Defaults to 3 (so 4 attempts).
    pub max_retries: u32,
    /// Delay before the first retry. Defaults to 1000 ms.
    pub base_delay: Duration,
    /// Upper bound of any delay. Defaults to 30000 ms.
    pub max_delay: Duration,
    /// Growth factor of the delay per attempt. Defaults to 2.
    pub backoff_multiplier: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(1000),
            max_delay: Duration::from_millis(30_000),
            backoff_multiplier: 2.0,
        }
    }
}

/// Longest delay a policy may ask for.
pub const MAX_DELAY_LIMIT: Duration = Duration::from_secs(365 * 86_400);

/// Share of the delay added or removed at random (±10 %).
pub const JITTER: f64 = 0.10;

impl RetryPolicy {
    /// Total attempts allowed: `max_retries + 1`.
    pub fn max_attempts(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }

    /// The delay before `attempt` (1-based) without jitter: zero for attempt 1, then
    /// `min(base * multiplier^(attempt-2), max)`.
    pub fn delay(&self, attempt: u32) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let exp = i32::try_from(attempt - 2).unwrap_or(i32::MAX);
        let ms = self.base_delay.as_secs_f64() * 1000.0 * self.backoff_multiplier.powi(exp);
        let max_ms = self.max_delay.as_secs_f64() * 1000.0;
        Duration::try_from_secs_f64(ms.min(max_ms).max(0.0) / 1000.0).unwrap_or(self.max_delay)
    }

    /// The delay before `attempt` with jitter: `delay(attempt) * (1 + u)`, `u` uniform in ±10 %.
    pub fn delay_with_jitter(&self, attempt: u32) -> Duration {
        jitter(self.delay(attempt), fastrand::f64())
    }

    /// Checks that the values make sense.
    pub fn validate(&self) -> Result<()> {
        if !(self.backoff_multiplier.is_finite() && self.backoff_multiplier >= 1.0) {
            return Err(Error::invalid(
                "backoff_multiplier",
                format!("{}", self.backoff_multiplier),
                "a finite number of at least 1",
            ));
        }
        if self.max_delay > MAX_DELAY_LIMIT {
            return Err(Error::invalid(
                "max_delay",
                format!("{:?}", self.max_delay),
                "at most 365 days",
            ));
        }
        if self.max_delay < self.base_delay {
            return Err(Error::invalid(
                "max_delay",
                format!(
                    "{:?}, below base_delay {:?}",
                    self.max_delay, self.base_delay
                ),
                "at least base_delay, at most 365 days",
            ));
        }
        Ok(())
    }

    /// This policy with the fields set in `o` replaced (a partial override merges with defaults).
    #[must_use]
    pub fn with_override(&self, o: &RetryOverride) -> RetryPolicy {
        RetryPolicy {
            max_retries: o.max_retries.unwrap_or(self.max_retries),
            base_delay: o.base_delay.unwrap_or(self.base_delay),
            max_delay: o.max_delay.unwrap_or(self.max_delay),
            backoff_multiplier: o.backoff_multiplier.unwrap_or(self.backoff_multiplier),
        }
    }

    /// The most permissive policy for an event that matches several subscriptions.
    ///
    /// Subscriptions without an override take no part. If none has one, `default` is used.
    /// Otherwise the merge starts from the first override (completed with the defaults) and takes
    /// the max of `max_retries`, the min of `base_delay`, the max of `max_delay` and the max of
    /// `backoff_multiplier` across all of them.
    pub fn merge<'a>(
        default: &RetryPolicy,
        overrides: impl IntoIterator<Item = &'a RetryOverride>,
    ) -> RetryPolicy {
        let mut merged: Option<RetryPolicy> = None;
        for o in overrides {
            let p = default.with_override(o);
            merged = Some(match merged {
                None => p,
                Some(m) => RetryPolicy {
                    max_retries: m.max_retries.max(p.max_retries),
                    base_delay: m.base_delay.min(p.base_delay),
                    max_delay: m.max_delay.max(p.max_delay),
                    backoff_multiplier: m.backoff_multiplier.max(p.backoff_multiplier),
                },
            });
        }
        merged.unwrap_or(*default)
    }
}

/// Applies jitter: `u` in `[0, 1)` maps to a factor in `[0.9, 1.1)`.
pub fn jitter(delay: Duration, u: f64) -> Duration {
    let factor = 1.0 + JITTER * (2.0 * u.clamp(0.0, 1.0) - 1.0);
    Duration::try_from_secs_f64(delay.as_secs_f64() * factor).unwrap_or(delay)
}

/// A partial retry policy given with a subscription; unset fields come from the bus default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RetryOverride {
    /// Overrides [`RetryPolicy::max_retries`].
    pub max_retries: Option<u32>,
    /// Overrides [`RetryPolicy::base_delay`].
    pub base_delay: Option<Duration>,
    /// Overrides [`RetryPolicy::max_delay`].
    pub max_delay: Option<Duration>,
    /// Overrides [`RetryPolicy::backoff_multiplier`].
    pub backoff_multiplier: Option<f64>,
}

impl RetryOverride {
    /// Sets `max_retries`.
    #[must_use]
    pub fn max_retries(mut self, n: u32) -> Self {
        self.max_retries = Some(n);
        self
    }
    /// Sets `base_delay`.
    #[must_use]
    pub fn base_delay(mut self, d: Duration) -> Self {
        self.base_delay = Some(d);
        self
    }
    /// Sets `max_delay`.
    #[must_use]
    pub fn max_delay(mut self, d: Duration) -> Self {
        self.max_delay = Some(d);
        self
    }
    /// Sets `backoff_multiplier`.
    #[must_use]
    pub fn backoff_multiplier(mut self, m: f64) -> Self {
        self.backoff_multiplier = Some(m);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_are_the_specification_values() {
        let p = RetryPolicy::default();
        assert_eq!(p.max_retries, 3);
        assert_eq!(p.max_attempts(), 4);
        assert_eq!(p.base_delay, ms(1000));
        assert_eq!(p.max_delay, ms(30_000));
        assert_eq!(p.backoff_multiplier, 2.0);
    }

    #[test]
    fn the_delay_table() {
        let p = RetryPolicy::default();
        let table = [
            (1, 0),
            (2, 1000),
            (3, 2000),
            (4, 4000),
            (5, 8000),
            (6, 16000),
            (7, 30000),
        ];
        for (attempt, expected) in table {
            assert_eq!(p.delay(attempt), ms(expected), "attempt {attempt}");
        }
        assert_eq!(p.delay(60), ms(30_000));
        assert_eq!(p.delay(0), Duration::ZERO);
    }

    #[test]
    fn partial_override_spreads_over_defaults() {
        let o = RetryOverride::default().max_retries(5).base_delay(ms(500));
        let p = RetryPolicy::default().with_override(&o);
        assert_eq!(p.max_retries, 5);
        assert_eq!(p.base_delay, ms(500));
        assert_eq!(p.max_delay, ms(30_000));
        assert_eq!(p.backoff_multiplier, 2.0);
    }

    #[test]
    fn merge_takes_the_most_permissive_value_of_each_field() {
        let a = RetryOverride::default()
            .max_retries(5)
            .base_delay(ms(800))
            .max_delay(ms(10_000))
            .backoff_multiplier(1.5);
        let b = RetryOverride::default()
            .max_retries(2)
            .base_delay(ms(200))
            .max_delay(ms(60_000))
            .backoff_multiplier(3.0);
        let p = RetryPolicy::merge(&RetryPolicy::default(), [&a, &b]);
        assert_eq!(p.max_retries, 5);
        assert_eq!(p.base_delay, ms(200));
        assert_eq!(p.max_delay, ms(60_000));
        assert_eq!(p.backoff_multiplier, 3.0);
    }

    #[test]
    fn merge_without_overrides_is_the_default() {
        let d = RetryPolicy::default();
        assert_eq!(RetryPolicy::merge(&d, []), d);
    }

    #[test]
    fn merge_starts_from_the_first_override_not_from_defaults() {
        // A single override that lowers max_retries below the default must win.
        let o = RetryOverride::default().max_retries(1);
        let p = RetryPolicy::merge(&RetryPolicy::default(), [&o]);
        assert_eq!(p.max_retries, 1);
        // Two overrides both lower than the default: the max of the two, not the default 3.
        let o2 = RetryOverride::default().max_retries(2);
        assert_eq!(
            RetryPolicy::merge(&RetryPolicy::default(), [&o, &o2]).max_retries,
            2
        );
    }

    #[test]
    fn validation_rejects_nonsense() {
        let p = RetryPolicy {
            backoff_multiplier: 0.5,
            ..RetryPolicy::default()
        };
        assert!(matches!(p.validate(), Err(Error::Invalid(_))));
        let p = RetryPolicy {
            backoff_multiplier: f64::NAN,
            ..RetryPolicy::default()
        };
        assert!(p.validate().is_err());
        let p = RetryPolicy {
            base_delay: ms(10),
            max_delay: ms(5),
            ..RetryPolicy::default()
        };
        assert!(p.validate().is_err());
        assert!(RetryPolicy::default().validate().is_ok());
        let p = RetryPolicy {
            max_delay: Duration::MAX,
            ..RetryPolicy::default()
        };
        assert!(p.validate().is_err(), "absurd delays are refused");
        // Even unvalidated, an absurd policy never panics.
        assert_eq!(p.delay(200), Duration::MAX);
        assert_eq!(jitter(Duration::MAX, 1.0), Duration::MAX);
    }

    #[test]
    fn jitter_really_varies_the_delay() {
        let p = RetryPolicy::default();
        let samples: Vec<Duration> = (0..200).map(|_| p.delay_with_jitter(2)).collect();
        let min = samples.iter().min().copied().unwrap_or_default();
        let max = samples.iter().max().copied().unwrap_or_default();
        assert!(
            min < ms(990) && max > ms(1010),
            "no jitter: {min:?}..{max:?}"
        );
        assert!(
            min >= ms(900) && max <= ms(1100),
            "jitter out of bounds: {min:?}..{max:?}"
        );
    }

    #[test]
    fn jitter_extremes() {
        assert_eq!(jitter(ms(1000), 0.0), ms(900));
        assert_eq!(jitter(ms(1000), 0.5), ms(1000));
        assert_eq!(jitter(ms(1000), 1.0), ms(1100));
    }

    proptest! {
        #[test]
        fn jittered_delay_stays_within_ten_percent(attempt in 1u32..20) {
            let p = RetryPolicy::default();
            let d = p.delay(attempt).as_secs_f64();
            let j = p.delay_with_jitter(attempt).as_secs_f64();
            prop_assert!(j >= d * 0.9 - 1e-9 && j <= d * 1.1 + 1e-9, "{j} vs {d}");
        }

        #[test]
        fn delay_never_exceeds_max_and_never_shrinks(
            base in 1u64..5000, extra in 0u64..100_000, mult in 1.0f64..4.0, attempt in 2u32..40
        ) {
            let p = RetryPolicy {
                max_retries: 3,
                base_delay: ms(base),
                max_delay: ms(base + extra),
                backoff_multiplier: mult,
            };
            prop_assert!(p.delay(attempt) <= p.max_delay);
            prop_assert!(p.delay(attempt + 1) >= p.delay(attempt));
        }
    }
}

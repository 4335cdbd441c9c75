//! A token bucket on an injected clock: the pace of a rate-limited replay.

use std::time::Duration;

use crate::clock::Timestamp;

/// Tokens arrive at `rate` per second up to a burst of `rate / 20` (50 ms of them, at least
/// one). The bucket starts full. Over any window of `w` seconds at most `rate × w + burst`
/// tokens are taken, and a taker that keeps up gets at least `rate × w − burst`: within 0.5 %
/// over 10 s.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Timestamp,
}

impl TokenBucket {
    /// A full bucket of `per_second` tokens a second (at least 1), as of `now`.
    pub fn new(per_second: u32, now: Timestamp) -> Self {
        let rate = f64::from(per_second.max(1));
        let burst = (rate / 20.0).floor().max(1.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    /// The largest number of tokens it ever holds.
    pub fn burst(&self) -> u64 {
        // The burst is a whole number between 1 and 50,000.
        self.burst as u64
    }

    fn refill(&mut self, now: Timestamp) {
        let elapsed = now.as_millis() - self.last.as_millis();
        if elapsed > 0 {
            self.tokens = (self.tokens + elapsed as f64 * self.rate / 1000.0).min(self.burst);
            self.last = now;
        }
    }

    /// Whole tokens available at `now`.
    pub fn available(&mut self, now: Timestamp) -> u64 {
        self.refill(now);
        // Never negative, never above the burst.
        self.tokens.floor().max(0.0) as u64
    }

    /// How long until `want` tokens (capped at the burst) are available, as of `now`: zero if
    /// they are.
    pub fn wait(&mut self, now: Timestamp, want: u64) -> Duration {
        self.refill(now);
        let want = (want as f64).clamp(1.0, self.burst);
        if self.tokens >= want {
            return Duration::ZERO;
        }
        let ms = ((want - self.tokens) * 1000.0 / self.rate).ceil();
        Duration::from_millis(ms as u64)
    }

    /// Takes `n` tokens at `now` (the caller checked they were available; taking more leaves a
    /// debt that later refills pay first).
    pub fn take(&mut self, now: Timestamp, n: u64) {
        self.refill(now);
        self.tokens -= n as f64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn starts_full_and_refills_at_the_rate() {
        let mut b = TokenBucket::new(2000, Timestamp(0));
        assert_eq!(b.burst(), 100);
        assert_eq!(b.available(Timestamp(0)), 100);
        b.take(Timestamp(0), 100);
        assert_eq!(b.available(Timestamp(0)), 0);
        assert_eq!(b.available(Timestamp(10)), 20);
        assert_eq!(b.wait(Timestamp(10), 100), Duration::from_millis(40));
        assert_eq!(b.available(Timestamp(10_000)), 100, "never above the burst");
    }

    #[test]
    fn a_slow_rate_still_has_one_token() {
        let mut b = TokenBucket::new(3, Timestamp(0));
        assert_eq!(b.burst(), 1);
        b.take(Timestamp(0), 1);
        assert_eq!(b.wait(Timestamp(0), 5), Duration::from_millis(334));
        assert_eq!(b.available(Timestamp(334)), 1);
    }

    /// A taker that waits as told and takes what is there: count per 10 s window.
    fn simulate(rate: u32, step_ms: i64, seconds: i64) -> Vec<(i64, u64)> {
        let mut b = TokenBucket::new(rate, Timestamp(0));
        let mut now = 0i64;
        let mut taken = Vec::new();
        while now < seconds * 1000 {
            let n = b.available(Timestamp(now));
            if n > 0 {
                b.take(Timestamp(now), n);
                taken.push((now, n));
            }
            let wait = b.wait(Timestamp(now), b.burst()).as_millis() as i64;
            now += wait.max(step_ms);
        }
        taken
    }

    proptest! {
        #[test]
        fn every_ten_second_window_after_the_first_second_is_within_ten_percent(
            rate in 1u32..20_000,
            // A taker that keeps up: wakes within half the burst's 50 ms.
            step in 1i64..25,
        ) {
            let taken = simulate(rate, step, 25);
            for start in (1_000..=14_000).step_by(500) {
                let n: u64 = taken
                    .iter()
                    .filter(|(t, _)| *t >= start && *t < start + 10_000)
                    .map(|(_, n)| n)
                    .sum();
                let want = f64::from(rate) * 10.0;
                prop_assert!(
                    (n as f64 - want).abs() <= want * 0.1,
                    "rate {rate}, step {step} ms, window at {start} ms: {n} taken, want {want}"
                );
            }
        }
    }
}

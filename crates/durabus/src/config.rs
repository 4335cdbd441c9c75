//! Bus configuration. Every setting documents its default.

use std::time::Duration;

use crate::breaker::BreakerConfig;
use crate::dlq::DeadLetterPolicy;
use crate::error::{Error, Result};
#[allow(unused_imports)]
use crate::hook::ErrorHook;
use crate::retry::RetryPolicy;
use crate::scheduler::SchedulerConfig;
pub use crate::telemetry::MetricsConfig;

/// Settings of an [`EventBus`](crate::EventBus).
#[derive(Debug, Clone)]
pub struct BusConfig {
    /// Retry policy used when no matching subscription overrides it. Defaults to
    /// [`RetryPolicy::default`] (3 retries, 1 s base, 30 s max, multiplier 2).
    pub retry: RetryPolicy,
    /// How long one handler may run before it counts as failed. Defaults to 30 s.
    pub handler_timeout: Duration,
    /// How long [`shutdown`](crate::EventBus::shutdown) waits for in-flight dispatches.
    /// Defaults to 30 s.
    pub shutdown_timeout: Duration,
    /// Largest serialised payload accepted, in bytes. Defaults to 1 MiB.
    pub max_payload_bytes: usize,
    /// Events the background workers deliver at the same time (handlers of one event always
    /// run one after another). Defaults to 16.
    pub concurrency: usize,
    /// Most events one claim takes from the store, whatever the free slots. Defaults to 256.
    pub claim_batch: usize,
    /// Events a claim takes beyond the free delivery slots: they wait in the worker's queue
    /// so a slot that frees up finds its next event at once. A claim takes at most
    /// `free slots + prefetch` events (and at most `claim_batch`), so a worker never holds
    /// (on PostgreSQL: leases) many more events than it can run. While handlers are fast the
    /// prefetch grows to what the worker finishes in 50 ms; while a backlog lasts, the next
    /// claim runs beside the deliveries once the queue is half down, counting the queue
    /// against the same bound. Defaults to 16.
    pub prefetch: usize,
    /// Longest the dispatcher sleeps without looking at the store: the fallback that picks up
    /// events written by other processes. Defaults to 500 ms.
    pub poll_interval: Duration,
    /// Circuit breaker thresholds, the same for every subscription. Defaults to
    /// [`BreakerConfig::default`] (> 50 % failed of ≥ 4 in 1 min opens it for 30 s).
    pub breaker: BreakerConfig,
    /// When dead letters are retried automatically. Defaults to
    /// [`DeadLetterPolicy::default`] (1 h, 6 h, 24 h, then manual only).
    pub dead_letters: DeadLetterPolicy,
    /// The maintenance jobs a started bus runs. Defaults to [`SchedulerConfig::default`]
    /// (dead-letter auto retry every 15 minutes, cleanups daily at 03:00 UTC).
    pub scheduler: SchedulerConfig,
    /// How often a started bus looks for durable operations to run (submitted ones, and
    /// ones whose runner died). Defaults to 1 s.
    pub operations_poll: Duration,
    /// How often a started bus reads the active pauses (see [`crate::pause`]): a pause made
    /// by another process takes effect here within this time (a pause made through this bus
    /// at once); an expired one ends, and the events it parked are woken, within it too.
    /// 10 ms to 10 s; defaults to 500 ms.
    pub pause_refresh: Duration,
    /// Automatic payload snapshots: every published payload at stage `published`, and each
    /// failed attempt's payload and error at stage `error`, as the payload configuration of
    /// the event's type says, written in the transaction of the publish or the outcome.
    /// Defaults to `false`.
    pub payload_snapshots: bool,
    /// The Prometheus metrics: name prefix and how long store gauges are cached. Defaults to
    /// [`MetricsConfig::default`] (`durabus_`, 15 s).
    pub metrics: MetricsConfig,
    /// Whether a started bus delivers events: recovers what a crash left in `processing`,
    /// claims due events and runs handlers. `false` makes an operations-only bus (for an admin
    /// server beside the application's workers, such as `durabus serve`): it still publishes,
    /// runs the maintenance jobs and durable operations (bulk dead-letter actions, replays),
    /// but never claims an event and never touches another process's `processing` events.
    /// Defaults to `true`.
    pub deliver: bool,
    /// Called with every error the bus meets in the background (see [`ErrorHook`]). Defaults
    /// to none: such errors only reach `tracing`.
    pub on_error: crate::hook::ErrorHook,
    /// How long the worker loop pauses after a claim fails (the store down, locked or
    /// refusing): [`Backoff::default`], 20 ms doubling to 2.56 s, reset by the next claim that
    /// works. Each failure also reaches [`on_error`](Self::on_error).
    pub error_backoff: Backoff,
}

/// A pause that doubles with each failure in a row, up to a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The pause after the first failure. Must be above zero.
    pub initial: Duration,
    /// The longest pause. At least `initial`.
    pub max: Duration,
}

impl Default for Backoff {
    /// 20 ms, doubling to 2.56 s (the eighth failure in a row and later).
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(2_560),
        }
    }
}

impl Backoff {
    /// The pause after `failures` failures in a row (1 for the first): `initial` doubled
    /// `failures - 1` times, at most `max`.
    pub fn pause(&self, failures: u32) -> Duration {
        let doublings = failures.saturating_sub(1).min(32);
        self.initial
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max)
    }

    /// Checks the values.
    pub fn validate(&self) -> Result<()> {
        if self.initial.is_zero() || self.max < self.initial {
            return Err(Error::invalid(
                "error_backoff",
                format!("initial {:?}, max {:?}", self.initial, self.max),
                "an initial pause above zero and a max of at least the initial",
            ));
        }
        Ok(())
    }
}

impl Default for BusConfig {
    fn default() -> Self {
        BusConfig {
            retry: RetryPolicy::default(),
            handler_timeout: Duration::from_secs(30),
            shutdown_timeout: Duration::from_secs(30),
            max_payload_bytes: 1024 * 1024,
            concurrency: 16,
            claim_batch: 256,
            prefetch: 16,
            poll_interval: Duration::from_millis(500),
            breaker: BreakerConfig::default(),
            dead_letters: DeadLetterPolicy::default(),
            scheduler: SchedulerConfig::default(),
            operations_poll: Duration::from_secs(1),
            pause_refresh: Duration::from_millis(500),
            payload_snapshots: false,
            metrics: MetricsConfig::default(),
            deliver: true,
            on_error: crate::hook::ErrorHook::default(),
            error_backoff: Backoff::default(),
        }
    }
}

impl BusConfig {
    /// Checks every value.
    pub fn validate(&self) -> Result<()> {
        self.retry.validate()?;
        self.breaker.validate()?;
        self.scheduler.validate()?;
        self.metrics.validate()?;
        self.error_backoff.validate()?;
        if self.handler_timeout.is_zero() {
            return Err(Error::invalid(
                "handler_timeout",
                "zero",
                "a duration above zero",
            ));
        }
        if self.claim_batch == 0 {
            return Err(Error::invalid("claim_batch", "zero", "at least 1"));
        }
        if self.concurrency == 0 {
            return Err(Error::invalid("concurrency", "zero", "at least 1"));
        }
        if self.max_payload_bytes == 0 {
            return Err(Error::invalid("max_payload_bytes", "zero", "at least 1"));
        }
        if !(Duration::from_millis(10)..=Duration::from_secs(10)).contains(&self.pause_refresh) {
            return Err(Error::invalid(
                "pause_refresh",
                format!("{:?}", self.pause_refresh),
                "10 ms to 10 s",
            ));
        }
        if self.operations_poll.is_zero() {
            return Err(Error::invalid(
                "operations_poll",
                "zero",
                "a duration above zero",
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::invalid(
                "poll_interval",
                "zero",
                "a duration above zero",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_error_backoff_doubles_from_its_start_up_to_its_limit() {
        let b = Backoff::default();
        let ms = |n| b.pause(n).as_millis();
        assert_eq!(
            (ms(1), ms(2), ms(3), ms(8), ms(9), ms(1_000)),
            (20, 40, 80, 2_560, 2_560, 2_560)
        );
        let custom = Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(12),
        };
        assert_eq!(custom.pause(0), Duration::from_millis(5));
        assert_eq!(custom.pause(2), Duration::from_millis(10));
        assert_eq!(custom.pause(3), Duration::from_millis(12));
        assert!(custom.validate().is_ok());
        for bad in [
            Backoff {
                initial: Duration::ZERO,
                max: Duration::from_secs(1),
            },
            Backoff {
                initial: Duration::from_secs(2),
                max: Duration::from_secs(1),
            },
        ] {
            let config = BusConfig {
                error_backoff: bad,
                ..BusConfig::default()
            };
            assert!(config.validate().is_err(), "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn defaults_are_the_documented_ones() {
        let c = BusConfig::default();
        assert_eq!(c.handler_timeout, Duration::from_secs(30));
        assert_eq!(c.shutdown_timeout, Duration::from_secs(30));
        assert_eq!(c.max_payload_bytes, 1024 * 1024);
        assert_eq!(c.concurrency, 16);
        assert_eq!(c.retry, RetryPolicy::default());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn nonsense_is_refused() {
        for bad in [
            BusConfig {
                handler_timeout: Duration::ZERO,
                ..BusConfig::default()
            },
            BusConfig {
                concurrency: 0,
                ..BusConfig::default()
            },
            BusConfig {
                max_payload_bytes: 0,
                ..BusConfig::default()
            },
            BusConfig {
                poll_interval: Duration::ZERO,
                ..BusConfig::default()
            },
        ] {
            assert!(matches!(bad.validate(), Err(Error::Invalid(_))), "{bad:?}");
        }
    }
}

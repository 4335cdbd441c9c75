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
            payload_snapshots: false,
            metrics: MetricsConfig::default(),
            deliver: true,
            on_error: crate::hook::ErrorHook::default(),
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
        if self.handler_timeout.is_zero() {
            return Err(Error::InvalidConfig(
                "handler_timeout must be above zero".into(),
            ));
        }
        if self.claim_batch == 0 {
            return Err(Error::InvalidConfig(
                "claim_batch must be at least 1".into(),
            ));
        }
        if self.concurrency == 0 {
            return Err(Error::InvalidConfig(
                "concurrency must be at least 1".into(),
            ));
        }
        if self.max_payload_bytes == 0 {
            return Err(Error::InvalidConfig(
                "max_payload_bytes must be at least 1".into(),
            ));
        }
        if self.operations_poll.is_zero() {
            return Err(Error::InvalidConfig(
                "operations_poll must be above zero".into(),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(Error::InvalidConfig(
                "poll_interval must be above zero".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
            assert!(
                matches!(bad.validate(), Err(Error::InvalidConfig(_))),
                "{bad:?}"
            );
        }
    }
}

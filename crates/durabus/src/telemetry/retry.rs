//! Retry metrics kept in-process: retries, success after retry, dead letters per event type,
//! and how many attempts events needed. Field names are the Prometheus names without the
//! `durabus_` prefix. The bus's own `system.*` events (a `system.dead_letter` per dead letter)
//! are not counted here: each would add a success to the application's rates.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

/// Counters of one event type.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TypeMetrics {
    /// Events of this type that ended `done`.
    pub events_succeeded_total: u64,
    /// Events of this type that ended `dlq`.
    pub events_dead_lettered_total: u64,
    /// Delivery attempts of this type that were retries.
    pub retries_total: u64,
    /// `dead_lettered / (succeeded + dead_lettered)`; 0 before any event ended.
    pub dlq_rate: f64,
}

/// A copy of the metrics at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MetricsSnapshot {
    /// Delivery attempts that ended in success or failure (deferred passes are counted in
    /// `events_deferred_total` only).
    pub delivery_attempts_total: u64,
    /// Attempts that were retries (the event had failed before).
    pub retries_total: u64,
    /// Attempts that failed (error, timeout or panic).
    pub failed_attempts_total: u64,
    /// Events that ended `done`.
    pub events_succeeded_total: u64,
    /// Events that ended `done` after at least one failed attempt.
    pub events_succeeded_after_retry_total: u64,
    /// Events that ended `dlq`.
    pub events_dead_lettered_total: u64,
    /// Passes in which an open circuit breaker deferred the event for a handler.
    pub events_deferred_total: u64,
    /// Of the events that needed a retry and then ended, the share that ended `done`; 0 before
    /// any did.
    pub success_after_retry_rate: f64,
    /// Counters per event type.
    pub by_type: BTreeMap<String, TypeMetrics>,
    /// Events that ended (`done` or `dlq`) by the number of attempts they used.
    pub attempts_histogram: BTreeMap<u32, u64>,
}

#[derive(Debug, Default)]
struct State {
    snap: MetricsSnapshot,
    dead_after_retry: u64,
}

/// The bus's retry metrics.
#[derive(Debug, Default)]
pub struct RetryMetrics {
    state: Mutex<State>,
}

/// How a delivery pass ended, for the metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    Succeeded,
    Failed { dead: bool },
    Deferred,
}

impl RetryMetrics {
    /// Counts one delivery pass over an event that had `prior_failures` failed attempts.
    pub(crate) fn record(&self, event_type: &str, prior_failures: u32, pass: Pass) {
        if crate::pattern::is_system_type(event_type) {
            return;
        }
        let mut st = crate::sync::lock(&self.state);
        let retry = prior_failures > 0;
        let s = &mut st.snap;
        if !s.by_type.contains_key(event_type) {
            s.by_type
                .insert(event_type.to_owned(), TypeMetrics::default());
        }
        let Some(t) = s.by_type.get_mut(event_type) else {
            return;
        };
        // A deferred pass is no attempt for the handler it skipped: it is counted apart.
        if pass != Pass::Deferred {
            s.delivery_attempts_total += 1;
            if retry {
                s.retries_total += 1;
                t.retries_total += 1;
            }
        }
        let attempts = match pass {
            Pass::Succeeded => {
                s.events_succeeded_total += 1;
                t.events_succeeded_total += 1;
                if retry {
                    s.events_succeeded_after_retry_total += 1;
                }
                Some(prior_failures + 1)
            }
            Pass::Failed { dead } => {
                s.failed_attempts_total += 1;
                if dead {
                    s.events_dead_lettered_total += 1;
                    t.events_dead_lettered_total += 1;
                }
                dead.then_some(prior_failures + 1)
            }
            Pass::Deferred => {
                s.events_deferred_total += 1;
                None
            }
        };
        let ended = t.events_succeeded_total + t.events_dead_lettered_total;
        if ended > 0 {
            t.dlq_rate = t.events_dead_lettered_total as f64 / ended as f64;
        }
        if let Some(n) = attempts {
            *s.attempts_histogram.entry(n).or_default() += 1;
        }
        if matches!(pass, Pass::Failed { dead: true }) && retry {
            st.dead_after_retry += 1;
        }
        let retried_and_ended = st.snap.events_succeeded_after_retry_total + st.dead_after_retry;
        if retried_and_ended > 0 {
            st.snap.success_after_retry_rate =
                st.snap.events_succeeded_after_retry_total as f64 / retried_and_ended as f64;
        }
    }

    /// A copy of the current values.
    pub fn snapshot(&self) -> MetricsSnapshot {
        crate::sync::lock(&self.state).snap.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scripted_sequence_gives_the_expected_values() {
        let m = RetryMetrics::default();
        m.record("a.ok", 0, Pass::Succeeded);
        m.record("a.flaky", 0, Pass::Failed { dead: false });
        m.record("a.flaky", 1, Pass::Succeeded);
        m.record("a.bad", 0, Pass::Failed { dead: false });
        m.record("a.bad", 1, Pass::Failed { dead: true });
        m.record("a.ok", 0, Pass::Deferred);
        m.record("a.flaky", 1, Pass::Deferred);
        let s = m.snapshot();
        assert_eq!(s.delivery_attempts_total, 5);
        assert_eq!(s.retries_total, 2);
        assert_eq!(s.failed_attempts_total, 3);
        assert_eq!(s.events_succeeded_total, 2);
        assert_eq!(s.events_succeeded_after_retry_total, 1);
        assert_eq!(s.events_dead_lettered_total, 1);
        assert_eq!(s.events_deferred_total, 2);
        assert_eq!(s.success_after_retry_rate, 0.5);
        assert_eq!(s.by_type["a.bad"].dlq_rate, 1.0);
        assert_eq!(s.by_type["a.ok"].dlq_rate, 0.0);
        assert_eq!(s.by_type["a.flaky"].retries_total, 1);
        assert_eq!(s.attempts_histogram, BTreeMap::from([(1, 1), (2, 2)]));
    }

    #[test]
    fn the_bus_s_own_events_are_not_counted() {
        let m = RetryMetrics::default();
        m.record("system.dead_letter", 0, Pass::Succeeded);
        assert_eq!(m.snapshot(), MetricsSnapshot::default());
    }

    #[test]
    fn a_dead_letter_without_retries_does_not_move_the_after_retry_rate() {
        let m = RetryMetrics::default();
        m.record("x", 0, Pass::Failed { dead: true });
        let s = m.snapshot();
        assert_eq!(s.success_after_retry_rate, 0.0);
        assert_eq!(s.by_type["x"].dlq_rate, 1.0);
        assert_eq!(s.attempts_histogram, BTreeMap::from([(1, 1)]));
    }
}

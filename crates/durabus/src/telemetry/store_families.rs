//! The store gauges' families: set from a reading of the store at each scrape.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{ScrapeInput, StoreGauges, StoreKind};

type One = [(&'static str, String); 1];
type Two = [(&'static str, String); 2];
type F64Gauge = Gauge<f64, AtomicU64>;

fn one(key: &'static str, value: &str) -> One {
    [(key, value.to_owned())]
}

/// The gauges set at each scrape.
#[derive(Default)]
pub(super) struct Gauges {
    events: Family<One, Gauge>,
    oldest_due_age: F64Gauge,
    scheduled_overdue: F64Gauge,
    dead_letters: Family<One, Gauge>,
    oldest_dead_letter_age: F64Gauge,
    pool: Family<One, Gauge>,
    pool_waiters: Gauge,
    wal_bytes: Gauge,
    live_workers: Gauge,
    store_up: Gauge,
    failure_group_dead_letters: Family<One, Gauge>,
    failure_groups_new: Gauge,
    dead_letter_records: Family<Two, Gauge>,
    held_keys: Gauge,
    held_key_age: F64Gauge,
    pause_seconds: Family<Two, F64Gauge>,
    pause_parked: Family<Two, Gauge>,
    breaker_reported: Family<Two, Gauge>,
    concurrency: Family<Two, Gauge>,
}

impl Gauges {
    /// The gauges, registered in `registry` (the store's own for `kind`).
    pub(super) fn register(registry: &mut Registry, kind: StoreKind) -> Gauges {
        let gauges = Gauges::default();
        registry.register(
            "events",
            "Events published for later (status=scheduled), waiting (status=pending) and being \
             delivered (status=processing)",
            gauges.events.clone(),
        );
        registry.register(
            "oldest_due_event_age_seconds",
            "How long the earliest due pending event has been due (0: none)",
            gauges.oldest_due_age.clone(),
        );
        registry.register(
            "scheduled_event_overdue_seconds",
            "How long the earliest scheduled event has been due without being claimed (0: none \
             due); above a second or so, the workers are behind or stopped",
            gauges.scheduled_overdue.clone(),
        );
        registry.register(
            "ordering_keys_held",
            "Ordering keys held by a dead letter (hold_key_on_dead_letter): their later events \
             wait until it is retried or closed",
            gauges.held_keys.clone(),
        );
        registry.register(
            "ordering_key_held_seconds",
            "How long the longest-held ordering key has been held by a dead letter (0: none)",
            gauges.held_key_age.clone(),
        );
        registry.register(
            "dead_letters",
            "Open dead letters by status (pending, retrying)",
            gauges.dead_letters.clone(),
        );
        registry.register(
            "oldest_pending_dead_letter_age_seconds",
            "Age of the oldest pending dead letter (0: none)",
            gauges.oldest_dead_letter_age.clone(),
        );
        registry.register(
            "failure_group_dead_letters",
            "Dead-letter records per failure group (group: its fingerprint) for the groups with \
             the most open dead letters, the rest as group=\"other\"; rate() of it is a group's \
             trend",
            gauges.failure_group_dead_letters.clone(),
        );
        registry.register(
            "dead_letter_records",
            "Dead-letter records by event type and status (pending, retrying, resolved, \
             abandoned) for the types with the most open dead letters, the rest as \
             type=\"other\"",
            gauges.dead_letter_records.clone(),
        );
        registry.register(
            "failure_groups_new",
            "Failure groups whose first failure is less than an hour old (errors never seen \
             before; each is also announced by a system.failure_group.new event)",
            gauges.failure_groups_new.clone(),
        );
        registry.register(
            "pause_seconds",
            "How long each active pause has held (scope: subscription, matching or bus; target: \
             the subscription's name or the pattern, empty for the bus); absent when nothing is \
             paused",
            gauges.pause_seconds.clone(),
        );
        registry.register(
            "pause_parked_events",
            "Events each active pause holds parked (due when it ends), by scope and target",
            gauges.pause_parked.clone(),
        );
        registry.register(
            "breaker_reported_state",
            "Circuit breaker state by subscription and process, as every process reported it to \
             the store in the last minute: 0 closed, 1 half-open, 2 open",
            gauges.breaker_reported.clone(),
        );
        registry.register(
            "concurrency_limit",
            "Each subscription's concurrency limit by what: the limit (max), the runs holding a \
             slot (in_flight) and the events waiting in line (waiting)",
            gauges.concurrency.clone(),
        );
        registry.register(
            "store_up",
            "1 if the last read of the store's gauges succeeded, 0 if the store could not be \
             read (the other store gauges then keep their last values)",
            gauges.store_up.clone(),
        );
        match kind {
            StoreKind::Postgres => {
                registry.register(
                    "db_pool_connections",
                    "Connections of the store's pool by state (idle, active, max)",
                    gauges.pool.clone(),
                );
                registry.register(
                    "db_pool_waiters",
                    "The bus's statements waiting for a connection of the store's pool at the \
                     scrape; above 0 for long, the pool is too small for the load",
                    gauges.pool_waiters.clone(),
                );
                registry.register(
                    "live_workers",
                    "Worker processes holding a live lease on an event",
                    gauges.live_workers.clone(),
                );
            }
            StoreKind::Sqlite => {
                registry.register(
                    "sqlite_wal_bytes",
                    "Size of the SQLite write-ahead log file",
                    gauges.wal_bytes.clone(),
                );
            }
        }
        gauges
    }

    /// Sets every gauge from `input`.
    pub(super) fn set(&self, input: &ScrapeInput) {
        let g = self;
        let s = &input.store;
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        g.store_up.set(i64::from(input.store_up));
        g.events
            .get_or_create(&one("status", "pending"))
            .set(int(s.pending));
        g.events
            .get_or_create(&one("status", "processing"))
            .set(int(s.processing));
        g.events
            .get_or_create(&one("status", "scheduled"))
            .set(int(s.scheduled));
        g.scheduled_overdue
            .set(StoreGauges::age(s.next_scheduled_at, input.now));
        g.held_keys.set(int(s.held_keys));
        g.held_key_age
            .set(StoreGauges::age(s.oldest_held_key_at, input.now));
        g.oldest_due_age
            .set(StoreGauges::age(s.oldest_due_at, input.now));
        g.dead_letters
            .get_or_create(&one("status", "pending"))
            .set(int(s.dead_letters_pending));
        g.dead_letters
            .get_or_create(&one("status", "retrying"))
            .set(int(s.dead_letters_retrying));
        g.oldest_dead_letter_age
            .set(StoreGauges::age(s.oldest_pending_dead_letter_at, input.now));
        if let Some(pool) = s.pool {
            for (state, v) in [
                ("idle", pool.idle),
                ("active", pool.active),
                ("max", pool.max),
            ] {
                g.pool.get_or_create(&one("state", state)).set(int(v));
            }
            g.pool_waiters.set(int(pool.waiting));
        }
        g.wal_bytes.set(int(s.wal_bytes.unwrap_or(0)));
        g.failure_groups_new.set(int(s.failure_groups_new));
        // The labelled groups change as groups grow and close: the family is rebuilt, so a
        // group that left the top is no longer reported under its own label.
        g.failure_group_dead_letters.clear();
        let mut labelled = 0u64;
        for (group, count) in &s.failure_groups {
            labelled = labelled.saturating_add(*count);
            g.failure_group_dead_letters
                .get_or_create(&one("group", group))
                .set(int(*count));
        }
        g.failure_group_dead_letters
            .get_or_create(&one("group", "other"))
            .set(int(s.dead_letter_records.saturating_sub(labelled)));
        g.live_workers.set(int(s.live_workers.unwrap_or(0)));
        // Rebuilt at each reading: a removed limit has no series.
        g.concurrency.clear();
        for (sub, max, in_flight, waiting) in &s.concurrency {
            for (what, v) in [
                ("max", u64::from(*max)),
                ("in_flight", *in_flight),
                ("waiting", *waiting),
            ] {
                g.concurrency
                    .get_or_create(&[("subscription", sub.clone()), ("what", what.to_owned())])
                    .set(int(v));
            }
        }
        // Rebuilt at each reading: a process that stopped reporting has no series.
        g.breaker_reported.clear();
        for (sub, process, state) in &s.breakers {
            let v = match state {
                crate::breaker::BreakerState::Closed => 0,
                crate::breaker::BreakerState::HalfOpen => 1,
                crate::breaker::BreakerState::Open => 2,
            };
            g.breaker_reported
                .get_or_create(&[("subscription", sub.clone()), ("process", process.clone())])
                .set(v);
        }
        // Rebuilt at each reading: a pause that ended has no series.
        g.pause_seconds.clear();
        g.pause_parked.clear();
        for (scope, target, since, parked) in &s.pauses {
            let labels = [("scope", scope.clone()), ("target", target.clone())];
            g.pause_seconds
                .get_or_create(&labels)
                .set(StoreGauges::age(Some(*since), input.now));
            g.pause_parked.get_or_create(&labels).set(int(*parked));
        }
        // Rebuilt like the groups: a type that left the top is counted in `other` from then.
        g.dead_letter_records.clear();
        for (ty, status, n) in &s.dead_letter_types {
            g.dead_letter_records
                .get_or_create(&[("type", ty.clone()), ("status", status.clone())])
                .set(int(*n));
        }
    }
}

//! The metric families (prometheus-client) and their encoding.

use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::retry::Pass;
use super::store_families::Gauges;
use super::{
    LATENCY_BUCKETS, PROCESSING_BUCKETS, RunResult, STORE_BUCKETS, ScrapeInput, StoreCall,
    StoreKind,
};
use crate::error::{Error, Result};
use crate::sync::{read, write};

type One = [(&'static str, String); 1];
type Two = [(&'static str, String); 2];
type Hist = Family<One, Histogram, fn() -> Histogram>;
type F64Gauge = Gauge<f64, AtomicU64>;

fn latency() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

fn store_buckets() -> Histogram {
    Histogram::new(STORE_BUCKETS)
}

fn processing() -> Histogram {
    Histogram::new(PROCESSING_BUCKETS)
}

fn one(key: &'static str, value: &str) -> One {
    [(key, value.to_owned())]
}

fn two(k1: &'static str, v1: &str, k2: &'static str, v2: &str) -> Two {
    [(k1, v1.to_owned()), (k2, v2.to_owned())]
}

/// What this process counts, and the process gauges.
struct Counted {
    published: Family<One, Counter>,
    delivered: Family<One, Counter>,
    retried: Family<One, Counter>,
    dead_lettered: Family<One, Counter>,
    deferred: Family<One, Counter>,
    handler_runs: Family<Two, Counter>,
    breaker_transitions: Family<Two, Counter>,
    dead_letter_actions: Family<Two, Counter>,
    replay_events: Family<One, Counter>,
    replays: Family<One, Counter>,
    handler_duration: Hist,
    processing: Hist,
    store_calls: Hist,
    /// Its three series (by [`StoreCall`] in declaration order), taken once.
    store_by_call: [Histogram; 3],
    breaker_state: Family<One, Gauge>,
    resident: Gauge,
    virtual_memory: Gauge,
    cpu: Counter<f64, AtomicU64>,
    fds: Gauge,
    uptime: F64Gauge,
}

/// The counters of one event type, taken from their families once: the hot path finds them
/// by the type's `&str` (no label set built, nothing allocated).
struct PerType {
    published: Counter,
    delivered: Counter,
    retried: Counter,
    dead_lettered: Counter,
    deferred: Counter,
    processing: Histogram,
}

/// The handler metrics of one subscription label, likewise.
struct PerSub {
    /// By [`RunResult`] in declaration order.
    runs: [Counter; 5],
    duration: Histogram,
}

/// Every family of one registry.
pub(super) struct Families {
    registry: Registry,
    gauges: Gauges,
    counted: Option<Counted>,
    types: RwLock<HashMap<String, PerType>>,
    subs: RwLock<HashMap<String, PerSub>>,
    /// Publish → handler start (first attempts).
    pub delivery_latency: Histogram,
}

impl Families {
    /// The families under `prefix`; `counted`: also the counters, histograms and process
    /// gauges of a running bus.
    pub fn new(prefix: &str, kind: StoreKind, counted: bool) -> Families {
        let mut registry = Registry::with_prefix(prefix);
        let gauges = Gauges::register(&mut registry, kind);
        let counted = counted.then(|| Counted::register(&mut registry));
        let delivery_latency = latency();
        if counted.is_some() {
            registry.register(
                "delivery_latency_seconds",
                "Time from publish to the start of the first handler run of an event",
                delivery_latency.clone(),
            );
        }
        Families {
            registry,
            gauges,
            counted,
            types: RwLock::new(HashMap::new()),
            subs: RwLock::new(HashMap::new()),
            delivery_latency,
        }
    }

    fn counted(&self) -> Option<&Counted> {
        self.counted.as_ref()
    }

    /// Runs `f` on `event_type`'s counters (made, at zero, the first time the type is seen).
    fn with_type(&self, c: &Counted, event_type: &str, f: impl FnOnce(&PerType)) {
        if let Some(t) = read(&self.types).get(event_type) {
            return f(t);
        }
        let label = one("type", event_type);
        let made = PerType {
            published: c.published.get_or_create_owned(&label),
            delivered: c.delivered.get_or_create_owned(&label),
            retried: c.retried.get_or_create_owned(&label),
            dead_lettered: c.dead_lettered.get_or_create_owned(&label),
            deferred: c.deferred.get_or_create_owned(&label),
            processing: c.processing.get_or_create_owned(&label),
        };
        let mut types = write(&self.types);
        f(types.entry(event_type.to_owned()).or_insert(made));
    }

    /// Runs `f` on `subscription`'s handler metrics (made the first time it is seen).
    fn with_sub(&self, c: &Counted, subscription: &str, f: impl FnOnce(&PerSub)) {
        if let Some(s) = read(&self.subs).get(subscription) {
            return f(s);
        }
        let run = |r: RunResult| {
            c.handler_runs.get_or_create_owned(&two(
                "subscription",
                subscription,
                "result",
                r.as_str(),
            ))
        };
        let made = PerSub {
            runs: [
                run(RunResult::Ok),
                run(RunResult::Error),
                run(RunResult::Timeout),
                run(RunResult::Panic),
                run(RunResult::Snoozed),
            ],
            duration: c
                .handler_duration
                .get_or_create_owned(&one("subscription", subscription)),
        };
        let mut subs = write(&self.subs);
        f(subs.entry(subscription.to_owned()).or_insert(made));
    }

    pub fn published(&self, event_type: &str, n: u64) {
        if let Some(c) = self.counted() {
            self.with_type(c, event_type, |t| {
                t.published.inc_by(n);
            });
        }
    }

    pub fn handler_finished(&self, subscription: &str, result: RunResult, took: Duration) {
        if let Some(c) = self.counted() {
            self.with_sub(c, subscription, |s| {
                s.runs[result as usize].inc();
                s.duration.observe(took.as_secs_f64());
            });
        }
    }

    pub fn pass_finished(&self, event_type: &str, pass: Pass, since_publish: Duration) {
        let Some(c) = self.counted() else { return };
        self.with_type(c, event_type, |t| match pass {
            Pass::Succeeded => {
                t.delivered.inc();
                t.processing.observe(since_publish.as_secs_f64());
            }
            Pass::Failed { dead: false } => {
                t.retried.inc();
            }
            Pass::Failed { dead: true } => {
                t.dead_lettered.inc();
            }
            Pass::Deferred => {
                t.deferred.inc();
            }
        });
    }

    pub fn store_call(&self, call: StoreCall, took: Duration) {
        if let Some(c) = self.counted() {
            c.store_by_call[call as usize].observe(took.as_secs_f64());
        }
    }

    pub fn breaker_transition(&self, subscription: &str, to: &str) {
        if let Some(c) = self.counted() {
            c.breaker_transitions
                .get_or_create(&two("subscription", subscription, "to", to))
                .inc();
        }
    }

    pub fn dead_letter_action(&self, action: &str, actor_kind: &str, n: u64) {
        if let Some(c) = self.counted() {
            c.dead_letter_actions
                .get_or_create(&two("action", action, "actor_kind", actor_kind))
                .inc_by(n);
        }
    }

    pub fn replay_events(&self, result: &str, n: u64) {
        if let Some(c) = self.counted() {
            c.replay_events
                .get_or_create(&one("result", result))
                .inc_by(n);
        }
    }

    pub fn replay_finished(&self, status: &str) {
        if let Some(c) = self.counted() {
            c.replays.get_or_create(&one("status", status)).inc();
        }
    }

    /// Sets the gauges from `input` and encodes every family.
    pub fn encode(&self, input: &ScrapeInput) -> Result<String> {
        self.gauges.set(input);
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        if let Some(c) = self.counted() {
            c.breaker_state.clear();
            for (sub, state) in &input.breakers {
                c.breaker_state
                    .get_or_create(&one("subscription", sub))
                    .set(*state);
            }
            let p = &input.process;
            c.resident.set(int(p.resident_bytes));
            c.virtual_memory.set(int(p.virtual_bytes));
            c.fds.set(int(p.open_fds));
            let cpu = c.cpu.get();
            if p.cpu_seconds > cpu {
                c.cpu.inc_by(p.cpu_seconds - cpu);
            }
            c.uptime.set(input.uptime.as_secs_f64());
        }
        let mut out = String::new();
        encode(&mut out, &self.registry)
            .map_err(|e| Error::Internal(format!("encoding the metrics failed: {e}")))?;
        Ok(out)
    }
}

impl Counted {
    fn register(r: &mut Registry) -> Counted {
        let store_calls: Hist = Family::new_with_constructor(store_buckets);
        let store_by_call = [StoreCall::Insert, StoreCall::Claim, StoreCall::Record]
            .map(|call| store_calls.get_or_create_owned(&one("operation", call.as_str())));
        let c = Counted {
            published: Family::default(),
            delivered: Family::default(),
            retried: Family::default(),
            dead_lettered: Family::default(),
            deferred: Family::default(),
            handler_runs: Family::default(),
            breaker_transitions: Family::default(),
            dead_letter_actions: Family::default(),
            replay_events: Family::default(),
            replays: Family::default(),
            handler_duration: Family::new_with_constructor(latency),
            processing: Family::new_with_constructor(processing),
            store_calls,
            store_by_call,
            breaker_state: Family::default(),
            resident: Gauge::default(),
            virtual_memory: Gauge::default(),
            cpu: Counter::default(),
            fds: Gauge::default(),
            uptime: Gauge::default(),
        };
        r.register(
            "events_published",
            "Events stored by a publish (an id already stored is not counted)",
            c.published.clone(),
        );
        r.register(
            "events_delivered",
            "Events whose every matching handler succeeded (status done)",
            c.delivered.clone(),
        );
        r.register(
            "events_retried",
            "Failed delivery attempts that scheduled a retry",
            c.retried.clone(),
        );
        r.register(
            "events_dead_lettered",
            "Events moved to the dead-letter queue (attempts exhausted)",
            c.dead_lettered.clone(),
        );
        r.register(
            "events_deferred",
            "Delivery passes put off because a subscription's circuit breaker was open, a handler snoozed, a pause parked the event, or a rate or concurrency limit made it wait",
            c.deferred.clone(),
        );
        r.register(
            "handler_runs",
            "Handler runs by subscription and result (ok, error, timeout, panic)",
            c.handler_runs.clone(),
        );
        r.register(
            "breaker_transitions",
            "Circuit breaker state changes by subscription and new state",
            c.breaker_transitions.clone(),
        );
        r.register(
            "dead_letter_actions",
            "Dead letters acted on by action (retry, resolve, abandon, purge) and actor kind",
            c.dead_letter_actions.clone(),
        );
        r.register(
            "replay_events",
            "Events handled by replays by result (replayed, skipped, error)",
            c.replay_events.clone(),
        );
        r.register(
            "replays",
            "Replays ended, by status (completed, failed, cancelled)",
            c.replays.clone(),
        );
        r.register(
            "handler_duration_seconds",
            "How long handler runs took, by subscription",
            c.handler_duration.clone(),
        );
        r.register(
            "processing_seconds",
            "Time from publish to done, by event type (retries included)",
            c.processing.clone(),
        );
        r.register(
            "db_query_duration_seconds",
            "Store calls of the delivery path by operation (insert, claim, record)",
            c.store_calls.clone(),
        );
        r.register(
            "breaker_state",
            "Circuit breaker state by subscription: 0 closed, 1 half-open, 2 open",
            c.breaker_state.clone(),
        );
        r.register(
            "process_resident_memory_bytes",
            "Resident memory of this process",
            c.resident.clone(),
        );
        r.register(
            "process_virtual_memory_bytes",
            "Virtual memory of this process",
            c.virtual_memory.clone(),
        );
        r.register(
            "process_cpu_seconds",
            "CPU time (user and system) of this process",
            c.cpu.clone(),
        );
        r.register(
            "process_open_fds",
            "Open file descriptors of this process",
            c.fds.clone(),
        );
        r.register(
            "process_uptime_seconds",
            "Seconds since the bus was built",
            c.uptime.clone(),
        );
        c
    }
}

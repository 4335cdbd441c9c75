//! `durabus demo`: a bus with a few handlers, sample events, retries and dead letters, with a
//! short back-off so it finishes in seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use durabus::pattern::{Pattern, is_system_type};
use durabus::{
    BreakerConfig, Event, EventId, EventStatus, MetricsSnapshot, NewEvent, RetryPolicy,
    SchedulerConfig, StatusCount, SubscribeOptions, SubscriptionBreaker,
};
use serde::Serialize;

use crate::output;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Orders to publish (every third fails its first payment attempt; one is always refused).
    #[arg(long, default_value_t = 6)]
    orders: u32,
}

/// How long after it is published the demo's reminder is due.
const REMINDER_DELAY: Duration = Duration::from_millis(300);

/// The event types the demo subscribes to.
const DEMO_PATTERNS: [&str; 2] = ["order.*", "user.*"];

fn is_demo_type(event_type: &str) -> bool {
    DEMO_PATTERNS
        .iter()
        .filter_map(|p| Pattern::new(p).ok())
        .any(|p| p.matches(event_type))
}

/// Scheduled, pending or processing events whose type `counted` accepts.
fn open_events(counts: &[StatusCount], counted: impl Fn(&str) -> bool) -> u64 {
    counts
        .iter()
        .filter(|c| {
            matches!(
                c.status,
                EventStatus::Scheduled | EventStatus::Pending | EventStatus::Processing
            )
        })
        .filter(|c| counted(&c.event_type))
        .map(|c| c.count)
        .sum()
}

/// What the demo's run waits for: its own events and the bus's announcements (its dead letter
/// is announced as `system.dead_letter`).
fn demo_or_system(event_type: &str) -> bool {
    is_demo_type(event_type) || is_system_type(event_type)
}

/// The demo's bus completes every due event it sees: pointed at an application's database it
/// would mark that application's waiting events done. Refuse instead.
async fn refuse_foreign_work(db: &crate::cmd::Db) -> anyhow::Result<()> {
    let Ok(store) = crate::cmd::open_existing(db).await else {
        // Not a durabus database (yet): opening it for the demo reports what is wrong.
        return Ok(());
    };
    let counts = store.counts().await;
    store.close().await?;
    let counts = counts?;
    // The bus's own announcements belong to whoever made them: the demo's, on a database that
    // holds only the demo's events (a demo stopped halfway leaves them for the next run); an
    // application's, as soon as any other type is there, of any status.
    let application = counts.iter().any(|c| !demo_or_system(&c.event_type));
    let foreign = open_events(&counts, |t| {
        !is_demo_type(t) && (application || !is_system_type(t))
    });
    anyhow::ensure!(
        foreign == 0,
        "{} holds {foreign} pending event(s) of types the demo does not handle; run the demo on its own database (--db demo.db)",
        db.display()
    );
    Ok(())
}

#[derive(Debug, Default, Serialize)]
struct Summary {
    database: String,
    published: usize,
    scheduled: usize,
    delivered: usize,
    delivered_after_retry: usize,
    dead_lettered: usize,
    handler_calls: u32,
    dead_letter_ids: Vec<EventId>,
    elapsed_ms: u128,
    retry_metrics: MetricsSnapshot,
    breakers: Vec<SubscriptionBreaker>,
}

pub async fn run(db: &crate::cmd::Db, json: bool, args: Args) -> anyhow::Result<()> {
    let started = Instant::now();
    if db.exists() {
        refuse_foreign_work(db).await?;
    }
    let bus = db
        .builder()
        .retry_policy(RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(400),
            backoff_multiplier: 2.0,
        })
        .poll_interval(Duration::from_millis(50))
        // No maintenance jobs: a demo that ran across a quarter hour or five minutes would
        // otherwise send its dead letter back (auto retry) or keep a statistics snapshot of
        // half its events, and what it prints would depend on the clock.
        .scheduler(SchedulerConfig {
            enabled: false,
            ..SchedulerConfig::default()
        })
        // Short like the back-off: a breaker that trips reopens to a probe within the demo.
        .breaker(BreakerConfig {
            open_for: Duration::from_millis(300),
            probe_wait: Duration::from_millis(50),
            ..BreakerConfig::default()
        })
        .build()
        .await
        .with_context(|| format!("cannot open {}", db.display()))?;
    let calls = Arc::new(AtomicU32::new(0));
    let say = move |line: String| {
        if !json {
            outln!("{line}");
        }
    };

    let c = calls.clone();
    bus.subscribe(
        "order.*",
        move |e: Event| {
            c.fetch_add(1, Ordering::Relaxed);
            let scheduled = e
                .deliver_at
                .map(|at| format!(", scheduled for {at}"))
                .unwrap_or_default();
            let ordered = e
                .ordering_key
                .as_ref()
                .map(|k| format!(", key {k}: {}", e.payload_value()["step"]))
                .unwrap_or_default();
            say(format!(
                "  audit     recorded {} (attempt {}{scheduled}{ordered})",
                e.event_type,
                e.attempt()
            ));
            async { Ok(()) }
        },
        SubscribeOptions::default().name("demo-audit"),
    )
    .await?;
    let c = calls.clone();
    bus.subscribe(
        "order.paid",
        move |e: Event| {
            c.fetch_add(1, Ordering::Relaxed);
            let order = e.payload_value();
            let n = order["order"].as_u64().unwrap_or(0);
            let attempt = e.attempt();
            async move {
                if order["card"] == "stolen" {
                    say(format!(
                        "  payments  order #{n}: card refused (attempt {attempt})"
                    ));
                    return Err(format!("card for order #{n} refused by the issuer").into());
                }
                if n.is_multiple_of(3) && attempt == 1 {
                    say(format!(
                        "  payments  order #{n}: gateway timeout, will retry"
                    ));
                    return Err("payment gateway timed out".into());
                }
                say(format!(
                    "  payments  order #{n}: charged (attempt {attempt})"
                ));
                Ok(())
            }
        },
        SubscribeOptions::default().name("demo-payments"),
    )
    .await?;
    let c = calls.clone();
    bus.subscribe(
        "user.*",
        move |e: Event| {
            c.fetch_add(1, Ordering::Relaxed);
            say(format!(
                "  email     welcome mail for {}",
                e.payload_value()["email"]
            ));
            async { Ok(()) }
        },
        SubscribeOptions::default().name("demo-email"),
    )
    .await?;
    bus.start().await?;

    say(format!("publishing to {}", db.display()));
    let mut ids = Vec::new();
    // A reminder for later: stored now as scheduled, delivered once its time comes.
    let reminder =
        NewEvent::new("order.reminder", &serde_json::json!({"order": 1}))?.delay(REMINDER_DELAY);
    ids.push(bus.publish_event(reminder).await?);
    say(format!(
        "  scheduled order.reminder for {} ms from now",
        REMINDER_DELAY.as_millis()
    ));
    // One order's shipment steps under an ordering key: handled one at a time, in this order.
    for step in ["packed", "shipped", "delivered"] {
        let e = NewEvent::new(
            "order.shipment",
            &serde_json::json!({"order": 7, "step": step}),
        )?
        .ordering_key("order-7");
        ids.push(bus.enqueue_event(e).await?);
    }
    say("  published order.shipment packed, shipped, delivered under ordering key order-7".into());
    ids.push(
        bus.publish(
            "user.signed_up",
            &serde_json::json!({"email": "ada@example.com"}),
        )
        .await?,
    );
    for n in 1..=args.orders {
        ids.push(
            bus.publish_event(
                NewEvent::new(
                    "order.paid",
                    &serde_json::json!({"order": n, "amount": n * 10}),
                )?
                .with_metadata("source", "demo"),
            )
            .await?,
        );
    }
    ids.push(
        bus.publish(
            "order.paid",
            &serde_json::json!({"order": 99, "card": "stolen"}),
        )
        .await?,
    );

    // Wait until the demo's queue is drained: none of its event types pending or processing,
    // its own events and any dead letter sent back for delivery since the last run alike.
    let store = bus.store();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let open = open_events(&store.counts().await?, demo_or_system);
        if open == 0 && bus.in_flight() == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{open} event(s) still pending after 30 s; see `durabus events list --status pending`"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut events = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(e) = store.get_event(*id).await? {
            events.push(e);
        }
    }
    let retry_metrics = bus.metrics();
    let breakers = bus.breakers();
    bus.shutdown().await?;

    let summary = Summary {
        database: db.display().to_string(),
        published: ids.len(),
        scheduled: events.iter().filter(|e| e.deliver_at.is_some()).count(),
        delivered: events
            .iter()
            .filter(|e| e.status == EventStatus::Done)
            .count(),
        delivered_after_retry: events
            .iter()
            .filter(|e| e.status == EventStatus::Done && e.retry_count > 0)
            .count(),
        dead_lettered: events
            .iter()
            .filter(|e| e.status == EventStatus::Dlq)
            .count(),
        handler_calls: calls.load(Ordering::Relaxed),
        dead_letter_ids: events
            .iter()
            .filter(|e| e.status == EventStatus::Dlq)
            .map(|e| e.id)
            .collect(),
        elapsed_ms: started.elapsed().as_millis(),
        retry_metrics,
        breakers,
    };
    if json {
        return output::json(&summary);
    }
    outln!();
    outln!("summary");
    outln!("  published              {}", summary.published);
    outln!("  of which scheduled     {}", summary.scheduled);
    outln!("  delivered              {}", summary.delivered);
    outln!("  delivered after retry  {}", summary.delivered_after_retry);
    outln!("  dead-lettered          {}", summary.dead_lettered);
    outln!("  handler calls          {}", summary.handler_calls);
    outln!("  took                   {} ms", summary.elapsed_ms);
    let m = &summary.retry_metrics;
    outln!(
        "  retry metrics          {} retries, {:.0} % of retried events succeeded, {} deferred",
        m.retries_total,
        m.success_after_retry_rate * 100.0,
        m.events_deferred_total
    );
    for b in &summary.breakers {
        outln!(
            "  breaker {:<14} {} ({} samples, {:.0} % failed in the last minute)",
            b.name.as_deref().unwrap_or(&b.subscription_id),
            b.breaker.state,
            b.breaker.samples,
            b.breaker.failure_rate * 100.0
        );
    }
    for e in events.iter().filter(|e| e.status == EventStatus::Dlq) {
        outln!("  dead letter {} {}: {:?}", e.id, e.event_type, e.errors);
    }
    outln!();
    outln!(
        "inspect the dead letters:  durabus {} dlq list",
        db.cli_args()
    );
    Ok(())
}

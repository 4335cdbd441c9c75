//! Fills a database with what an operator's dashboard shows: delivered events, dead letters in
//! two failure groups (one of them carrying a payload that looks like HTML), a payload snapshot
//! per event. The dashboard's browser tests and screenshots run `durabus serve` on it.
//!
//! `cargo run -p durabus-admin --example seed_dashboard -- path/to/seed.db` (an SQLite path, or
//! a `postgres://` URL and a schema name; the database or schema must be new).

use std::time::Duration;

use durabus::ConfigInput;
use durabus::{Actor, ActorKind, Event, EventBus, RetryOverride, SubscribeOptions};

/// Delivered events.
const SHIPPED: u64 = 40;
/// Dead letters of the card group (one more carries the HTML-looking payload).
const CARD: u64 = 6;
/// Dead letters of the bank group.
const BANK: u64 = 4;
/// Reminders scheduled for the next day (priority 5).
const REMINDERS: u64 = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let target = std::env::args()
        .nth(1)
        .ok_or("usage: seed_dashboard <sqlite path | postgres:// URL>")?;
    let builder = match std::env::args().nth(2) {
        Some(schema) => EventBus::builder().postgres_with(
            &target,
            durabus::PgOptions {
                schema,
                ..durabus::PgOptions::default()
            },
        ),
        None => EventBus::builder().database(&target),
    };
    let bus = builder
        .payload_snapshots(true)
        // Every payment fails here: keep the breaker from holding the later ones back.
        .breaker(durabus::BreakerConfig {
            min_samples: 1_000,
            ..durabus::BreakerConfig::default()
        })
        .build()
        .await?;
    let seeder = Actor::new("seed", ActorKind::Cli);
    let every_stage = ConfigInput {
        stages: vec!["*".into()],
        retention_days: 14,
        redact: Vec::new(),
        redact_before_store: false,
    };
    bus.payloads().set_config("*", every_stage, &seeder).await?;
    bus.subscribe(
        "ship.*",
        |_e: Event| async move { Ok(()) },
        SubscribeOptions::default().name("shipping"),
    )
    .await?;
    bus.subscribe(
        "pay.*",
        |e: Event| async move {
            let order = e.payload::<serde_json::Value>()?["order"].clone();
            if e.event_type == "pay.bank" {
                Err(format!("bank gateway timed out after 30s (order {order})").into())
            } else {
                Err(format!("card declined by issuer: insufficient funds (order {order})").into())
            }
        },
        SubscribeOptions::default()
            .name("payments")
            .retry(RetryOverride::default().max_retries(0)),
    )
    .await?;
    for order in 0..SHIPPED {
        bus.publish(
            "ship.created",
            &serde_json::json!({ "order": order, "carrier": "DHL" }),
        )
        .await?;
    }
    for order in 0..CARD {
        bus.publish(
            "pay.card",
            &serde_json::json!({ "order": 100 + order, "amount": 4200 }),
        )
        .await?;
    }
    bus.publish(
        "pay.card",
        &serde_json::json!({ "order": 999, "note": "<img src=x onerror=alert(1)>" }),
    )
    .await?;
    for order in 0..BANK {
        bus.publish(
            "pay.bank",
            &serde_json::json!({ "order": 200 + order, "iban": "DE02…" }),
        )
        .await?;
    }
    // Reminders for tomorrow: scheduled, with a priority.
    for customer in 0..REMINDERS {
        bus.enqueue_event(
            durabus::NewEvent::new(
                "remind.customer",
                &serde_json::json!({ "customer": customer, "about": "cart" }),
            )?
            .delay(Duration::from_secs(86_400))
            .priority(5),
        )
        .await?;
    }
    // One parcel's steps under an ordering key, not yet delivered: the first is due, the
    // others wait for it.
    for step in ["packed", "shipped", "delivered"] {
        bus.enqueue_event(
            durabus::NewEvent::new(
                "parcel.step",
                &serde_json::json!({"parcel": 42, "step": step}),
            )?
            .ordering_key("parcel-42"),
        )
        .await?;
    }
    // Periodic events, as an application registers them on start.
    bus.periodic(
        durabus::Periodic::new(
            "nightly-report",
            "0 2 * * *",
            "report.due",
            &serde_json::json!({"kind": "sales"}),
        )?
        .timezone("Europe/Paris"),
    )
    .await?;
    bus.periodic(durabus::Periodic::new(
        "hourly-digest",
        "0 * * * *",
        "digest.due",
        &serde_json::json!({}),
    )?)
    .await?;
    // The dead-letter records are written with the outcomes, just after the publishes return.
    let want = CARD + 1 + BANK;
    let mut dead = 0;
    for _ in 0..1_000 {
        dead = durabus::StoreStats::collect(bus.store().as_ref())
            .await?
            .by_status
            .dlq;
        if dead == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if dead != want {
        return Err(format!("only {dead} of {want} payments reached the dead-letter queue").into());
    }
    // What a worker process whose payments breaker opened reports to the store (a started
    // bus does this by itself every 10 s): the overview lists it with the subscription.
    let now = durabus::Timestamp::now();
    durabus::BreakerStore::breaker_report(
        bus.store().as_ref(),
        vec![durabus::breaker::report::BreakerReport {
            subscription: "payments".into(),
            process: "worker-1".into(),
            state: durabus::BreakerState::Open,
            failure_rate: 1.0,
            samples: 12,
            opened_at: Some(now),
            reported_at: now,
        }],
        durabus::Timestamp(0),
    )
    .await?;
    bus.shutdown().await?;
    println!(
        "seeded {target}: {SHIPPED} delivered, {} dead letters in 2 groups, {REMINDERS} scheduled, 2 periodic",
        want
    );
    Ok(())
}

//! Hostile input, on SQLite and (when available) PostgreSQL: payloads with NUL characters,
//! extreme numbers and deep nesting delivered byte for byte or refused with an error (never a
//! crash or a corrupted row); a payload over the limit refused with nothing stored; SQL and LIKE
//! metacharacters in every dead-letter filter treated literally or refused; and a pathological
//! glob (30 stars against a 10 kB type) answered in well under a millisecond.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use durabus::{
    DeadLetterFilter, ErrorKind, Event, EventBus, Keyset, NewEvent, SubscribeOptions,
    pattern::Pattern,
};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::scenario::{Row, Settings};
use crate::target::Target;

/// An array nested `0` levels deep, serialized without building it.
struct Nested(usize);

impl Serialize for Nested {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(usize::from(self.0 > 0)))?;
        if self.0 > 0 {
            seq.serialize_element(&Nested(self.0 - 1))?;
        }
        seq.end()
    }
}

/// The scenario on every store there is.
pub fn run(s: &Settings) -> anyhow::Result<Row> {
    let started = Instant::now();
    let mut row = Row {
        scenario: "hostile input".into(),
        ..Row::default()
    };
    let mut notes = vec![glob(&mut row)];
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let mut targets = vec![Target::Sqlite(s.dir.join("hostile.db"))];
    if let Some(url) = &s.pg_url {
        targets.push(Target::Postgres {
            url: url.clone(),
            schema: format!("torture_hostile_{:08x}", fastrand::u32(..)),
        });
    }
    for target in &targets {
        let note = rt.block_on(on_store(target, &mut row))?;
        notes.push(note);
        if let Target::Postgres { url, schema } = target
            && !s.keep
        {
            rt.block_on(async {
                let pool = durabus::sqlx::PgPool::connect(url).await?;
                durabus::sqlx::raw_sql(durabus::sqlx::AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {schema} CASCADE"
                )))
                .execute(&pool)
                .await?;
                anyhow::Ok(())
            })?;
        }
    }
    row.faults = row.cycles;
    row.notes = notes.join("; ");
    row.took = started.elapsed();
    Ok(row)
}

/// 30 stars against 10 kB: the matcher must stay linear.
fn glob(row: &mut Row) -> String {
    let Ok(pattern) = Pattern::new(&format!("{}b", "a*".repeat(30))) else {
        row.violations
            .push("the 30-star pattern was refused".into());
        return String::new();
    };
    let text = "a".repeat(10_000);
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let t = Instant::now();
        let hit = pattern.matches(&text);
        worst = worst.max(t.elapsed());
        if hit {
            row.violations
                .push("a*…*b matched a text without a b".into());
        }
    }
    row.cycles += 1;
    if worst >= Duration::from_millis(1) {
        row.violations.push(format!(
            "30 stars against 10 kB took {worst:?} (more than 1 ms)"
        ));
    }
    format!(
        "30-star glob vs 10 kB: worst of 20 {} µs",
        worst.as_micros()
    )
}

async fn on_store(target: &Target, row: &mut Row) -> anyhow::Result<String> {
    let name = match target {
        Target::Sqlite(_) => "SQLite",
        Target::Postgres { .. } => "PostgreSQL",
    };
    let bus = target
        .builder(Duration::from_secs(30))
        .max_payload_bytes(64 * 1024)
        .build()
        .await?;
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let record = seen.clone();
    bus.subscribe(
        "hostile.*",
        move |e: Event| {
            let record = record.clone();
            async move {
                if let Ok(mut seen) = record.lock() {
                    seen.push((e.event_type.clone(), e.payload.clone()));
                }
                if e.event_type == "hostile.dead" {
                    return Err("dead on purpose".into());
                }
                Ok(())
            }
        },
        SubscribeOptions::default().name("hostile"),
    )
    .await?;
    bus.start().await?;
    let mut say = |v: String| row.violations.push(format!("{name}: {v}"));

    // Payloads that must arrive exactly as sent (compared as JSON values).
    let deep = serde_json::to_value(Nested(100))?;
    let cases: Vec<(&str, serde_json::Value)> = vec![
        (
            "nul",
            serde_json::json!({"s": "a\u{0}b", "k\u{0}": "\u{0}"}),
        ),
        (
            "unicode",
            serde_json::json!({"s": "\u{1F600}\u{FFFF}\u{202E}é", "q": "'\"%_\\"}),
        ),
        (
            "numbers",
            serde_json::json!({"u": u64::MAX, "i": i64::MIN, "f": f64::MAX, "t": 1e-308}),
        ),
        ("deep", deep),
    ];
    for (what, payload) in &cases {
        row.cycles += 1;
        match bus.publish(&format!("hostile.{what}"), payload).await {
            Ok(_) => {}
            Err(e) => say(format!("the {what} payload was refused: {e}")),
        }
    }
    // Very deep nesting: delivered intact, or refused with an error.
    row.cycles += 1;
    let very_deep = match NewEvent::new("hostile.verydeep", &Nested(5000)) {
        Ok(event) => match bus.publish_event(event).await {
            Ok(_) => "delivered",
            Err(e) if e.kind() == ErrorKind::InvalidInput => "refused as invalid input",
            Err(e) => {
                say(format!("5,000 levels of nesting: {e} ({:?})", e.kind()));
                "failed"
            }
        },
        Err(e) if e.kind() == ErrorKind::InvalidInput => "refused as invalid input",
        Err(e) => {
            say(format!("5,000 levels of nesting: {e}"));
            "failed"
        }
    };
    // Over the limit: refused, nothing stored.
    row.cycles += 1;
    let before = total(&bus).await?;
    match bus
        .publish("hostile.huge", &"x".repeat(64 * 1024 + 1))
        .await
    {
        Ok(_) => say("a payload over the limit was accepted".into()),
        Err(durabus::Error::PayloadTooLarge { .. }) => {}
        Err(e) => say(format!(
            "a payload over the limit: {e} (expected PayloadTooLarge)"
        )),
    }
    if total(&bus).await? != before {
        say("a refused payload was stored".into());
    }
    let seen_now: Vec<(String, String)> = seen.lock().map(|s| s.clone()).unwrap_or_default();
    for (what, payload) in &cases {
        let ty = format!("hostile.{what}");
        match seen_now.iter().find(|(t, _)| *t == ty) {
            Some((_, got)) => {
                let got: serde_json::Value = serde_json::from_str(got)?;
                if &got != payload {
                    say(format!("the {what} payload changed on its way: {got}"));
                }
            }
            None => say(format!("the {what} payload was not delivered")),
        }
    }
    if very_deep == "delivered" && !seen_now.iter().any(|(t, _)| t == "hostile.verydeep") {
        say("the 5,000-deep payload was accepted but not delivered".into());
    }

    // Metacharacters in every filter of the dead-letter queue.
    bus.publish("hostile.dead", &1).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let dlq = bus.dead_letters();
    while dlq_count(&bus, DeadLetterFilter::default()).await? == 0 {
        anyhow::ensure!(Instant::now() < deadline, "the dead letter never arrived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let hostile = [
        "%",
        "_",
        "*%*",
        "hostile.d%",
        "hostile.dea_",
        "'; DROP TABLE events; --",
        "\\",
        "\u{0}",
    ];
    let mut refused = 0;
    for text in hostile {
        for filter in [
            DeadLetterFilter {
                event_type: Some(text.into()),
                ..DeadLetterFilter::default()
            },
            DeadLetterFilter {
                subscription: Some(text.into()),
                ..DeadLetterFilter::default()
            },
            DeadLetterFilter {
                group: Some(text.into()),
                ..DeadLetterFilter::default()
            },
        ] {
            row.cycles += 1;
            match dlq.list(filter.clone(), Keyset::default()).await {
                Ok(page) if !page.items.is_empty() => {
                    say(format!(
                        "the filter {filter:?} matched {} dead letters",
                        page.items.len()
                    ));
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::InvalidInput => refused += 1,
                Err(e) => say(format!("the filter {filter:?} failed: {e}")),
            }
        }
    }
    if dlq_count(&bus, DeadLetterFilter::default()).await? != 1 {
        say("the dead-letter queue changed under hostile filters".into());
    }
    bus.shutdown().await?;
    Ok(format!(
        "{name}: NUL, unicode, extreme numbers and 100-deep nesting delivered intact; 5,000-deep {very_deep}; over-limit refused; {} hostile filters matched nothing ({refused} refused as invalid)",
        hostile.len() * 3
    ))
}

async fn total(bus: &EventBus) -> anyhow::Result<u64> {
    Ok(bus.store().counts().await?.iter().map(|c| c.count).sum())
}

async fn dlq_count(bus: &EventBus, filter: DeadLetterFilter) -> anyhow::Result<u64> {
    Ok(bus.store().dlq_count(filter, None).await?)
}

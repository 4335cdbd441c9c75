//! The bus's `tracing` spans, captured by a layer: a `send` span per publish path with the
//! messaging attributes, a `process` span per handler run with its attempt and outcome, the
//! handler's own spans inside it, on SQLite and PostgreSQL.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use durabus::{Event, EventBus, EventStatus, NewEvent, RetryOverride, SubscribeOptions};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use crate::support::{FieldVisitor as Visitor, Harness};

/// One captured span: its name, fields and the index of its parent among the captured spans.
#[derive(Debug, Clone)]
struct Captured {
    name: &'static str,
    fields: BTreeMap<String, String>,
    parent: Option<usize>,
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

/// A span's index in the capture, kept in its extensions.
struct Index(usize);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Visitor(&mut fields));
        let span = ctx.span(id).expect("a new span is registered");
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let mut all = self.0.lock().unwrap();
        all.push(Captured {
            name: attrs.metadata().name(),
            fields,
            parent,
        });
        span.extensions_mut().insert(Index(all.len() - 1));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let Some(i) = span.extensions().get::<Index>().map(|i| i.0) else {
            return;
        };
        values.record(&mut Visitor(&mut self.0.lock().unwrap()[i].fields));
    }
}

impl Capture {
    fn spans(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }
}

fn field<'a>(span: &'a Captured, name: &str) -> Option<&'a str> {
    span.fields.get(name).map(String::as_str)
}

async fn spans_follow_the_messaging_conventions(h: &Harness) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = crate::support::listen(subscriber);

    let bus: EventBus = h.bus().await;
    bus.subscribe(
        "order.*",
        |_e: Event| async {
            // The handler's own span nests under its delivery's.
            let _inside = tracing::info_span!("inside_handler").entered();
            Ok(())
        },
        SubscribeOptions::default().name("billing"),
    )
    .await
    .unwrap();
    bus.subscribe(
        "flaky.*",
        |e: Event| async move {
            if e.retry_count == 0 {
                Err("gateway timed out".into())
            } else {
                Ok(())
            }
        },
        SubscribeOptions::default()
            .name("flaky")
            .retry(RetryOverride::default().max_retries(2)),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();

    // publish: a send span, the inline delivery's process span under it, the handler's inside.
    let id = bus.publish("order.placed", &1).await.unwrap();
    let spans = capture.spans();
    let (send_at, send) = spans
        .iter()
        .enumerate()
        .find(|(_, s)| {
            s.name == "send" && field(s, "messaging.message.id") == Some(&id.to_string())
        })
        .expect("a send span for the publish");
    for (key, value) in [
        ("otel.name", "send order.placed"),
        ("otel.kind", "producer"),
        ("messaging.system", "durabus"),
        ("messaging.operation.type", "send"),
        ("messaging.operation.name", "publish"),
        ("messaging.destination.name", "order.placed"),
    ] {
        assert_eq!(field(send, key), Some(value), "{key}: {send:?}");
    }
    let (process_at, process) = spans
        .iter()
        .enumerate()
        .find(|(_, s)| {
            s.name == "process" && field(s, "messaging.message.id") == Some(&id.to_string())
        })
        .expect("a process span for the delivery");
    assert_eq!(
        process.parent,
        Some(send_at),
        "inline delivery under the publish"
    );
    for (key, value) in [
        ("otel.name", "process order.placed"),
        ("otel.kind", "consumer"),
        ("messaging.operation.type", "process"),
        ("messaging.operation.name", "deliver"),
        ("messaging.destination.name", "order.placed"),
        ("messaging.consumer.group.name", "billing"),
        ("durabus.attempt", "1"),
        ("durabus.outcome", "ok"),
    ] {
        assert_eq!(field(process, key), Some(value), "{key}: {process:?}");
    }
    assert_eq!(field(process, "otel.status_code"), None);
    let inside = spans
        .iter()
        .find(|s| s.name == "inside_handler")
        .expect("the handler's span");
    assert_eq!(inside.parent, Some(process_at));

    // enqueue and a retry: the workers' process spans, attempt 1 failed, attempt 2 ok.
    let flaky = bus.enqueue("flaky.charge", &2).await.unwrap();
    let first = crate::support::eventually("the first attempt fails", || {
        let bus = bus.clone();
        async move {
            let e = crate::support::get(&bus, flaky).await;
            (e.status == EventStatus::Pending && e.retry_count == 1).then_some(e)
        }
    })
    .await;
    h.clock.set(first.next_attempt_at.expect("a retry is due"));
    crate::support::wait_status(&bus, flaky, EventStatus::Done).await;
    let spans = capture.spans();
    let of_flaky: Vec<&Captured> = spans
        .iter()
        .filter(|s| field(s, "messaging.message.id") == Some(&flaky.to_string()))
        .collect();
    let sends: Vec<_> = of_flaky.iter().filter(|s| s.name == "send").collect();
    assert_eq!(sends.len(), 1, "{of_flaky:?}");
    assert_eq!(field(sends[0], "messaging.operation.name"), Some("enqueue"));
    let runs: Vec<[Option<&str>; 4]> = of_flaky
        .iter()
        .filter(|s| s.name == "process")
        .map(|s| {
            [
                field(s, "durabus.attempt"),
                field(s, "durabus.outcome"),
                field(s, "otel.status_code"),
                field(s, "error.type"),
            ]
        })
        .collect();
    assert_eq!(
        runs,
        [
            [Some("1"), Some("error"), Some("ERROR"), Some("error")],
            [Some("2"), Some("ok"), None, None],
        ]
    );

    // A batch of two types: one send span with the count and no single destination.
    let batch = vec![
        NewEvent::new("order.placed", &3).unwrap(),
        NewEvent::new("order.paid", &4).unwrap(),
    ];
    bus.enqueue_batch(batch).await.unwrap();
    let spans = capture.spans();
    let batch = spans
        .iter()
        .find(|s| field(s, "messaging.operation.name") == Some("enqueue_batch"))
        .expect("a send span for the batch");
    assert_eq!(field(batch, "messaging.batch.message_count"), Some("2"));
    assert_eq!(field(batch, "otel.name"), Some("send"));
    assert_eq!(field(batch, "messaging.destination.name"), None);
    assert_eq!(field(batch, "messaging.message.id"), None);
    bus.shutdown().await.unwrap();
}

// A current-thread runtime keeps every bus task on this thread, where the capture is installed.
#[tokio::test(flavor = "current_thread")]
async fn sqlite_spans_follow_the_messaging_conventions() {
    let h = Harness::sqlite();
    spans_follow_the_messaging_conventions(&h).await;
    h.finish().await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_spans_follow_the_messaging_conventions() {
    let Some(h) = Harness::postgres().await else {
        return;
    };
    spans_follow_the_messaging_conventions(&h).await;
    h.finish().await;
}

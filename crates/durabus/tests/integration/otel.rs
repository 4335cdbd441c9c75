//! The W3C trace context carried with each event (feature `opentelemetry`), asserted from the
//! spans the OpenTelemetry SDK exports: a delivery's consumer span takes the producer's span as
//! its parent on the first attempt and links to it on a retry, a dead letter's retry and a
//! replay; every publish path stores the context; on PostgreSQL it crosses a process boundary
//! (the test binary runs itself as the publishing process).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use durabus::{
    Actor, ActorKind, Event, EventBus, EventId, EventStatus, NewEvent, ReplayHooks, ReplayRequest,
    ReplaySelection, RetryOverride, SubscribeOptions, TRACEPARENT,
};
use opentelemetry::trace::{SpanId, TraceId, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt;

use crate::support::{Backend, Harness, PgBackend, eventually, get, wait_status};

/// An OpenTelemetry pipeline into memory, installed as this thread's default subscriber.
struct Otel {
    exporter: InMemorySpanExporter,
    _provider: SdkTracerProvider,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Otel {
    fn install() -> Otel {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("durabus-test"));
        let subscriber = tracing_subscriber::registry().with(layer);
        Otel {
            exporter,
            _provider: provider,
            _guard: crate::support::listen(subscriber),
        }
    }

    fn spans(&self) -> Vec<SpanData> {
        self.exporter.get_finished_spans().unwrap()
    }

    /// Waits until `n` spans named `name` about event `id` are exported, and returns them.
    async fn wait_for(&self, name: &str, id: EventId, n: usize) -> Vec<SpanData> {
        eventually(&format!("{n} `{name}` spans of {id}"), || async {
            let found: Vec<SpanData> = self
                .spans()
                .into_iter()
                .filter(|s| s.name == name && message_id(s).as_deref() == Some(&id.to_string()))
                .collect();
            (found.len() >= n).then_some(found)
        })
        .await
    }
}

fn message_id(span: &SpanData) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "messaging.message.id")
        .map(|kv| kv.value.to_string())
}

fn links(span: &SpanData) -> Vec<(TraceId, SpanId)> {
    span.links
        .iter()
        .map(|l| (l.span_context.trace_id(), l.span_context.span_id()))
        .collect()
}

/// `span` continues the producer's trace: the producer is its parent, it has no link.
fn assert_child_of(span: &SpanData, producer: &SpanData) {
    assert_eq!(
        span.span_context.trace_id(),
        producer.span_context.trace_id(),
        "{span:#?}"
    );
    assert_eq!(
        span.parent_span_id,
        producer.span_context.span_id(),
        "{span:#?}"
    );
    assert!(links(span).is_empty(), "{span:#?}");
}

/// `span` starts a trace of its own and links to the producer.
fn assert_linked_to(span: &SpanData, producer: &SpanData) {
    let p = &producer.span_context;
    assert_ne!(span.span_context.trace_id(), p.trace_id(), "{span:#?}");
    assert_eq!(links(span), [(p.trace_id(), p.span_id())], "{span:#?}");
}

/// The stored `traceparent` of `event`: version 00, the producer's trace and span, sampled.
fn assert_carries(event: &Event, producer: &SpanData) {
    let p = &producer.span_context;
    assert_eq!(
        event.metadata.get(TRACEPARENT).map(String::as_str),
        Some(format!("00-{}-{}-01", p.trace_id(), p.span_id()).as_str()),
        "{event:?}"
    );
}

async fn context_follows_the_event(h: &Harness) {
    let otel = Otel::install();
    let bus = h
        .builder()
        .await
        .breaker(crate::support::breaker_never_trips())
        .build()
        .await
        .unwrap();
    let flaky_runs = Arc::new(AtomicUsize::new(0));
    let runs = flaky_runs.clone();
    bus.subscribe(
        "ot.*",
        move |e: Event| {
            let runs = runs.clone();
            async move {
                match e.event_type.as_str() {
                    "ot.flaky" if runs.fetch_add(1, Ordering::SeqCst) == 0 => {
                        Err("upstream refused".into())
                    }
                    "ot.dead" if e.dlq_count == 0 => Err("no such account".into()),
                    _ => Ok(()),
                }
            }
        },
        SubscribeOptions::default()
            .name("ledger")
            .retry(RetryOverride::default().max_retries(1)),
    )
    .await
    .unwrap();
    bus.subscribe(
        "ot.dead",
        |_e: Event| async { Ok(()) },
        SubscribeOptions::default().name("audit"),
    )
    .await
    .unwrap();
    bus.start().await.unwrap();

    // First attempt: publish inside a request's span; the delivery continues its trace.
    let (ok, flaky, dead) = {
        let request = tracing::info_span!("request");
        let _in = request.enter();
        let ok = bus.publish("ot.ok", &1).await.unwrap();
        let flaky = bus.enqueue("ot.flaky", &2).await.unwrap();
        let dead = bus
            .enqueue_batch(vec![NewEvent::new("ot.dead", &3).unwrap()])
            .await
            .unwrap()[0];
        (ok, flaky, dead)
    };
    let request = eventually("the request span", || async {
        otel.spans().into_iter().find(|s| s.name == "request")
    })
    .await;
    let send = otel.wait_for("send ot.ok", ok, 1).await.remove(0);
    assert_eq!(send.parent_span_id, request.span_context.span_id());
    assert_carries(&get(&bus, ok).await, &send);
    let process = otel.wait_for("process ot.ok", ok, 1).await.remove(0);
    assert_child_of(&process, &send);

    // A retry: the first attempt is the producer's child, the second links to it.
    let flaky_send = otel.wait_for("send ot.flaky", flaky, 1).await.remove(0);
    assert_carries(&get(&bus, flaky).await, &flaky_send);
    let first = eventually("the first attempt fails", || {
        let bus = bus.clone();
        async move {
            let e = get(&bus, flaky).await;
            (e.status == EventStatus::Pending && e.retry_count == 1).then_some(e)
        }
    })
    .await;
    h.clock.set(first.next_attempt_at.expect("a retry is due"));
    wait_status(&bus, flaky, EventStatus::Done).await;
    let attempts = otel.wait_for("process ot.flaky", flaky, 2).await;
    assert_child_of(&attempts[0], &flaky_send);
    assert_linked_to(&attempts[1], &flaky_send);
    // The attempt is an integer attribute, not its text.
    let attempt = |s: &SpanData| {
        s.attributes
            .iter()
            .find(|kv| kv.key.as_str() == "durabus.attempt")
            .map(|kv| kv.value.clone())
    };
    assert_eq!(attempt(&attempts[0]), Some(opentelemetry::Value::I64(1)));
    assert_eq!(attempt(&attempts[1]), Some(opentelemetry::Value::I64(2)));

    // A dead letter's retry links to the producer.
    let dead_send = otel.wait_for("send ot.dead", dead, 1).await.remove(0);
    assert_eq!(
        send_batch_count(&dead_send),
        None,
        "a batch of one names its event"
    );
    let letter = eventually("the event is dead-lettered", || {
        let bus = bus.clone();
        async move {
            let e = get(&bus, dead).await;
            if e.status == EventStatus::Pending && e.retry_count == 1 {
                h.clock.set(e.next_attempt_at.expect("a retry is due"));
            }
            (e.status == EventStatus::Dlq).then_some(e)
        }
    })
    .await;
    assert_carries(&letter, &dead_send);
    let ann = Actor::new("ann", ActorKind::Library);
    bus.dead_letters().retry(dead, &ann).await.unwrap();
    wait_status(&bus, dead, EventStatus::Done).await;
    let runs = otel.wait_for("process ot.dead", dead, 3).await;
    assert_child_of(&runs[0], &dead_send);
    let after = runs.last().unwrap();
    assert_linked_to(after, &dead_send);

    // A replay by its own handler links to the producer; a re-published copy's delivery too.
    let replays = bus.replays();
    let hooks = ReplayHooks::new().handler(|_e: Event| async { Ok(()) });
    replays
        .replay(
            &ReplayRequest::new(ReplaySelection::ids([ok])),
            &ann,
            &hooks,
        )
        .await
        .unwrap();
    let replayed = otel
        .spans()
        .into_iter()
        .find(|s| {
            s.name == "process ot.ok"
                && message_id(s).as_deref() == Some(&ok.to_string())
                && s.span_context.span_id() != process.span_context.span_id()
        })
        .expect("the replay's process span");
    assert_linked_to(&replayed, &send);
    replays
        .replay(
            &ReplayRequest::new(ReplaySelection::ids([ok])),
            &ann,
            &ReplayHooks::new(),
        )
        .await
        .unwrap();
    let copy = eventually("the re-published copy is delivered", || async {
        otel.spans().into_iter().find(|s| {
            s.name == "process ot.ok" && message_id(s).as_deref() != Some(&ok.to_string())
        })
    })
    .await;
    assert_linked_to(&copy, &send);
    bus.shutdown().await.unwrap();
}

fn send_batch_count(span: &SpanData) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == "messaging.batch.message_count")
        .map(|kv| kv.value.to_string())
}

/// A `traceparent` the caller set (from an upstream system) is kept; without an OpenTelemetry
/// layer nothing is written.
async fn a_callers_context_is_kept_and_none_is_invented(h: &Harness) {
    let upstream = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let bus: EventBus = h.bus().await;
    let plain = bus.enqueue("ot.plain", &1).await.unwrap();
    assert_eq!(get(&bus, plain).await.metadata.get(TRACEPARENT), None);
    let otel = Otel::install();
    let given = NewEvent::new("ot.given", &2)
        .unwrap()
        .with_metadata(TRACEPARENT, upstream);
    let id = bus.enqueue_event(given).await.unwrap();
    otel.wait_for("send ot.given", id, 1).await;
    assert_eq!(
        get(&bus, id)
            .await
            .metadata
            .get(TRACEPARENT)
            .map(String::as_str),
        Some(upstream)
    );
    bus.shutdown().await.unwrap();
}

// A current-thread runtime keeps every bus task on this thread, where the pipeline is installed.
#[tokio::test(flavor = "current_thread")]
async fn sqlite_context_follows_the_event() {
    let h = Harness::sqlite();
    context_follows_the_event(&h).await;
    a_callers_context_is_kept_and_none_is_invented(&h).await;
    h.finish().await;
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_context_follows_the_event() {
    let Some(h) = Harness::postgres().await else {
        return;
    };
    context_follows_the_event(&h).await;
    a_callers_context_is_kept_and_none_is_invented(&h).await;
    h.finish().await;
}

/// The sqlite outbox, written on the caller's connection, stores the context too.
#[tokio::test(flavor = "current_thread")]
async fn the_outbox_stores_the_context() {
    let backend = crate::support::SqliteBackend::new();
    let otel = Otel::install();
    let bus = EventBus::builder()
        .store(backend.open().await)
        .build()
        .await
        .unwrap();
    let outbox = bus.outbox().unwrap();
    let conn = durabus::rusqlite::Connection::open(&backend.path).unwrap();
    let id = outbox
        .publish_event(&conn, NewEvent::new("ot.outbox", &1).unwrap())
        .unwrap();
    let send = otel.wait_for("send ot.outbox", id, 1).await.remove(0);
    assert_carries(&get(&bus, id).await, &send);
    bus.shutdown().await.unwrap();
}

const CHILD_SCHEMA: &str = "DURABUS_OTEL_CHILD_SCHEMA";

/// The publishing process of [`postgres_context_crosses_processes`]: run by it, never alone.
/// Publishes one event inside a span and prints `trace_id span_id event_id` of its send span.
#[tokio::test(flavor = "current_thread")]
#[ignore = "run by postgres_context_crosses_processes as its publishing process"]
async fn publishing_process() {
    let schema = std::env::var(CHILD_SCHEMA).expect("run by the cross-process test");
    let otel = Otel::install();
    let store = PgBackend { schema };
    let bus = EventBus::builder()
        .store(store.open().await)
        .build()
        .await
        .unwrap();
    let id = {
        let _in = tracing::info_span!("request").entered();
        bus.enqueue("ot.far", &1).await.unwrap()
    };
    let send = otel.wait_for("send ot.far", id, 1).await.remove(0);
    println!(
        "SEND {} {} {id}",
        send.span_context.trace_id(),
        send.span_context.span_id()
    );
    bus.shutdown().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn postgres_context_crosses_processes() {
    if !crate::support::pg_available().await {
        return;
    }
    // The schema is made here first; the publishing process opens it too.
    let schema = crate::support::unique_schema();
    let h = Harness {
        backend: Box::new(PgBackend {
            schema: schema.clone(),
        }),
        clock: durabus::ManualClock::default(),
    };
    // The publishing process stamps its events with the system clock: so does this one.
    let bus = EventBus::builder()
        .store(h.backend.open().await)
        .poll_interval(std::time::Duration::from_millis(20))
        .build()
        .await
        .unwrap();
    let delivered = crate::support::count_calls(&bus, "ot.far").await;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "otel::publishing_process",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_SCHEMA, &schema)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("SEND "))
        .expect("the child prints its send span");
    let [trace, span, id]: [&str; 3] = line
        .split(' ')
        .collect::<Vec<_>>()
        .try_into()
        .expect("three fields");
    let id: EventId = id.parse().unwrap();

    let otel = Otel::install();
    bus.start().await.unwrap();
    wait_status(&bus, id, EventStatus::Done).await;
    assert_eq!(delivered.load(Ordering::SeqCst), 1);
    let process = otel.wait_for("process ot.far", id, 1).await.remove(0);
    assert_eq!(process.span_context.trace_id().to_string(), trace);
    assert_eq!(process.parent_span_id.to_string(), span);
    assert!(process.parent_span_is_remote, "{process:#?}");
    bus.shutdown().await.unwrap();
    h.finish().await;
}

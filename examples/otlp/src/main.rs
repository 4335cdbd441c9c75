//! durabus's spans sent to an OpenTelemetry collector over OTLP/HTTP: the `send` span of a
//! publish made inside a request's span, and the `process` span of its delivery, which
//! continues the request's trace (the `opentelemetry` feature stores the context with the
//! event). The collector is `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4318`).

use std::time::Duration;

use durabus::{Event, EventBus, EventStatus, SubscribeOptions};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. An OTLP exporter and a tracer provider that batches spans to it.
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .unwrap_or_else(|_| "http://localhost:4318".into());
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(Resource::builder().with_service_name("shop").build())
        .build();

    // 2. The tracing-opentelemetry layer: durabus's spans become OpenTelemetry spans.
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("shop")))
        .init();

    // 3. The bus, as always.
    let dir = tempfile::tempdir()?;
    let bus = EventBus::open(dir.path().join("shop.db")).await?;
    bus.subscribe(
        "order.*",
        |e: Event| async move {
            // The handler's own spans nest under its delivery's `process` span.
            let _charge = tracing::info_span!("charge card", order = %e.payload).entered();
            Ok(())
        },
        SubscribeOptions::default().name("billing"),
    )
    .await?;
    bus.start().await?;

    // 4. Publish inside a request's span: the delivery joins the request's trace.
    let id = {
        let request = tracing::info_span!("POST /orders");
        let _in = request.enter();
        bus.enqueue("order.placed", &42).await?
    };
    while bus.store().get_event(id).await?.map(|e| e.status) != Some(EventStatus::Done) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bus.shutdown().await?;

    // 5. Flush what is batched before the process ends.
    provider.shutdown()?;
    println!("order {id} delivered; its spans went to {endpoint}");
    Ok(())
}

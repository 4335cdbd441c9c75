//! What tracing costs end to end (SQLite): the same no-op pipeline with no subscriber, and
//! with the OpenTelemetry layer recording every span of the bus (a send span per publish, a
//! process span per delivery, the trace context written into each event and read back) into
//! a batch processor whose exporter drops them. Each run gets a runtime of its own whose
//! threads carry the run's subscriber, so the bus's tasks run under it.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

use super::harness::Bench;

/// An exporter that drops every span: what is measured is the recording, not a collector.
#[derive(Debug)]
struct Dropped;

impl SpanExporter for Dropped {
    fn export(&self, _batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        std::future::ready(Ok(()))
    }
}

/// End to end (events/s) over `n` events, with the OpenTelemetry layer when `otel`.
pub async fn end_to_end(b: &Bench, n: u64, otel: bool) -> anyhow::Result<f64> {
    let provider = otel.then(|| {
        SdkTracerProvider::builder()
            .with_batch_exporter(Dropped)
            .build()
    });
    let dispatch = match &provider {
        Some(p) => Dispatch::new(
            tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(p.tracer("durabus-bench"))),
        ),
        None => Dispatch::none(),
    };
    let eps = tokio::task::block_in_place(|| {
        let on_start = dispatch.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .on_thread_start(move || {
                // The thread's default for its whole life (it ends with the runtime).
                std::mem::forget(tracing::dispatcher::set_default(&on_start));
            })
            .build()?;
        let _default = tracing::dispatcher::set_default(&dispatch);
        runtime.block_on(async { super::pipeline::end_to_end(b, n).await.map(|(eps, _)| eps) })
    })?;
    if let Some(p) = provider {
        p.shutdown()?;
    }
    Ok(eps)
}

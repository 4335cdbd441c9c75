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

/// How a run traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Tracing {
    /// No subscriber.
    None,
    /// The layer, spans handed to the SDK's batch processor (its own thread, as in
    /// production).
    Batch,
    /// The layer, spans handed to the exporter as each ends, on the thread that ends it: the
    /// recording alone, without the batch thread's wake-ups.
    Simple,
}

/// `traced` as a share of `none`, or 0 (not measured) when either was not run.
pub fn ratio(traced: f64, none: f64) -> f64 {
    if traced > 0.0 && none > 0.0 {
        traced / none
    } else {
        0.0
    }
}

/// End to end (events/s) over `n` events, traced as `tracing` says.
pub async fn end_to_end(b: &Bench, n: u64, tracing: Tracing) -> anyhow::Result<f64> {
    let provider = match tracing {
        Tracing::None => None,
        Tracing::Batch => Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(Dropped)
                .build(),
        ),
        Tracing::Simple => Some(
            SdkTracerProvider::builder()
                .with_simple_exporter(Dropped)
                .build(),
        ),
    };
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

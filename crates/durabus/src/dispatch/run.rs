//! Running one handler: under its timeout, with a panic caught and turned into a failure.

use crate::dispatch::registry::Entry;
use crate::event::Event;
use crate::handler::{CatchUnwind, panic_message};
use crate::telemetry::RunResult;

/// How one handler run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandlerOutcome {
    /// It returned `Ok(())`.
    Ok,
    /// It returned an error: its message and its chain of sources.
    Error(String, Vec<String>),
    /// It ran past its timeout and was cancelled at its next await point.
    Timeout(String),
    /// It panicked.
    Panic(String),
}

impl HandlerOutcome {
    /// Whether the handler succeeded.
    pub fn is_ok(&self) -> bool {
        *self == HandlerOutcome::Ok
    }

    /// How the metrics label it.
    pub fn kind(&self) -> RunResult {
        match self {
            HandlerOutcome::Ok => RunResult::Ok,
            HandlerOutcome::Error(..) => RunResult::Error,
            HandlerOutcome::Timeout(_) => RunResult::Timeout,
            HandlerOutcome::Panic(_) => RunResult::Panic,
        }
    }

    /// The failure text and its causes, if it failed.
    pub fn into_failure(self) -> Option<(String, Vec<String>)> {
        match self {
            HandlerOutcome::Ok => None,
            HandlerOutcome::Error(e, causes) => Some((e, causes)),
            HandlerOutcome::Timeout(e) | HandlerOutcome::Panic(e) => Some((e, Vec::new())),
        }
    }
}

/// The chain of sources below `error`, outermost first (at most 16).
fn causes(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out = Vec::new();
    let mut next = error.source();
    while let Some(e) = next {
        if out.len() == 16 {
            break;
        }
        out.push(e.to_string());
        next = e.source();
    }
    out
}

/// Runs one handler under its timeout. An error, a panic or a timeout fails the attempt.
pub(crate) async fn run_handler(sub: &Entry, event: Event) -> HandlerOutcome {
    let handler = &sub.handler;
    let fut = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.call(event))) {
        Ok(fut) => fut,
        Err(panic) => {
            return HandlerOutcome::Panic(format!(
                "handler panicked: {}",
                panic_message(panic.as_ref())
            ));
        }
    };
    match tokio::time::timeout(sub.info.timeout, CatchUnwind(fut)).await {
        Ok(Ok(Ok(()))) => HandlerOutcome::Ok,
        Ok(Ok(Err(e))) => HandlerOutcome::Error(e.to_string(), causes(e.as_ref())),
        Ok(Err(panic)) => HandlerOutcome::Panic(format!("handler panicked: {panic}")),
        Err(_) => HandlerOutcome::Timeout(format!(
            "handler timed out after {} ms",
            sub.info.timeout.as_millis()
        )),
    }
}

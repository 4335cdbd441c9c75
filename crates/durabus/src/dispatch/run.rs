//! How a handler run is counted: the metrics' label of its outcome.

use crate::handler::HandlerOutcome;
use crate::telemetry::RunResult;

/// How the metrics label `outcome`.
pub(crate) fn result_of(outcome: &HandlerOutcome) -> RunResult {
    match outcome {
        HandlerOutcome::Ok => RunResult::Ok,
        HandlerOutcome::Error(..) => RunResult::Error,
        HandlerOutcome::Timeout(_) => RunResult::Timeout,
        HandlerOutcome::Panic(_) => RunResult::Panic,
    }
}

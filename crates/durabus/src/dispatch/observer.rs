//! What the dispatcher reports as it works. Metrics are observers: the dispatcher calls each
//! one at the same points, whichever path ended the attempt (a worker, an inline publish, an own
//! loop's `finalize`).

use crate::telemetry::{Pass, RetryMetrics};

/// Told about the dispatcher's work. Calls are made on the dispatching task: keep them cheap
/// and never block.
pub(crate) trait Observer: Send + Sync + 'static {
    /// A delivery pass over an event of `event_type` ended; the event had `prior_failures`
    /// failed attempts before it.
    fn pass_finished(&self, event_type: &str, prior_failures: u32, pass: Pass);
}

impl Observer for RetryMetrics {
    fn pass_finished(&self, event_type: &str, prior_failures: u32, pass: Pass) {
        self.record(event_type, prior_failures, pass);
    }
}

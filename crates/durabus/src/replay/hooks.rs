//! What a replay started by this process may carry that cannot be stored: a handler and a
//! filter.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::event::Event;
use crate::handler::Handler;

/// A predicate over events: a replay skips those it refuses.
pub type ReplayFilter = Arc<dyn Fn(&Event) -> bool + Send + Sync>;

/// What a replay started by this process may carry that cannot be stored: a handler that gets
/// each event instead of it being re-published, and a filter. A replay with either is
/// *attached*: the bus's runners leave it to this process, which resumes it with the same
/// hooks after a crash ([`Replays::run`](super::Replays::run)).
#[derive(Clone)]
pub struct ReplayHooks {
    handler: Option<Arc<dyn Handler>>,
    filter: Option<ReplayFilter>,
    timeout: Duration,
}

impl Default for ReplayHooks {
    fn default() -> Self {
        ReplayHooks {
            handler: None,
            filter: None,
            timeout: Duration::from_secs(30),
        }
    }
}

impl fmt::Debug for ReplayHooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayHooks")
            .field("handler", &self.handler.is_some())
            .field("filter", &self.filter.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ReplayHooks {
    /// No hooks: events are re-published and none is filtered out.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hands each selected event to `handler` (under the timeout, a panic caught) instead of
    /// re-publishing it. A handler error counts in `errors`; the replay goes on.
    #[must_use]
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// Replays only the selected events `filter` accepts; the others count as skipped.
    #[must_use]
    pub fn filter(mut self, filter: impl Fn(&Event) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(filter));
        self
    }

    /// The handler's timeout per event. Defaults to 30 s.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Whether there is nothing that only this process has.
    pub fn is_empty(&self) -> bool {
        self.handler.is_none() && self.filter.is_none()
    }

    pub(crate) fn handler_ref(&self) -> Option<&Arc<dyn Handler>> {
        self.handler.as_ref()
    }

    pub(crate) fn handler_timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether `event` passes the filter (all do without one).
    pub(crate) fn accepts(&self, event: &Event) -> bool {
        self.filter.as_ref().is_none_or(|f| f(event))
    }
}

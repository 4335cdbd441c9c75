//! Handlers and subscriptions.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;

use crate::clock::Timestamp;
use crate::event::Event;
use crate::retry::RetryOverride;

/// Any error a handler returns.
pub use crate::error::BoxError;

/// What a handler returns: `Ok(())` when the event was handled.
pub type HandlerResult = Result<(), BoxError>;

/// A boxed handler future.
pub type HandlerFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send>>;

/// Something that handles events. Implemented for every
/// `Fn(Event) -> impl Future<Output = HandlerResult>`.
pub trait Handler: Send + Sync + 'static {
    /// Handles one event.
    fn call(&self, event: Event) -> HandlerFuture;
}

impl<F, Fut> Handler for F
where
    F: Fn(Event) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn call(&self, event: Event) -> HandlerFuture {
        Box::pin(self(event))
    }
}

/// Catches a panic of the future it wraps, so a panicking handler fails its attempt instead of
/// unwinding through the dispatcher.
struct CatchUnwind(HandlerFuture);

impl std::future::Future for CatchUnwind {
    type Output = Result<HandlerResult, String>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let fut = &mut self.0;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.as_mut().poll(cx))) {
            Ok(std::task::Poll::Ready(r)) => std::task::Poll::Ready(Ok(r)),
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Err(panic) => std::task::Poll::Ready(Err(panic_message(panic.as_ref()))),
        }
    }
}

/// A handler's answer "not now, call me again in `delay`": return it as the handler's error
/// (`Err(Snooze::new(d).into())`, or [`snooze`]). The event is rescheduled for this
/// subscription without counting a failed attempt or touching its circuit breaker; after
/// [`SubscribeOptions::max_snoozes`] snoozes of one event, a further one counts as a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snooze {
    /// How long until the handler is called again.
    pub delay: Duration,
}

impl Snooze {
    /// Call again in `delay`.
    pub fn new(delay: Duration) -> Snooze {
        Snooze { delay }
    }
}

impl std::fmt::Display for Snooze {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "snoozed for {} ms", self.delay.as_millis())
    }
}

impl std::error::Error for Snooze {}

/// A handler's result that snoozes for `delay` (see [`Snooze`]).
///
/// ```
/// use std::time::Duration;
/// use durabus::{Event, HandlerResult};
///
/// async fn handle(e: Event) -> HandlerResult {
///     if e.payload_value()["ready"] != true {
///         return durabus::handler::snooze(Duration::from_secs(30));
///     }
///     Ok(())
/// }
/// ```
pub fn snooze(delay: Duration) -> HandlerResult {
    Err(Box::new(Snooze::new(delay)))
}

/// A failure no retry can mend (a payload that does not fit the handler's type, a request
/// the downstream refuses for good): return it as the handler's error
/// (`Err(Permanent::new(e).into())`, or [`permanent`]). The event goes to the dead-letter
/// queue at once, whatever retries are left, and the subscription's circuit breaker does not
/// count it (the downstream is not at fault). The text and sources are those of the error
/// wrapped.
#[derive(Debug)]
pub struct Permanent(BoxError);

impl Permanent {
    /// Wraps `error`.
    pub fn new(error: impl Into<BoxError>) -> Permanent {
        Permanent(error.into())
    }
}

impl std::fmt::Display for Permanent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Permanent {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// Fails the attempt for good: shorthand for `Err(Permanent::new(error).into())`.
///
/// ```
/// use durabus::{Event, handler::{permanent, HandlerResult}};
///
/// async fn charge(event: Event) -> HandlerResult {
///     if event.payload_value()["amount"].as_i64().unwrap_or(0) < 0 {
///         return permanent("a negative amount cannot be charged");
///     }
///     Ok(())
/// }
/// ```
pub fn permanent(error: impl Into<BoxError>) -> HandlerResult {
    Err(Box::new(Permanent::new(error)))
}

/// How one handler run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandlerOutcome {
    /// It returned `Ok(())`.
    Ok,
    /// It returned an error: its message and its chain of sources.
    Error(String, Vec<String>),
    /// It returned a [`Permanent`] error: no retry can mend it.
    Permanent(String, Vec<String>),
    /// It ran past its timeout and was cancelled at its next await point.
    Timeout(String),
    /// It panicked.
    Panic(String),
    /// It asked to be called again after this long ([`Snooze`]).
    Snoozed(Duration),
}

impl HandlerOutcome {
    /// Whether the handler succeeded.
    pub fn is_ok(&self) -> bool {
        *self == HandlerOutcome::Ok
    }

    /// Whether it failed for good ([`Permanent`]).
    pub fn is_permanent(&self) -> bool {
        matches!(self, HandlerOutcome::Permanent(..))
    }

    /// The failure text and its causes, if it failed, as they are stored: a NUL character
    /// (which PostgreSQL's `text` cannot hold, and which would leave the outcome unrecorded)
    /// becomes U+FFFD on every store.
    pub fn into_failure(self) -> Option<(String, Vec<String>)> {
        let (error, causes) = match self {
            HandlerOutcome::Ok => return None,
            HandlerOutcome::Error(e, causes) | HandlerOutcome::Permanent(e, causes) => (e, causes),
            HandlerOutcome::Timeout(e) | HandlerOutcome::Panic(e) => (e, Vec::new()),
            // Where a snooze is not honoured (a replay through the handler), it fails the run.
            HandlerOutcome::Snoozed(d) => (
                format!(
                    "the handler snoozed for {} ms, which only a delivery honours",
                    d.as_millis()
                ),
                Vec::new(),
            ),
        };
        Some((storable(error), causes.into_iter().map(storable).collect()))
    }
}

/// `text` with each NUL character replaced by U+FFFD.
fn storable(text: String) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{fffd}")
    } else {
        text
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

/// Runs `handler` on `event` under `timeout`. An error, a panic or a timeout fails the run.
pub(crate) async fn run_handler(
    handler: &dyn Handler,
    event: Event,
    timeout: Duration,
) -> HandlerOutcome {
    let fut = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.call(event))) {
        Ok(fut) => fut,
        Err(panic) => {
            return HandlerOutcome::Panic(format!(
                "handler panicked: {}",
                panic_message(panic.as_ref())
            ));
        }
    };
    match tokio::time::timeout(timeout, CatchUnwind(fut)).await {
        Ok(Ok(Ok(()))) => HandlerOutcome::Ok,
        Ok(Ok(Err(e))) => {
            if let Some(s) = e.downcast_ref::<Snooze>() {
                HandlerOutcome::Snoozed(s.delay)
            } else if let Some(p) = e.downcast_ref::<Permanent>() {
                HandlerOutcome::Permanent(p.to_string(), causes(p))
            } else {
                HandlerOutcome::Error(e.to_string(), causes(e.as_ref()))
            }
        }
        Ok(Err(panic)) => HandlerOutcome::Panic(format!("handler panicked: {panic}")),
        Err(_) => HandlerOutcome::Timeout(format!(
            "handler timed out after {} ms",
            timeout.as_millis()
        )),
    }
}

pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Options of one subscription.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubscribeOptions {
    /// Handler timeout for this subscription. Defaults to the bus's `handler_timeout` (30 s).
    pub timeout: Option<Duration>,
    /// Partial retry policy, merged over the bus default.
    pub retry: Option<RetryOverride>,
    /// A stable name. Delivery records use it, so after a restart a retried event skips the
    /// handlers that already succeeded. Without a name, records last as long as the process.
    pub name: Option<String>,
    /// How often the handler may [`Snooze`] one event before a further snooze counts as a
    /// failed attempt (default [`DEFAULT_MAX_SNOOZES`]).
    pub max_snoozes: Option<u32>,
    /// When an event with an ordering key is dead-lettered by this subscription's handler,
    /// keep its key held (later events of the key wait) until the dead letter is retried,
    /// resolved, abandoned or purged. Off by default: the key moves on.
    pub hold_key_on_dead_letter: bool,
}

/// How often a handler may snooze one event unless [`SubscribeOptions::max_snoozes`] says.
pub const DEFAULT_MAX_SNOOZES: u32 = 25;

impl SubscribeOptions {
    /// Sets the handler timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the retry override.
    #[must_use]
    pub fn retry(mut self, retry: RetryOverride) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Sets the stable name.
    #[must_use]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets how often the handler may snooze one event (see [`Snooze`]).
    #[must_use]
    pub fn max_snoozes(mut self, n: u32) -> Self {
        self.max_snoozes = Some(n);
        self
    }

    /// Keeps an ordering key held by an event this handler dead-letters (see
    /// [`hold_key_on_dead_letter`](Self::hold_key_on_dead_letter)).
    #[must_use]
    pub fn hold_key_on_dead_letter(mut self, on: bool) -> Self {
        self.hold_key_on_dead_letter = on;
        self
    }
}

/// A live subscription as the bus holds it, its handler aside.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Subscription {
    /// Subscription id.
    pub id: String,
    /// Stable name, if given.
    pub name: Option<String>,
    /// The glob pattern of event types.
    pub event_type: String,
    /// Handler timeout in force.
    pub timeout: Duration,
    /// Retry override, if given.
    pub retry: Option<RetryOverride>,
    /// How often the handler may snooze one event.
    pub max_snoozes: u32,
    /// Whether an ordering key stays held by an event this handler dead-letters.
    pub hold_key_on_dead_letter: bool,
    /// When the subscription was made.
    pub created_at: Timestamp,
}

impl Subscription {
    /// How metrics label this subscription: its name, or its pattern when it has none (ids
    /// change with every start).
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.event_type)
    }
}

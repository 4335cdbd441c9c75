//! The error hook: every error the bus meets in the background (where no caller is waiting
//! for it) is handed to the application, with where it happened and whether the bus retries.
//! It is the place to hook alerting:
//!
//! ```no_run
//! # async fn build() -> durabus::Result<()> {
//! let bus = durabus::EventBus::builder()
//!     .sqlite("app.db")
//!     .on_error(|e: &durabus::BusError<'_>| {
//!         eprintln!("durabus: {} failed ({}): {}", e.source, e.kind(), e.error);
//!     })
//!     .build()
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! The hook runs on the bus's own tasks: keep it quick and never block in it (send to a
//! channel for slow work). A hook that panics is caught and logged; the bus carries on.

use std::sync::{Arc, RwLock};

use crate::error::{Error, ErrorKind};

/// Where in the bus a background error happened.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorSource {
    /// Claiming due events for delivery.
    Claim,
    /// Writing delivery outcomes (done, retry, dead letter).
    RecordOutcomes,
    /// Giving back claimed events at shutdown.
    Release,
    /// Writing an error snapshot of a failed attempt.
    Snapshot,
    /// Recovering events a crash left in `processing`, at start.
    Recovery,
    /// PostgreSQL's `LISTEN` connection (wake-ups from other processes).
    Listener,
    /// PostgreSQL's lease renewal of the events this process holds.
    LeaseRenewal,
    /// Looking for durable operations to run, or running one (its id).
    Operation(Option<String>),
    /// A maintenance job (its name).
    Job(String),
    /// Publishing a periodic event's tick (the definition's name).
    Periodic(String),
    /// Reloading the payload configuration.
    PayloadConfig,
    /// Reading the active pauses, ending expired ones, waking what they parked.
    Pauses,
    /// Reporting this process's breakers to the store, following shared ones.
    Breakers,
    /// Removing an unnamed subscription's row at shutdown.
    SubscriptionCleanup,
    /// A handler's failed delivery attempt (only with
    /// [`BusBuilder::report_handler_failures`](crate::BusBuilder::report_handler_failures)):
    /// the event, its type, the subscription and the attempt (1 for the first). `retrying` says
    /// whether a retry is scheduled; `false` when the event was dead-lettered.
    Handler {
        /// The event.
        event_id: crate::event::EventId,
        /// Its type.
        event_type: String,
        /// The id of the subscription whose handler failed.
        subscription_id: String,
        /// The attempt that failed, 1-based.
        attempt: u32,
    },
}

impl std::fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorSource::Claim => f.write_str("claim"),
            ErrorSource::RecordOutcomes => f.write_str("record outcomes"),
            ErrorSource::Release => f.write_str("release"),
            ErrorSource::Snapshot => f.write_str("error snapshot"),
            ErrorSource::Recovery => f.write_str("recovery"),
            ErrorSource::Listener => f.write_str("listener"),
            ErrorSource::LeaseRenewal => f.write_str("lease renewal"),
            ErrorSource::Operation(Some(id)) => write!(f, "operation {id}"),
            ErrorSource::Operation(None) => f.write_str("operations"),
            ErrorSource::Job(name) => write!(f, "job {name}"),
            ErrorSource::Periodic(name) => write!(f, "periodic event {name}"),
            ErrorSource::PayloadConfig => f.write_str("payload configuration"),
            ErrorSource::Pauses => f.write_str("pauses"),
            ErrorSource::Breakers => f.write_str("breakers"),
            ErrorSource::SubscriptionCleanup => f.write_str("subscription cleanup"),
            ErrorSource::Handler {
                event_id,
                event_type,
                subscription_id,
                attempt,
            } => write!(
                f,
                "handler of subscription {subscription_id} on {event_type} event {event_id} \
                 (attempt {attempt})"
            ),
        }
    }
}

/// An error the bus met in the background, as the error hook sees it.
#[derive(Debug)]
pub struct BusError<'a> {
    /// Where it happened.
    pub source: ErrorSource,
    /// The error.
    pub error: &'a Error,
    /// Whether the bus tries again by itself (a claim, an outcome write, the listener); `false`
    /// when it gave up on this piece of work (a job run, an operation that failed).
    pub retrying: bool,
}

impl BusError<'_> {
    /// The error's kind, to branch on.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind()
    }
}

type HookFn = dyn Fn(&BusError<'_>) + Send + Sync;

/// The application's error hook, shared by the bus's tasks (and its store's). Empty by
/// default: errors then only reach `tracing`.
#[derive(Clone, Default)]
pub struct ErrorHook {
    hook: Arc<RwLock<Option<Arc<HookFn>>>>,
    /// Whether handler failures are reported too (off by default: they are the application's
    /// own errors, already logged and counted).
    handlers: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for ErrorHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = crate::sync::read(&self.hook).is_some();
        f.debug_struct("ErrorHook").field("set", &set).finish()
    }
}

impl ErrorHook {
    /// A hook calling `f`.
    pub fn new(f: impl Fn(&BusError<'_>) + Send + Sync + 'static) -> ErrorHook {
        let hook = ErrorHook::default();
        hook.set(f);
        hook
    }

    /// Sets (or replaces) the function, for every holder of this hook.
    pub fn set(&self, f: impl Fn(&BusError<'_>) + Send + Sync + 'static) {
        *crate::sync::write(&self.hook) = Some(Arc::new(f));
    }

    /// Reports handler failures too (`on`), or not (the default).
    pub fn hear_handler_failures(&self, on: bool) {
        self.handlers
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether handler failures are reported.
    pub fn hears_handler_failures(&self) -> bool {
        self.handlers.load(std::sync::atomic::Ordering::Relaxed)
            && crate::sync::read(&self.hook).is_some()
    }

    /// Hands `error` to the hook, if one is set. A panic in the hook is caught and logged.
    pub fn report(&self, source: ErrorSource, error: &Error, retrying: bool) {
        let Some(f) = crate::sync::read(&self.hook).clone() else {
            return;
        };
        let e = BusError {
            source,
            error,
            retrying,
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&e))).is_err() {
            tracing::error!(source = %e.source, "the error hook panicked; the bus carries on");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn the_hook_sees_source_kind_and_survives_its_own_panic() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let hook = ErrorHook::new(move |e| {
            s.lock()
                .unwrap()
                .push((e.source.to_string(), e.kind(), e.retrying));
            if e.source == ErrorSource::Listener {
                panic!("hook bug");
            }
        });
        let copy = hook.clone();
        copy.report(ErrorSource::Claim, &Error::StoreClosed, true);
        hook.report(
            ErrorSource::Job("cleanup-history".into()),
            &Error::Internal("x".into()),
            false,
        );
        hook.report(ErrorSource::Listener, &Error::StoreClosed, true);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], ("claim".into(), ErrorKind::Closed, true));
        assert_eq!(
            seen[1],
            ("job cleanup-history".into(), ErrorKind::Internal, false)
        );
        ErrorHook::default().report(ErrorSource::Claim, &Error::StoreClosed, true);
    }

    #[test]
    fn handler_failures_are_heard_only_when_asked_and_with_a_hook() {
        let hook = ErrorHook::default();
        hook.hear_handler_failures(true);
        assert!(
            !hook.hears_handler_failures(),
            "no hook set: nothing to hear them"
        );
        hook.set(|_| {});
        assert!(hook.hears_handler_failures());
        hook.hear_handler_failures(false);
        assert!(!hook.hears_handler_failures());
        let e = Error::HandlerFailed {
            subscription: "ledger".into(),
            message: "refused".into(),
        };
        assert_eq!(e.kind(), ErrorKind::Handler);
        assert_eq!(e.to_string(), "handler ledger failed: refused");
    }
}

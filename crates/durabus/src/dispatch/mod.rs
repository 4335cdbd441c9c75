//! Delivery: running the matching handlers of one event and recording the outcome, and the
//! background worker loop that claims due events.

pub(crate) mod worker;

use std::sync::Arc;
use std::time::Duration;

use crate::breaker::Admission;
use crate::bus::Inner;
use crate::bus::registry::Entry;
use crate::clock::Timestamp;
use crate::event::Event;
use crate::metrics::Pass;
use crate::retry::RetryPolicy;
use crate::store::Outcome;

pub(crate) use worker::run_worker;

/// Catches a panic of the future it wraps, so a panicking handler fails its attempt instead of
/// unwinding through the dispatcher.
struct CatchUnwind(crate::handler::HandlerFuture);

impl std::future::Future for CatchUnwind {
    type Output = Result<crate::handler::HandlerResult, String>;

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

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Runs one handler under its timeout. An error, a panic or a timeout fails the attempt; a
/// timed-out handler is cancelled at its next await point.
async fn run_handler(sub: &Entry, event: Event) -> Result<(), String> {
    let handler = &sub.handler;
    let fut = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler.call(event))) {
        Ok(fut) => fut,
        Err(panic) => {
            return Err(format!(
                "handler panicked: {}",
                panic_message(panic.as_ref())
            ));
        }
    };
    match tokio::time::timeout(sub.info.timeout, CatchUnwind(fut)).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(panic)) => Err(format!("handler panicked: {panic}")),
        Err(_) => Err(format!(
            "handler timed out after {} ms",
            sub.info.timeout.as_millis()
        )),
    }
}

/// Delivers a `processing` event to every matching handler that has not yet handled it, in
/// subscription order, stopping at the first failure, then records the outcome.
pub(crate) async fn deliver(inner: &Arc<Inner>, event: Event) {
    let outcome = attempt(inner, event).await;
    record_batch(inner, vec![outcome]).await;
}

/// Writes outcomes in one store call, retrying with back-off while the store fails (a lock held
/// too long, say): giving up would leave the events `processing` until the next start. Stops
/// when the store is closed; the next start then recovers the events.
pub(crate) async fn record_batch(inner: &Arc<Inner>, outcomes: Vec<Outcome>) {
    let mut pause = Duration::from_millis(10);
    loop {
        match inner
            .store
            .record_many(outcomes.clone(), inner.clock.now())
            .await
        {
            Ok(flags) => {
                for (o, applied) in outcomes.iter().zip(flags) {
                    if !applied {
                        tracing::warn!(event_id = %o.id(), "outcome not recorded: the event is no longer processing");
                    }
                }
                return;
            }
            Err(crate::Error::StoreClosed) => {
                tracing::warn!(
                    events = outcomes.len(),
                    "store closed before outcomes were recorded; the next start recovers them"
                );
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, ?pause, "recording outcomes failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

pub(crate) async fn attempt(inner: &Arc<Inner>, event: Event) -> Outcome {
    let subs = inner.registry.matching(&event.event_type);
    let policy = RetryPolicy::merge(
        &inner.config.retry,
        subs.iter().filter_map(|s| s.info.retry.as_ref()),
    );
    if event.retry_count > policy.max_retries {
        // Every allowed attempt has been used, the last ones by processes that died during
        // them (crash recovery counts those). A handler that kills its process must not loop
        // forever: the event becomes a dead letter without another attempt.
        tracing::warn!(
            event_id = %event.id,
            event_type = %event.event_type,
            attempt = event.retry_count,
            max_attempts = policy.max_attempts(),
            "attempts exhausted by interrupted deliveries; dead-lettering"
        );
        return Outcome::Dead {
            id: event.id,
            retry_count: event.retry_count,
            errors: event.errors,
            delivered: event.delivered,
        };
    }
    let mut delivered = event.delivered.clone();
    let pending: Vec<&Arc<Entry>> = subs
        .iter()
        .filter(|s| !delivered.iter().any(|k| k == &s.key))
        .collect();
    let ids: Vec<&str> = pending.iter().map(|s| s.info.id.as_str()).collect();
    let admissions = inner.breakers.admit(&ids, inner.clock.now());
    let mut deferred_until: Option<Timestamp> = None;
    let mut failure = None;
    for (i, (sub, admission)) in pending.iter().zip(&admissions).enumerate() {
        if let Admission::Skip { retry_at } = admission {
            // Open breaker: this handler gets the event later; the others run now.
            deferred_until = Some(deferred_until.map_or(*retry_at, |t| t.min(*retry_at)));
            continue;
        }
        let result = run_handler(sub, event.clone()).await;
        inner
            .breakers
            .record(&sub.info.id, inner.clock.now(), result.is_ok());
        match result {
            Ok(()) => delivered.push(sub.key.clone()),
            Err(error) => {
                // Handlers after the failure do not run: a probe admitted for one of them is
                // released, or its breaker would wait for that probe forever.
                for (later, adm) in pending.iter().zip(&admissions).skip(i + 1) {
                    if *adm == Admission::Probe {
                        inner.breakers.release_probe(&later.info.id);
                    }
                }
                failure = Some((*sub, error));
                break;
            }
        }
    }
    let prior = event.retry_count;
    let Some((sub, error)) = failure else {
        if let Some(retry_at) = deferred_until {
            inner
                .metrics
                .record(&event.event_type, prior, Pass::Deferred);
            tracing::info!(
                event_id = %event.id,
                event_type = %event.event_type,
                next_attempt_at = %retry_at,
                "event deferred: a circuit breaker is open for a matching subscription"
            );
            // Not a failed attempt: retry count and errors stay as they are.
            return Outcome::Retry {
                id: event.id,
                retry_count: event.retry_count,
                errors: event.errors,
                delivered,
                next_attempt_at: retry_at,
            };
        }
        inner
            .metrics
            .record(&event.event_type, prior, Pass::Succeeded);
        return Outcome::Done {
            id: event.id,
            delivered,
        };
    };
    let attempt = event.retry_count.saturating_add(1);
    let retry_count = attempt;
    let mut errors = event.errors;
    errors.push(format!("attempt {attempt} [{}]: {error}", sub.key));
    let dead = retry_count > policy.max_retries;
    inner
        .metrics
        .record(&event.event_type, prior, Pass::Failed { dead });
    let delay = if dead {
        Duration::ZERO
    } else {
        policy.delay_with_jitter(attempt + 1)
    };
    tracing::warn!(
        event_id = %event.id,
        event_type = %event.event_type,
        subscription_id = %sub.info.id,
        attempt,
        max_attempts = policy.max_attempts(),
        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        error = %error,
        dead_lettered = dead,
        "event delivery failed"
    );
    if dead {
        Outcome::Dead {
            id: event.id,
            retry_count,
            errors,
            delivered,
        }
    } else {
        Outcome::Retry {
            id: event.id,
            retry_count,
            errors,
            delivered,
            next_attempt_at: inner.clock.now().plus(delay),
        }
    }
}

//! Replays: preview, dry run, submit, run, follow and cancel (see [`crate::replay`] for what a
//! replay selects and publishes).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock, Timestamp};
use crate::dlq::Actor;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::handler::Handler;
use crate::operation::{NewOperation, Operation, OperationStatus};
use crate::operation::{Operations, RunOptions};
use crate::replay::{
    self, DryRun, ReplayMode, ReplayParams, ReplayPreview, ReplayRequest, ReplayResult,
    ReplaySelection,
};
use crate::store::{Position, Store};

/// Most samples a preview or a dry run returns.
pub const SAMPLES: usize = 10;
/// Events read per page by a dry run.
const DRY_RUN_PAGE: usize = 1_000;

/// A predicate over events: a replay skips those it refuses.
pub type ReplayFilter = Arc<dyn Fn(&Event) -> bool + Send + Sync>;

/// What a replay started by this process may carry that cannot be stored: a handler that gets
/// each event instead of it being re-published, and a filter. A replay with either is
/// *attached*: the bus's runners leave it to this process, which resumes it with the same
/// hooks after a crash ([`Replays::run`]).
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

/// Replays on a store.
#[derive(Debug, Clone)]
pub struct Replays {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Replays {
    /// On `store`, reading the system clock.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store, Arc::new(SystemClock))
    }

    /// On `store` reading `clock` (rate limits pace themselves on it).
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        Replays {
            store,
            clock,
            telemetry: None,
        }
    }

    /// Counts the events replays handle in `telemetry` (a bus's metrics).
    pub(crate) fn observed(mut self, telemetry: Arc<crate::telemetry::Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    fn operations(&self) -> Operations {
        Operations::with_clock(self.store.clone(), self.clock.clone())
            .observed(self.telemetry.clone())
    }

    /// What `selection` covers now: the count, per type, and the first [`SAMPLES`] events.
    /// Fails with [`Error::InvalidConfig`] (or [`Error::InvalidPattern`]) for a bad selection.
    pub async fn preview(&self, selection: &ReplaySelection) -> Result<ReplayPreview> {
        selection.validate()?;
        let now = self.clock.now();
        let bound = self.store.walk_bound(now).await?;
        let frozen = selection.frozen(now);
        let by_type: BTreeMap<String, u64> = self
            .store
            .walk_count(&frozen, &bound)
            .await?
            .into_iter()
            .collect();
        let samples = self
            .store
            .walk(&frozen, &bound, &Position::default(), SAMPLES)
            .await?
            .into_iter()
            .map(|(_, e)| e)
            .collect();
        Ok(ReplayPreview {
            count: by_type.values().sum(),
            by_type,
            samples,
        })
    }

    /// Walks the whole selection as the replay would, with `hooks`' filter, and reports what
    /// it would replay; changes nothing (no operation, no event, no rate limit: it only
    /// reads). `progress` gets the number of events read so far after each page.
    pub async fn dry_run(
        &self,
        request: &ReplayRequest,
        hooks: &ReplayHooks,
        mut progress: impl FnMut(u64) + Send,
    ) -> Result<DryRun> {
        request.validate()?;
        let started = self.clock.now();
        let bound = self.store.walk_bound(started).await?;
        let selection = request.selection.frozen(started);
        let mut after = Position::default();
        let (mut count, mut skipped, mut read) = (0u64, 0u64, 0u64);
        let mut by_type = BTreeMap::new();
        let mut samples = Vec::new();
        loop {
            let page = self
                .store
                .walk(&selection, &bound, &after, DRY_RUN_PAGE)
                .await?;
            let full = page.len() == DRY_RUN_PAGE;
            for (position, event) in page {
                read += 1;
                after = position;
                if !hooks.accepts(&event) {
                    skipped += 1;
                    continue;
                }
                count += 1;
                *by_type.entry(event.event_type.clone()).or_insert(0) += 1;
                if samples.len() < SAMPLES {
                    samples.push(event);
                }
            }
            progress(read);
            if !full {
                break;
            }
        }
        Ok(DryRun {
            count,
            by_type,
            skipped,
            samples,
            duration_ms: self.clock.now().as_millis() - started.as_millis(),
        })
    }

    /// Submits a replay that re-publishes its selection, `pending`: the selection is frozen
    /// now. Any runner may run it: a started bus does, or [`run`](Self::run). Fails with
    /// [`Error::InvalidConfig`] for a bad request.
    pub async fn submit(&self, request: &ReplayRequest, actor: &Actor) -> Result<Operation> {
        self.submit_with(request, actor, &ReplayHooks::default())
            .await
    }

    /// [`submit`](Self::submit) with `hooks`: with a handler or a filter the replay is attached
    /// to this process (run it with [`run`](Self::run) and the same hooks).
    pub async fn submit_with(
        &self,
        request: &ReplayRequest,
        actor: &Actor,
        hooks: &ReplayHooks,
    ) -> Result<Operation> {
        request.validate()?;
        actor.validate()?;
        let now = self.clock.now();
        let bound = self.store.walk_bound(now).await?;
        let selection = request.selection.frozen(now);
        let total = self
            .store
            .walk_count(&selection, &bound)
            .await?
            .iter()
            .map(|(_, n)| n)
            .sum();
        let params = ReplayParams {
            selection,
            rate_limit: request.rate_limit,
            mode: if hooks.handler.is_some() {
                ReplayMode::Handler
            } else {
                ReplayMode::Republish
            },
            attached: !hooks.is_empty(),
            bound_key: bound.key,
        };
        let params = serde_json::to_value(&params)
            .map_err(|e| Error::unserialisable("a replay's parameters", &e))?;
        self.store
            .operation_create(
                NewOperation {
                    id: uuid::Uuid::now_v7().to_string(),
                    kind: replay::KIND.to_owned(),
                    params,
                    bound: bound.at,
                    total,
                    actor: actor.clone(),
                },
                now,
            )
            .await
    }

    /// Runs replay `id` here until it ends (or `options.pause` is set), calling `progress`
    /// after each chunk; `hooks` are what an attached replay was started with. Fails with
    /// [`Error::NotFound`], [`Error::Conflict`] (a live runner holds it, or it needs hooks this
    /// call lacks), or the error that failed it.
    pub async fn run(
        &self,
        id: &str,
        options: &RunOptions,
        hooks: &ReplayHooks,
        progress: impl FnMut(&Operation) + Send,
    ) -> Result<Operation> {
        self.get(id).await?;
        self.operations()
            .run_with(id, options, hooks, progress)
            .await
    }

    /// Submits and runs a replay to its end here, as the specification's `replay(options)`:
    /// re-published, or handed to `hooks`' handler.
    pub async fn replay(
        &self,
        request: &ReplayRequest,
        actor: &Actor,
        hooks: &ReplayHooks,
    ) -> Result<ReplayResult> {
        let op = self.submit_with(request, actor, hooks).await?;
        let op = self
            .run(&op.id, &RunOptions::default(), hooks, |_| {})
            .await?;
        Ok(ReplayResult::of(&op, self.clock.now()))
    }

    /// One replay. Fails with [`Error::NotFound`] (also for an operation that is not a replay).
    pub async fn get(&self, id: &str) -> Result<Operation> {
        match self.store.operation_get(id).await? {
            Some(op) if op.kind == replay::KIND => Ok(op),
            _ => Err(Error::NotFound {
                what: format!("replay {id}"),
            }),
        }
    }

    /// Its result in the specification's shape.
    pub async fn status(&self, id: &str) -> Result<ReplayResult> {
        let op = self.get(id).await?;
        Ok(ReplayResult::of(&op, self.clock.now()))
    }

    /// Replays, newest first (at most `limit`, only `status` if given).
    pub async fn list(
        &self,
        status: Option<OperationStatus>,
        limit: u32,
    ) -> Result<Vec<Operation>> {
        self.store
            .operation_list(status, Some(replay::KIND), limit)
            .await
    }

    /// Cancels a replay: at once if it has not started or its runner died, else after the
    /// chunk it is on. Fails with [`Error::NotFound`], or [`Error::Conflict`] if it has ended.
    pub async fn cancel(&self, id: &str) -> Result<Operation> {
        self.get(id).await?;
        self.operations().cancel(id).await
    }

    /// The time now, on this service's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

//! Replays: preview, dry run, submit, run, follow and cancel (see [`crate::replay`] for what a
//! replay selects and publishes).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::hooks::ReplayHooks;
use super::run::ReplayKind;
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::dlq::Actor;
use crate::error::{Error, Result};
use crate::operation::{Kinds, OperationKind, RunOptions, Runner};
use crate::operation::{NewOperation, Operation, OperationStatus};
use crate::replay::{
    DryRun, ReplayMode, ReplayParams, ReplayPreview, ReplayRequest, ReplayResult, ReplaySelection,
};
use crate::store::{Position, Store};

/// Most samples a preview or a dry run returns.
pub const SAMPLES: usize = 10;
/// Events read per page by a dry run.
const DRY_RUN_PAGE: usize = 1_000;

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

    fn runner(&self) -> Runner {
        Runner::new(self.store.clone(), self.clock.clone()).observed(self.telemetry.clone())
    }

    /// What `selection` covers now: the count, per type, and the first [`SAMPLES`] events.
    /// Fails with [`Error::Invalid`] (or [`Error::InvalidPattern`]) for a bad selection.
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
    /// [`Error::Invalid`] for a bad request.
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
            mode: if hooks.handler_ref().is_some() {
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
                    kind: OperationKind::Replay,
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
        let kinds = Kinds::new().with(ReplayKind::with_hooks(hooks.clone()));
        self.runner().run(id, options, &kinds, progress).await
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
            Some(op) if op.kind == OperationKind::Replay => Ok(op),
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
            .operation_list(status, Some(OperationKind::Replay), limit)
            .await
    }

    /// Cancels a replay: at once if it has not started or its runner died, else after the
    /// chunk it is on. Fails with [`Error::NotFound`], or [`Error::Conflict`] if it has ended.
    pub async fn cancel(&self, id: &str) -> Result<Operation> {
        self.get(id).await?;
        let kinds = Kinds::new().with(ReplayKind::default());
        self.runner().cancel(id, &kinds).await
    }

    /// The time now, on this service's clock.
    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }
}

//! Running a replay: pages of the frozen selection in the store's walk order, each page's
//! events and the operation's progress (cursor, counts, summary) written in one transaction,
//! paced by a token bucket on the injected clock.
//!
//! Re-published, every event of a page is written with the cursor that passes it: a replay
//! killed at any point resumes after the last page written, so no event is replayed twice and
//! none is skipped. Handed to a handler, each event's progress is written right after its
//! handler returns: a crash can repeat only the event whose handler was running.

use async_trait::async_trait;

use super::hooks::ReplayHooks;
use crate::clock::sleep_until;
use crate::error::{Error, Result};
use crate::event::{Event, NewEvent};
use crate::handler::run_handler;
use crate::operation::{
    Advance, Kind, Operation, OperationKind, OperationStatus, RunContext, Work, passing,
};
use crate::replay::{
    self, ReplayCompleted, ReplayMode, ReplayParams, ReplayStarted, ReplaySummary, TokenBucket,
};
use crate::store::Position;
use crate::telemetry::spans;
use tracing::Instrument;

/// Replays as a kind of operation, run with `hooks` (a runner of the bus's has none: it runs
/// re-publishing replays; [`Replays::run`](super::Replays::run) gives an attached replay the
/// handler or filter it was submitted with).
#[derive(Debug, Clone, Default)]
pub struct ReplayKind {
    hooks: ReplayHooks,
}

impl ReplayKind {
    /// Replays run with `hooks`.
    pub fn with_hooks(hooks: ReplayHooks) -> ReplayKind {
        ReplayKind { hooks }
    }
}

impl Kind for ReplayKind {
    fn kinds(&self) -> &'static [OperationKind] {
        &[OperationKind::Replay]
    }

    fn runs_anywhere(&self, op: &Operation) -> bool {
        !ReplayParams::is_attached(&op.params)
    }

    fn work(&self, op: &Operation, ctx: RunContext) -> Result<Box<dyn Work>> {
        let state = State::of(op, &ctx)?;
        Ok(Box::new(Run {
            ctx,
            hooks: self.hooks.clone(),
            state,
        }))
    }
}

/// One run of a replay: what it works with and what it knows beyond the stored operation.
struct Run {
    ctx: RunContext,
    hooks: ReplayHooks,
    state: State,
}

/// What the run knows beyond the stored operation: kept in step with what was written.
struct State {
    params: ReplayParams,
    summary: ReplaySummary,
    cursor: Position,
    /// The walk's upper bound, frozen at submit.
    bound: Position,
    bucket: Option<TokenBucket>,
}

impl State {
    fn of(op: &Operation, ctx: &RunContext) -> Result<State> {
        let params = ReplayParams::from_json(&op.id, &op.params)?;
        let summary = ReplaySummary::from_json(&op.id, op.summary.as_ref())?;
        let bucket = params
            .rate_limit
            .map(|rate| TokenBucket::new(rate, ctx.now()));
        Ok(State {
            bound: Position {
                at: op.bound,
                key: params.bound_key.clone(),
            },
            params,
            summary,
            cursor: Position {
                at: op.cursor,
                key: op.cursor_key.clone(),
            },
            bucket,
        })
    }
}

/// Counts of one step.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    processed: u64,
    skipped: u64,
    errors: u64,
}

#[async_trait]
impl Work for Run {
    async fn step(&mut self, op: &Operation) -> Result<Operation> {
        if let Some(missing) = self.missing_hooks() {
            self.ctx.release(op).await?;
            return Err(Error::Conflict {
                what: format!("replay {}", op.id),
                status: op.status.as_str().to_owned(),
                message: format!(
                    "replay {} needs the {missing} of the process that started it; that process resumes it with the same hooks (Replays::run), or cancel it",
                    op.id
                ),
            });
        }
        self.page(op).await
    }

    async fn cancel(&mut self, op: &Operation) -> Result<Operation> {
        self.finish(op, OperationStatus::Cancelled, End::default())
            .await
    }

    /// Fails the replay (announcing its end if it had started); if even that cannot be
    /// written, marks it failed plainly.
    async fn fail(&mut self, op: &Operation, e: &Error) {
        let end = End {
            error: Some(e.to_string()),
            ..End::default()
        };
        if let Err(again) = self.finish(op, OperationStatus::Failed, end).await {
            tracing::warn!(operation = %op.id, error = %again, "could not record a replay's failure with its announcement");
            self.ctx.fail_plainly(op, e).await;
        }
    }
}

impl Run {
    fn missing_hooks(&self) -> Option<&'static str> {
        let params = &self.state.params;
        if params.mode == ReplayMode::Handler && self.hooks.handler_ref().is_none() {
            Some("handler")
        } else if params.attached && self.hooks.is_empty() {
            Some("filter")
        } else {
            None
        }
    }

    async fn page(&mut self, op: &Operation) -> Result<Operation> {
        let exec = Exec {
            ctx: &self.ctx,
            hooks: &self.hooks,
        };
        exec.step(op, &mut self.state).await
    }

    async fn finish(
        &mut self,
        op: &Operation,
        status: OperationStatus,
        end: End,
    ) -> Result<Operation> {
        let exec = Exec {
            ctx: &self.ctx,
            hooks: &self.hooks,
        };
        exec.finish(op, &mut self.state, status, end).await
    }
}

/// What a step works with, borrowed beside the run's state.
struct Exec<'a> {
    ctx: &'a RunContext,
    hooks: &'a ReplayHooks,
}

impl Exec<'_> {
    /// Waits for the rate limit's tokens. Returns how many events the next page may hold, or
    /// `None` if the runner was asked to pause meanwhile.
    async fn pace(&self, state: &mut State) -> Option<usize> {
        let chunk = self.ctx.chunk();
        let Some(bucket) = state.bucket.as_mut() else {
            return Some(chunk);
        };
        let want = (chunk as u64).min(bucket.burst());
        loop {
            let now = self.ctx.now();
            let wait = bucket.wait(now, want);
            if wait.is_zero() {
                let n = bucket.available(now).min(chunk as u64);
                return Some(usize::try_from(n).unwrap_or(chunk).max(1));
            }
            if self.ctx.pausing() {
                return None;
            }
            sleep_until(self.ctx.clock.as_ref(), now.plus(wait)).await;
        }
    }

    /// One page: read, replay, write.
    async fn step(&self, op: &Operation, state: &mut State) -> Result<Operation> {
        let Some(limit) = self.pace(state).await else {
            return Ok(op.clone());
        };
        // One more than the page holds: a page that ends the selection says so, and the
        // replay ends in the same transaction.
        let mut page = self
            .ctx
            .store
            .walk(
                &state.params.selection,
                &state.bound,
                &state.cursor,
                limit + 1,
            )
            .await?;
        let exhausted = page.len() <= limit;
        page.truncate(limit);
        match state.params.mode {
            ReplayMode::Republish => self.republish(op, state, page, exhausted).await,
            ReplayMode::Handler => self.hand_over(op, state, page, exhausted).await,
        }
    }

    async fn republish(
        &self,
        op: &Operation,
        state: &mut State,
        page: Vec<(Position, Event)>,
        exhausted: bool,
    ) -> Result<Operation> {
        let mut summary = state.summary.clone();
        let mut tally = Tally::default();
        let mut cursor = state.cursor.clone();
        let mut events = Vec::with_capacity(page.len() + 1);
        for (position, event) in page {
            cursor = position;
            if !self.hooks.accepts(&event) {
                tally.skipped += 1;
                continue;
            }
            summary.count(&event.event_type);
            events.push(replay::republish(&event, &op.id));
            tally.processed += 1;
        }
        if let Some(bucket) = state.bucket.as_mut() {
            bucket.take(self.ctx.now(), tally.processed);
        }
        let end = End {
            tally,
            cursor,
            events,
            summary: Some(summary),
            error: None,
        };
        // The write is paced: how long it took sizes the next page (see `operation::Pace`).
        let rows = end.events.len();
        if exhausted {
            return self
                .ctx
                .paced(
                    rows,
                    self.finish(op, state, OperationStatus::Completed, end),
                )
                .await;
        }
        self.ctx.paced(rows, self.advance(op, state, end)).await
    }

    async fn hand_over(
        &self,
        op: &Operation,
        state: &mut State,
        page: Vec<(Position, Event)>,
        exhausted: bool,
    ) -> Result<Operation> {
        let Some(handler) = self.hooks.handler_ref() else {
            return Err(Error::Internal(
                "a handler replay ran without its handler".into(),
            ));
        };
        let mut current = op.clone();
        let mut skipped = Tally::default();
        let mut cursor = state.cursor.clone();
        for (position, event) in page {
            cursor = position.clone();
            if !self.hooks.accepts(&event) {
                skipped.skipped += 1;
                continue;
            }
            let (id, event_type) = (event.id, event.event_type.clone());
            // The replay's own handler: its span names the operation as the consumer.
            let span = spans::process("replay", &event, &op.id);
            let result = run_handler(handler.as_ref(), event, self.hooks.handler_timeout())
                .instrument(span.clone())
                .await;
            spans::ended(&span, crate::telemetry::RunResult::of(&result));
            let outcome = result.into_failure();
            if let Some(bucket) = state.bucket.as_mut() {
                bucket.take(self.ctx.now(), 1);
            }
            let mut summary = state.summary.clone();
            let mut tally = Tally {
                skipped: skipped.skipped,
                ..Tally::default()
            };
            match outcome {
                None => {
                    summary.count(&event_type);
                    tally.processed = 1;
                }
                Some((error, _)) => {
                    summary.fail(id, error);
                    tally.errors = 1;
                }
            }
            skipped = Tally::default();
            let end = End {
                tally,
                cursor: position,
                events: Vec::new(),
                summary: Some(summary),
                error: None,
            };
            current = self.advance(&current, state, end).await?;
            if current.cancel_requested || self.ctx.pausing() {
                return Ok(current);
            }
        }
        let end = End {
            tally: skipped,
            cursor,
            events: Vec::new(),
            summary: None,
            error: None,
        };
        if exhausted {
            return self
                .finish(&current, state, OperationStatus::Completed, end)
                .await;
        }
        if end.tally.skipped > 0 || end.cursor != state.cursor {
            return self.advance(&current, state, end).await;
        }
        Ok(current)
    }

    /// Writes one step (announcing the start with the first) and, once written, keeps its
    /// cursor and summary.
    async fn advance(&self, op: &Operation, state: &mut State, mut end: End) -> Result<Operation> {
        let mut summary = end.summary.take().unwrap_or_else(|| state.summary.clone());
        if !summary.announced {
            end.events.insert(0, self.started(op, state)?);
            summary.announced = true;
        }
        let advance = Advance {
            cursor: end.cursor.at,
            cursor_key: end.cursor.key.clone(),
            processed: end.tally.processed,
            skipped: end.tally.skipped,
            errors: end.tally.errors,
            events: end.events,
            summary: Some(summary.to_json()?),
            finish: None,
            error: None,
            expect_cursor: Some((state.cursor.at, state.cursor.key.clone())),
        };
        let next = self.commit(&op.id, advance).await?;
        self.count(end.tally, None);
        state.cursor = end.cursor;
        state.summary = summary;
        Ok(next)
    }

    /// Ends the replay with `status`, writing the last step with it. A completed replay
    /// counts the events selected at submit that it never met (deleted since, or no longer
    /// in the statuses asked for) as skipped. The end is announced if the start was, or if
    /// the replay completed (then both are).
    async fn finish(
        &self,
        op: &Operation,
        state: &mut State,
        status: OperationStatus,
        mut end: End,
    ) -> Result<Operation> {
        let mut summary = end.summary.take().unwrap_or_else(|| state.summary.clone());
        let mut tally = end.tally;
        if status == OperationStatus::Completed {
            let seen = op.processed
                + op.skipped
                + op.errors
                + tally.processed
                + tally.skipped
                + tally.errors;
            tally.skipped += op.total.saturating_sub(seen);
        }
        if !summary.announced && status == OperationStatus::Completed {
            end.events.insert(0, self.started(op, state)?);
            summary.announced = true;
        }
        if summary.announced {
            let now = self.ctx.now();
            let started = op.started_at.unwrap_or(now);
            end.events.push(replay::completed_event(&ReplayCompleted {
                operation: &op.id,
                status: status.as_str(),
                processed: op.processed + tally.processed,
                skipped: op.skipped + tally.skipped,
                errors: op.errors + tally.errors,
                duration_ms: now.as_millis() - started.as_millis(),
                actor: &op.actor,
            })?);
        }
        let cursor = if end.cursor == Position::default() {
            state.cursor.clone()
        } else {
            end.cursor.clone()
        };
        let advance = Advance {
            cursor: cursor.at,
            cursor_key: cursor.key.clone(),
            processed: tally.processed,
            skipped: tally.skipped,
            errors: tally.errors,
            events: end.events,
            summary: Some(summary.to_json()?),
            finish: Some(status),
            error: end.error,
            expect_cursor: Some((state.cursor.at, state.cursor.key.clone())),
        };
        let next = self.commit(&op.id, advance).await?;
        self.count(tally, Some(status));
        state.cursor = cursor;
        state.summary = summary;
        Ok(next)
    }

    /// Counts a written step in the metrics (and the end, with its status).
    fn count(&self, tally: Tally, finished: Option<OperationStatus>) {
        let Some(t) = self.ctx.telemetry.as_deref() else {
            return;
        };
        for (result, n) in [
            ("replayed", tally.processed),
            ("skipped", tally.skipped),
            ("error", tally.errors),
        ] {
            if n > 0 {
                t.replay_events(result, n);
            }
        }
        if let Some(status) = finished {
            t.replay_finished(status.as_str());
        }
    }

    fn started(&self, op: &Operation, state: &State) -> Result<NewEvent> {
        replay::started_event(&ReplayStarted {
            operation: &op.id,
            actor: &op.actor,
            mode: state.params.mode,
            selection: &state.params.selection,
            total: op.total,
            rate_limit: state.params.rate_limit,
        })
    }

    /// Writes `advance`, trying again while the database is busy or briefly unreachable (a
    /// handler must not run again because a write failed).
    async fn commit(&self, id: &str, advance: Advance) -> Result<Operation> {
        let mut failures = 0u32;
        loop {
            let result = self.ctx.advance(id, advance.clone()).await;
            match result {
                Ok(op) => return Ok(op),
                Err(e) => match passing(&e, &mut failures) {
                    Some(pause) => {
                        tracing::warn!(operation = id, error = %e, ?pause, "writing a replay's progress failed; retrying");
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(e),
                },
            }
        }
    }
}

/// What a step writes.
#[derive(Default)]
struct End {
    tally: Tally,
    cursor: Position,
    events: Vec<NewEvent>,
    summary: Option<ReplaySummary>,
    error: Option<String>,
}

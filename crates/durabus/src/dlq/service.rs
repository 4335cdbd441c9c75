//! [`DeadLetters`]: the operator's view of dead-letter records.

use crate::telemetry::Telemetry;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::bulk::BulkParams;
use crate::clock::Clock;
use crate::dlq::{Action, Actor, DeadLetter, DeadLetterFilter, DeadLetterGroup, Keyset};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::operation::{NewOperation, Operation, OperationKind};
use crate::payload::ConfigSource;
use crate::store::ActBatch;
use crate::store::Store;

/// Records shown with a preview.
pub const SAMPLES: u32 = 10;

/// One page of records and where the next starts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterPage {
    /// The records, newest first.
    pub items: Vec<DeadLetter>,
    /// Pass as [`Keyset::before`] for the next page; `None` on the last page.
    pub next: Option<i64>,
}

/// One page of record summaries and where the next starts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeadLetterSummaryPage {
    /// The records, newest first, without payloads and error histories.
    pub items: Vec<crate::dlq::DeadLetterSummary>,
    /// Pass as [`Keyset::before`] for the next page; `None` on the last page.
    pub next: Option<i64>,
}

/// What a bulk action would cover, before it is submitted. Advisory: the operation rechecks
/// each record when it reaches it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Preview {
    /// Records the filter selects now.
    pub count: u64,
    /// Up to [`SAMPLES`] of them, newest first.
    pub samples: Vec<DeadLetter>,
    /// The highest position selected: the bound a submit now would freeze.
    pub bound: i64,
}

/// A bulk action: what to do to everything a filter selects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BulkRequest {
    /// The selection.
    #[serde(default)]
    pub filter: DeadLetterFilter,
    /// The action.
    #[serde(flatten)]
    pub action: Action,
    /// Must be `true` for an empty filter (everything): an accident is one click away.
    #[serde(default)]
    pub all: bool,
}

impl BulkRequest {
    /// Refuses a bad filter or action, and an empty filter without `all`.
    pub fn validate(&self) -> Result<()> {
        self.filter.validate()?;
        self.action.validate()?;
        if self.filter.is_empty() && !self.all {
            return Err(Error::invalid(
                "filter",
                "the filter selects every dead letter",
                "a filter on status, type, group or time, or `all` to act on every dead letter",
            ));
        }
        Ok(())
    }

    /// The operation kind: `dead_letters.<action>`.
    pub fn kind(&self) -> OperationKind {
        BulkParams::kind_of(&self.action)
    }
}

/// Dead-letter records on a store: list, inspect, group, act, bulk.
#[derive(Debug, Clone)]
pub struct DeadLetters {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    configs: Arc<ConfigSource>,
    telemetry: Option<Arc<Telemetry>>,
}

impl DeadLetters {
    /// On `store`, reading the store's clock (see [`StoreLifecycle::clock`](crate::store::StoreLifecycle::clock)).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store.clone(), crate::store::clock_of(&store))
    }

    /// On `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let configs = Arc::new(ConfigSource::new(store.clone()));
        Self::with_source(store, clock, configs)
    }

    /// On `store` sharing `configs` (a bus's own).
    pub(crate) fn with_source(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        configs: Arc<ConfigSource>,
    ) -> Self {
        DeadLetters {
            store,
            clock,
            configs,
            telemetry: None,
        }
    }

    /// Counts the actions taken through this service in `telemetry` (a bus's metrics).
    pub(crate) fn observed(mut self, telemetry: Arc<Telemetry>) -> Self {
        self.telemetry = Some(telemetry);
        self
    }

    /// Replaces payloads with what operators may see.
    async fn redact(&self, items: &mut [DeadLetter]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let set = self.configs.get().await?;
        for d in items {
            let r = set.resolve(&d.event_type);
            if r.redacts() {
                d.payload = r.redact(&d.payload);
            }
        }
        Ok(())
    }

    /// Records matching `filter`, newest first, one keyset page. Fails with
    /// [`Error::Invalid`] for a bad filter or page size.
    pub async fn list(&self, filter: DeadLetterFilter, page: Keyset) -> Result<DeadLetterPage> {
        filter.validate()?;
        page.validate()?;
        let mut items = self.store.dlq_list(filter, page).await?;
        self.redact(&mut items).await?;
        let next = (items.len() == page.limit as usize && page.limit > 0)
            .then(|| items.last().map(|d| d.seq))
            .flatten();
        Ok(DeadLetterPage { items, next })
    }

    /// The page [`list`](Self::list) gives, as summaries: everything but payloads, causes and
    /// error histories, which are not even read (what a table of dead letters shows).
    pub async fn list_summaries(
        &self,
        filter: DeadLetterFilter,
        page: Keyset,
    ) -> Result<DeadLetterSummaryPage> {
        filter.validate()?;
        page.validate()?;
        let items = self.store.dlq_list_summaries(filter, page).await?;
        let next = (items.len() == page.limit as usize && page.limit > 0)
            .then(|| items.last().map(|d| d.seq))
            .flatten();
        Ok(DeadLetterSummaryPage { items, next })
    }

    /// One record. Fails with [`Error::NotFound`] when the event has none.
    pub async fn get(&self, id: EventId) -> Result<DeadLetter> {
        let mut d = self
            .store
            .dlq_get(id)
            .await?
            .ok_or_else(|| Error::NotFound {
                what: format!("dead letter {id}"),
            })?;
        self.redact(std::slice::from_mut(&mut d)).await?;
        Ok(d)
    }

    /// Failure groups, most open records first (at most `limit`).
    pub async fn groups(&self, limit: u32) -> Result<Vec<DeadLetterGroup>> {
        self.store.dlq_groups(limit).await
    }

    /// Failure groups like [`groups`](Self::groups), each with its dead letters per hour over
    /// the last day and whether it is new (first seen less than a day ago).
    pub async fn group_trends(&self, limit: u32) -> Result<Vec<super::GroupTrend>> {
        let groups = self.store.dlq_groups(limit).await?;
        let now = self.clock.now();
        let (since, hour) = super::groups::trend_window(now);
        let active: Vec<String> = groups
            .iter()
            .filter(|g| super::groups::active_since(g, since))
            .map(|g| g.fingerprint.clone())
            .collect();
        let buckets = if active.is_empty() {
            Vec::new()
        } else {
            self.store.dlq_group_buckets(&active, since, hour).await?
        };
        Ok(super::trends(groups, &buckets, now))
    }

    /// Applies `action` to one record. Returns the record after it (`None` after a purge).
    /// Fails with [`Error::NotFound`], [`Error::Conflict`] (the record's status does not
    /// allow it) or [`Error::Invalid`] (a resolve without a note).
    pub async fn act(
        &self,
        id: EventId,
        action: Action,
        actor: &Actor,
    ) -> Result<Option<DeadLetter>> {
        action.validate()?;
        actor.validate()?;
        let name = action.name();
        let mut after = act_one(&*self.store, id, action, actor.clone(), self.clock.now()).await?;
        if let Some(t) = &self.telemetry {
            t.dead_letter_action(name, actor.kind.as_str(), 1);
        }
        if let Some(d) = after.as_mut() {
            self.redact(std::slice::from_mut(d)).await?;
        }
        Ok(after)
    }

    /// Sends one dead letter back through normal delivery with a fresh attempt budget.
    pub async fn retry(&self, id: EventId, actor: &Actor) -> Result<Option<DeadLetter>> {
        self.act(id, Action::Retry, actor).await
    }

    /// Resolves one dead letter; the note says why.
    pub async fn resolve(
        &self,
        id: EventId,
        note: &str,
        actor: &Actor,
    ) -> Result<Option<DeadLetter>> {
        self.act(
            id,
            Action::Resolve {
                note: note.to_owned(),
            },
            actor,
        )
        .await
    }

    /// Abandons one dead letter: no more auto retries.
    pub async fn abandon(
        &self,
        id: EventId,
        note: Option<&str>,
        actor: &Actor,
    ) -> Result<Option<DeadLetter>> {
        self.act(
            id,
            Action::Abandon {
                note: note.map(str::to_owned),
            },
            actor,
        )
        .await
    }

    /// What `filter` selects now: the count and up to [`SAMPLES`] records.
    pub async fn preview(&self, filter: &DeadLetterFilter) -> Result<Preview> {
        filter.validate()?;
        let bound = self.store.dlq_max_seq().await?;
        let count = self.store.dlq_count(filter.clone(), Some(bound)).await?;
        let mut samples = self
            .store
            .dlq_list(
                filter.clone(),
                Keyset {
                    before: Some(bound.saturating_add(1)),
                    limit: SAMPLES,
                },
            )
            .await?;
        self.redact(&mut samples).await?;
        Ok(Preview {
            count,
            samples,
            bound,
        })
    }

    /// Submits a bulk action as a durable operation, `pending`: its selection is frozen now
    /// (records that die later are not in it). Run it with
    /// [`Operations::run`](crate::Operations::run) (a started bus runs submitted
    /// operations itself). Fails with [`Error::Invalid`] for a bad request, an empty
    /// filter without `all`, or a resolve without a note.
    pub async fn submit(&self, request: &BulkRequest, actor: &Actor) -> Result<Operation> {
        request.validate()?;
        actor.validate()?;
        let preview = self.preview(&request.filter).await?;
        let params = serde_json::to_value(BulkParams {
            filter: request.filter.clone(),
            action: request.action.clone(),
            all: request.all,
        })
        .map_err(|e| Error::unserialisable("a bulk action's parameters", &e))?;
        self.store
            .operation_create(
                NewOperation {
                    id: uuid::Uuid::now_v7().to_string(),
                    kind: request.kind(),
                    params,
                    bound: preview.bound,
                    total: preview.count,
                    actor: actor.clone(),
                },
                self.clock.now(),
            )
            .await
    }
}

/// Applies `action` by `actor` to the record of `id` in one transaction: the record after it
/// (`None` when purged). Fails with [`Error::NotFound`] or [`Error::Conflict`] when it cannot.
pub(super) async fn act_one(
    store: &dyn Store,
    id: EventId,
    action: Action,
    actor: Actor,
    now: crate::clock::Timestamp,
) -> Result<Option<DeadLetter>> {
    let batch = ActBatch {
        read_back: true,
        ..ActBatch::new(vec![id], action, actor)
    };
    let mut report = store.dlq_act(batch, now).await?;
    if let Some((_, e)) = report.skipped.pop() {
        return Err(e);
    }
    Ok(report.after.pop())
}

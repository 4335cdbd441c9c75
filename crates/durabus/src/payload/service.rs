//! [`Payloads`]: the payload store for operators and applications: snapshots per stage, their
//! configuration per event type, soft delete, retention.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::source::ConfigSource;
use crate::actor::Actor;
use crate::clock::{Clock, SystemClock, Timestamp};
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::payload::{
    ALL_STAGES, DEFAULT_RETENTION_DAYS, PayloadConfig, Snapshot, compress, retention_days,
    snapshot, validate_stage,
};
use crate::store::Store;

/// Snapshots one retention step reads, and deletes per transaction.
const CLEANUP_CHUNK: usize = 1000;

/// A configuration as given by an operator (the API's and the CLI's input).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigInput {
    /// The stages to store (`["*"]`: every stage, `[]`: none). Defaults to every stage.
    #[serde(default = "all_stages")]
    pub stages: Vec<String>,
    /// Days snapshots are kept; a negative number is refused. Defaults to 14.
    #[serde(default = "default_days", deserialize_with = "crate::whole::number")]
    pub retention_days: i64,
    /// JSON paths operators never see. Defaults to none.
    #[serde(default)]
    pub redact: Vec<String>,
    /// Redact them in the stored snapshot too. Defaults to `false`.
    #[serde(default)]
    pub redact_before_store: bool,
}

/// The longest reason for deleting payloads, in characters.
pub const MAX_REASON: usize = 255;

fn all_stages() -> Vec<String> {
    vec![ALL_STAGES.to_owned()]
}

fn default_days() -> i64 {
    i64::from(DEFAULT_RETENTION_DAYS)
}

impl Default for ConfigInput {
    fn default() -> Self {
        ConfigInput {
            stages: all_stages(),
            retention_days: default_days(),
            redact: Vec::new(),
            redact_before_store: false,
        }
    }
}

/// A change to one type's payload configuration: only what it names changes, and a redaction
/// rule is dropped only when it says so.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConfigChange {
    /// New stages (`["*"]`: every stage, `[]`: none); unchanged if absent.
    pub stages: Option<Vec<String>>,
    /// New retention in days; unchanged if absent.
    pub retention_days: Option<i64>,
    /// JSON paths to add to the redaction rules (already there: kept once).
    pub redact_add: Vec<String>,
    /// JSON paths to drop from the redaction rules; one that is not there is refused.
    pub redact_remove: Vec<String>,
    /// Drop every redaction rule first (then `redact_add` applies).
    pub redact_clear: bool,
    /// Whether snapshots are stored redacted; unchanged if absent.
    pub redact_before_store: Option<bool>,
}

impl ConfigChange {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == ConfigChange::default()
    }
}

/// The payload store on a store.
#[derive(Debug, Clone)]
pub struct Payloads {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    configs: Arc<ConfigSource>,
}

impl Payloads {
    /// On `store`, reading the system clock.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_clock(store, Arc::new(SystemClock))
    }

    /// On `store` reading `clock`.
    pub fn with_clock(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> Self {
        let configs = Arc::new(ConfigSource::new(store.clone()));
        Payloads {
            store,
            clock,
            configs,
        }
    }

    /// On `store` sharing `configs` (a bus's own, so changes apply to its publish path at once).
    pub fn with_source(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        configs: Arc<ConfigSource>,
    ) -> Self {
        Payloads {
            store,
            clock,
            configs,
        }
    }

    /// Every configuration row, by type.
    pub async fn configs(&self) -> Result<Vec<PayloadConfig>> {
        Ok(self.configs.reload().await?.rows().to_vec())
    }

    /// Sets the configuration of `event_type` (`*` for the default), replacing its row; it
    /// applies at once in this process and within [`CONFIG_REFRESH`](super::CONFIG_REFRESH) in others. Fails with
    /// [`Error::Invalid`] for an empty type, a negative retention, a bad stage or path.
    pub async fn set_config(
        &self,
        event_type: &str,
        input: ConfigInput,
        actor: &Actor,
    ) -> Result<PayloadConfig> {
        actor.validate()?;
        let config = PayloadConfig {
            event_type: event_type.trim().to_owned(),
            stages: input.stages,
            retention_days: retention_days(input.retention_days)?,
            redact: input.redact.iter().map(|p| p.trim().to_owned()).collect(),
            redact_before_store: input.redact_before_store,
            updated_at: self.clock.now(),
            updated_by: actor.name.clone(),
        };
        config.validate()?;
        self.store.payload_config_set(config.clone()).await?;
        self.configs.reload().await?;
        Ok(config)
    }

    /// Changes only what `change` names in the configuration of `event_type` (a type without a
    /// row of its own starts from the built-in default: every stage, 14 days, nothing
    /// redacted); its other settings, its redaction rules among them, stay as they were.
    /// Fails with [`Error::Invalid`] for a change that names nothing, drops a rule the
    /// type does not have, or makes the row invalid.
    pub async fn update_config(
        &self,
        event_type: &str,
        change: ConfigChange,
        actor: &Actor,
    ) -> Result<PayloadConfig> {
        if change.is_empty() {
            return Err(Error::invalid(
                "change",
                format!("nothing to change in the payload configuration of {event_type:?}"),
                "stages, retention days, redaction rules to add or remove, or redact-before-store",
            ));
        }
        let event_type = event_type.trim();
        let current = self
            .configs
            .reload()
            .await?
            .rows()
            .iter()
            .find(|r| r.event_type == event_type)
            .cloned();
        let mut input = match current {
            Some(row) => ConfigInput {
                stages: row.stages,
                retention_days: i64::from(row.retention_days),
                redact: row.redact,
                redact_before_store: row.redact_before_store,
            },
            None => ConfigInput::default(),
        };
        if let Some(stages) = change.stages {
            input.stages = stages;
        }
        if let Some(days) = change.retention_days {
            input.retention_days = days;
        }
        if change.redact_clear {
            input.redact.clear();
        }
        for path in &change.redact_remove {
            let path = path.trim();
            let before = input.redact.len();
            input.redact.retain(|p| p != path);
            if input.redact.len() == before && !change.redact_clear {
                return Err(Error::invalid(
                    "redact_remove",
                    format!("{event_type:?} has no redaction rule {path:?} to remove"),
                    if input.redact.is_empty() {
                        "none: the type has no rules".to_owned()
                    } else {
                        format!("one of its rules: {}", input.redact.join(", "))
                    },
                ));
            }
        }
        for path in change.redact_add {
            let path = path.trim().to_owned();
            if !input.redact.contains(&path) {
                input.redact.push(path);
            }
        }
        if let Some(b) = change.redact_before_store {
            input.redact_before_store = b;
        }
        self.set_config(event_type, input, actor).await
    }

    /// Deletes the configuration row of `event_type` (it falls back to `*`, then the default).
    /// Fails with [`Error::NotFound`] when there is none.
    pub async fn delete_config(&self, event_type: &str) -> Result<()> {
        if !self.store.payload_config_delete(event_type).await? {
            return Err(Error::NotFound {
                what: format!("payload configuration of {event_type:?}"),
            });
        }
        self.configs.reload().await?;
        Ok(())
    }

    /// Stores `payload` for event `event_id` of `event_type` at `stage`, if the type's
    /// configuration stores that stage. Returns whether it was stored.
    pub async fn store_snapshot<T: Serialize + ?Sized>(
        &self,
        event_id: EventId,
        event_type: &str,
        stage: &str,
        payload: &T,
    ) -> Result<bool> {
        validate_stage(stage)?;
        crate::pattern::validate_system_type(event_type)?;
        let text = serde_json::to_string(payload)
            .map_err(|e| Error::unserialisable("a snapshot's payload", &e))?;
        let configs = self.configs.get().await?;
        let Some(s) = snapshot(
            event_id,
            event_type,
            stage,
            &text,
            configs.resolve(event_type),
            self.clock.now(),
        )?
        else {
            return Ok(false);
        };
        self.store.payload_put(vec![s]).await?;
        Ok(true)
    }

    /// Every snapshot of an event, newest first, decompressed to the JSON as it was stored and
    /// redacted as configured. Soft-deleted ones come with who deleted them, when and why, and
    /// no payload.
    pub async fn list(&self, event_id: EventId) -> Result<Vec<Snapshot>> {
        let stored = self.store.payload_list(event_id).await?;
        let configs = self.configs.get().await?;
        stored
            .into_iter()
            .map(|s| {
                let mut meta = s.meta;
                if let Some(blob) = s.blob {
                    let text = compress::gunzip(&blob)?;
                    meta.payload = Some(
                        configs
                            .resolve(&meta.event_type)
                            .redact_stage(&meta.stage, &text),
                    );
                }
                Ok(meta)
            })
            .collect()
    }

    /// The newest snapshot of an event at `stage`. Fails with [`Error::NotFound`] when there
    /// is none; a soft-deleted one is returned (no payload, with its deletion).
    pub async fn get(&self, event_id: EventId, stage: &str) -> Result<Snapshot> {
        self.list(event_id)
            .await?
            .into_iter()
            .find(|s| s.stage == stage)
            .ok_or_else(|| Error::NotFound {
                what: format!("a {stage:?} snapshot of event {event_id}"),
            })
    }

    /// Soft-deletes every snapshot of an event: the bytes are cleared, the rows stay with who,
    /// when and why. Returns how many. Fails with [`Error::Invalid`] without a reason,
    /// [`Error::NotFound`] when the event has no snapshot holding bytes.
    pub async fn delete(&self, event_id: EventId, reason: &str, actor: &Actor) -> Result<u64> {
        actor.validate()?;
        crate::text::check(
            "reason",
            reason,
            MAX_REASON,
            Some("deleting payloads needs a reason (it is kept for the audit)"),
        )?;
        let reason = reason.trim();
        let n = self
            .store
            .payload_soft_delete(event_id, reason, &actor.name, self.clock.now())
            .await?;
        if n == 0 {
            return Err(Error::NotFound {
                what: format!("payload snapshots of event {event_id} (none, or all deleted)"),
            });
        }
        Ok(n)
    }

    /// Retention as of `now`: deletes snapshots past their type's retention, and soft-deleted
    /// audit rows deleted `audit_retention` ago or earlier, in chunks. Returns both counts.
    pub async fn cleanup(&self, now: Timestamp, audit_retention: Duration) -> Result<(u64, u64)> {
        let retention = self.configs.reload().await?.retention(now);
        let mut expired = 0;
        let mut after = None;
        loop {
            let (keys, next) = self
                .store
                .payload_expired(&retention, after, CLEANUP_CHUNK)
                .await?;
            expired += self.store.payload_delete(keys).await?;
            match next {
                Some(k) => after = Some(k),
                None => break,
            }
        }
        // Snapshots a store keeps as a mark on their event's row (SQLite's `published` ones).
        let mut position = 0;
        loop {
            let (n, next) = self
                .store
                .payload_expire_shared(&retention, position, CLEANUP_CHUNK)
                .await?;
            expired += n;
            match next {
                Some(p) => position = p,
                None => break,
            }
        }
        let cutoff = now.minus(audit_retention);
        let mut audits = 0;
        loop {
            let n = self
                .store
                .payload_purge_deleted(cutoff, CLEANUP_CHUNK)
                .await?;
            audits += n;
            if n < CLEANUP_CHUNK as u64 {
                break;
            }
        }
        Ok((expired, audits))
    }
}

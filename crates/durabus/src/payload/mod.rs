//! The payload store as plain data and pure rules: snapshots of a payload per named stage
//! (gzip, sizes, content flags), per-type configuration (which stages, how long, which JSON
//! paths operators never see), and what a snapshot is made of.
//!
//! Stages are free-form names. The bus itself uses [`STAGE_PUBLISHED`] (every published payload,
//! when automatic snapshots are on) and [`STAGE_ERROR`] (the payload and error of a failed
//! attempt); applications add their own (`webhook_raw`, `agent_request`, `channel_send`, …).
//!
//! Configuration resolves per event type: the row for the exact type if there is one, else the
//! `*` row, else the built-in default (every stage, [`DEFAULT_RETENTION_DAYS`] days, no
//! redaction).
//!
//! [`Payloads`] is the service over a store (snapshots, configuration, soft delete, retention);
//! [`ConfigSource`] is the configuration every reader redacts with, kept fresh.

pub mod compress;
pub mod detect;
pub mod redact;
mod service;
mod source;

pub use redact::JSON_PATH_REGEX;
pub use service::{ConfigChange, ConfigInput, MAX_REASON, Payloads};
pub use source::{CONFIG_REFRESH, ConfigSource};

use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use self::detect::ContentFlags;
use self::redact::{JsonPath, redact_text};
use crate::clock::Timestamp;
use crate::error::{Error, Result};
use crate::event::EventId;
use crate::sync::{read, write};

/// The stage of every published payload (automatic snapshots).
pub const STAGE_PUBLISHED: &str = "published";
/// The stage of a failed attempt's payload and error (automatic snapshots).
pub const STAGE_ERROR: &str = "error";
/// How long snapshots are kept unless configured.
pub const DEFAULT_RETENTION_DAYS: u32 = 14;
/// The configuration row that applies to every type without its own.
pub const ANY_TYPE: &str = "*";
/// In a configuration's stages: every stage.
pub const ALL_STAGES: &str = "*";

/// A regular expression (ECMA-262, Python and Rust alike) of a configuration's stages: what
/// [`validate_stage`] accepts, or `*` for every stage.
pub const STAGES_ITEM_REGEX: &str = "^(\\*|[A-Za-z0-9_.-]{1,64})$";

/// Refuses a stage name that is empty, too long, or not letters, digits, `_`, `-`, `.`.
pub fn validate_stage(stage: &str) -> Result<()> {
    let ok = !stage.is_empty()
        && stage.len() <= 64
        && stage
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "stages",
            format!("{stage:?} is not a stage name"),
            "1 to 64 letters, digits, '_', '-' or '.' (or * for every stage)",
        ))
    }
}

/// One event type's payload settings.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayloadConfig {
    /// The event type, exact, or `*` for every type without its own row.
    pub event_type: String,
    /// The stages whose snapshots are stored; `["*"]` is every stage, `[]` none.
    pub stages: Vec<String>,
    /// Days a snapshot is kept.
    pub retention_days: u32,
    /// JSON paths replaced by `"[redacted]"` in everything an operator reads.
    pub redact: Vec<String>,
    /// Also redact them in the stored snapshot itself (for data that must never be kept).
    pub redact_before_store: bool,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Who changed it last.
    pub updated_by: String,
}

impl PayloadConfig {
    /// Refuses an empty type (or one that is neither `*` nor a valid event type), a bad stage,
    /// a bad JSON path.
    pub fn validate(&self) -> Result<()> {
        if self.event_type.trim().is_empty() {
            return Err(Error::invalid(
                "event_type",
                "a payload configuration without an event type",
                "an event type, or * for the default",
            ));
        }
        if self.event_type != ANY_TYPE {
            crate::pattern::validate_system_type(&self.event_type)?;
        }
        for s in &self.stages {
            if s != ALL_STAGES {
                validate_stage(s)?;
            }
        }
        for p in &self.redact {
            JsonPath::parse(p)?;
        }
        Ok(())
    }
}

/// A retention given as a signed number (as the API and CLI read it): refused when negative.
pub fn retention_days(days: i64) -> Result<u32> {
    u32::try_from(days).map_err(|_| {
        Error::invalid(
            "retention_days",
            format!("{days} days"),
            format!("0 to {} days", u32::MAX),
        )
    })
}

/// What applies to one event type.
#[derive(Debug, Clone)]
pub struct Resolved {
    stages: Option<Vec<String>>,
    /// Days its snapshots are kept.
    pub retention_days: u32,
    paths: Vec<JsonPath>,
    /// Whether stored snapshots are redacted too.
    pub redact_before_store: bool,
}

impl Resolved {
    fn from_config(c: &PayloadConfig) -> Resolved {
        Resolved {
            stages: (!c.stages.iter().any(|s| s == ALL_STAGES)).then(|| c.stages.clone()),
            retention_days: c.retention_days,
            // Checked when stored; a row written by hand that does not parse hides nothing
            // rather than failing every read.
            paths: c
                .redact
                .iter()
                .filter_map(|p| JsonPath::parse(p).ok())
                .collect(),
            redact_before_store: c.redact_before_store,
        }
    }

    /// Whether snapshots of `stage` are stored.
    pub fn stores(&self, stage: &str) -> bool {
        self.stages
            .as_ref()
            .is_none_or(|list| list.iter().any(|s| s == stage))
    }

    /// The JSON text as an operator may see it.
    pub fn redact(&self, payload: &str) -> String {
        redact_text(payload, &self.paths)
    }

    /// A snapshot's text at `stage` as an operator may see it: the paths name fields of the
    /// event's payload, which an `error` snapshot holds under `payload`.
    pub fn redact_stage(&self, stage: &str, text: &str) -> String {
        if !self.redacts() {
            return text.to_owned();
        }
        if stage != STAGE_ERROR {
            return self.redact(text);
        }
        let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) else {
            return text.to_owned();
        };
        let Some(inner) = value.get_mut("payload") else {
            return text.to_owned();
        };
        let mut hit = false;
        for p in &self.paths {
            hit |= p.redact(inner);
        }
        if hit {
            serde_json::to_string(&value).unwrap_or_else(|_| text.to_owned())
        } else {
            text.to_owned()
        }
    }

    /// Whether anything is hidden from operators.
    pub fn redacts(&self) -> bool {
        !self.paths.is_empty()
    }
}

impl Default for Resolved {
    fn default() -> Self {
        Resolved {
            stages: None,
            retention_days: DEFAULT_RETENTION_DAYS,
            paths: Vec::new(),
            redact_before_store: false,
        }
    }
}

/// Every payload configuration, resolved per type.
#[derive(Debug, Clone, Default)]
pub struct ConfigSet {
    rows: Vec<PayloadConfig>,
    default: Resolved,
    exact: Vec<(String, Resolved)>,
}

impl ConfigSet {
    /// The set of `rows`.
    pub fn new(rows: Vec<PayloadConfig>) -> ConfigSet {
        let default = rows
            .iter()
            .find(|c| c.event_type == ANY_TYPE)
            .map(Resolved::from_config)
            .unwrap_or_default();
        let exact = rows
            .iter()
            .filter(|c| c.event_type != ANY_TYPE)
            .map(|c| (c.event_type.clone(), Resolved::from_config(c)))
            .collect();
        ConfigSet {
            rows,
            default,
            exact,
        }
    }

    /// The rows.
    pub fn rows(&self) -> &[PayloadConfig] {
        &self.rows
    }

    /// What applies to `event_type`: its own row, else `*`, else the default.
    pub fn resolve(&self, event_type: &str) -> &Resolved {
        self.exact
            .iter()
            .find(|(t, _)| t == event_type)
            .map_or(&self.default, |(_, r)| r)
    }

    /// The retention plan at `now`: each configured type's cutoff and the default's.
    pub fn retention(&self, now: Timestamp) -> Retention {
        let cutoff =
            |days: u32| now.minus(std::time::Duration::from_secs(u64::from(days) * 86_400));
        Retention {
            per_type: self
                .exact
                .iter()
                .map(|(t, r)| (t.clone(), cutoff(r.retention_days)))
                .collect(),
            default: cutoff(self.default.retention_days),
        }
    }
}

/// When snapshots expire: a snapshot created at or before its type's cutoff is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Cutoffs of the types with their own configuration.
    pub per_type: Vec<(String, Timestamp)>,
    /// The cutoff of every other type.
    pub default: Timestamp,
}

impl Retention {
    /// The cutoff of `event_type`.
    pub fn cutoff(&self, event_type: &str) -> Timestamp {
        self.per_type
            .iter()
            .find(|(t, _)| t == event_type)
            .map_or(self.default, |(_, c)| *c)
    }

    /// The latest cutoff of any type: nothing created after it expires.
    pub fn latest(&self) -> Timestamp {
        self.per_type
            .iter()
            .map(|(_, c)| *c)
            .fold(self.default, Timestamp::max)
    }
}

/// The configuration a bus and its readers share: loaded from the store, replaced when it is
/// changed through this process, refreshed from the store now and then (changes made by other
/// processes).
#[derive(Debug, Default)]
pub struct ConfigCache {
    current: RwLock<Arc<ConfigSet>>,
}

impl ConfigCache {
    /// The configuration now.
    pub fn get(&self) -> Arc<ConfigSet> {
        read(&self.current).clone()
    }

    /// Replaces it.
    pub fn replace(&self, set: ConfigSet) {
        *write(&self.current) = Arc::new(set);
    }
}

/// A snapshot to store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSnapshot {
    /// The event.
    pub event_id: EventId,
    /// Its type.
    pub event_type: String,
    /// The stage.
    pub stage: String,
    /// The gzip-compressed JSON text.
    pub blob: Vec<u8>,
    /// Bytes before compression.
    pub size_original: u64,
    /// Content flags.
    pub flags: ContentFlags,
    /// When it was taken.
    pub created_at: Timestamp,
    /// The snapshot is the event's own payload as it is published (stage `published`, not
    /// redacted before storing): `blob` is empty and `flags` unset. A store may keep it as a
    /// reference to the event's stored payload instead of a second copy (SQLite does, and
    /// compresses it into a row of its own only when the event's row is deleted); a store that
    /// copies it fills it in first with [`NewSnapshot::fill`].
    pub shared: bool,
}

impl NewSnapshot {
    /// Compresses `text` (the event's payload) into this snapshot and sets its size and content
    /// flags: a shared snapshot becomes an ordinary one.
    pub fn fill(&mut self, text: &str) -> Result<()> {
        self.blob = compress::gzip(text.as_bytes())?;
        self.size_original = text.len() as u64;
        self.flags = detect::detect(text);
        self.shared = false;
        Ok(())
    }
}

/// The `published` snapshot of an event's payload `text`, as `config` says: `None` when the
/// stage is not stored; redacted and compressed when the type redacts before storing; else a
/// [shared](NewSnapshot::shared) snapshot (nothing compressed on the publishing task).
pub fn published_snapshot(
    event_id: EventId,
    event_type: &str,
    text: &str,
    config: &Resolved,
    now: Timestamp,
) -> Result<Option<NewSnapshot>> {
    if config.redact_before_store {
        return snapshot(event_id, event_type, STAGE_PUBLISHED, text, config, now);
    }
    if !config.stores(STAGE_PUBLISHED) {
        return Ok(None);
    }
    Ok(Some(NewSnapshot {
        event_id,
        event_type: event_type.to_owned(),
        stage: STAGE_PUBLISHED.to_owned(),
        blob: Vec::new(),
        size_original: text.len() as u64,
        flags: ContentFlags::default(),
        created_at: now,
        shared: true,
    }))
}

/// Makes the snapshot of `text` (JSON) for `event_id` at `stage`, as `config` says: `None`
/// when the stage is not stored; redacted first when the type's configuration asks for it.
pub fn snapshot(
    event_id: EventId,
    event_type: &str,
    stage: &str,
    text: &str,
    config: &Resolved,
    now: Timestamp,
) -> Result<Option<NewSnapshot>> {
    if !config.stores(stage) {
        return Ok(None);
    }
    let kept: std::borrow::Cow<'_, str> = if config.redact_before_store {
        config.redact_stage(stage, text).into()
    } else {
        text.into()
    };
    Ok(Some(NewSnapshot {
        event_id,
        event_type: event_type.to_owned(),
        stage: stage.to_owned(),
        blob: compress::gzip(kept.as_bytes())?,
        size_original: kept.len() as u64,
        flags: detect::detect(&kept),
        created_at: now,
        shared: false,
    }))
}

/// The text stored at stage `error`: the failed attempt's payload and error.
pub fn error_text(payload: &str, error: &str, attempt: u32) -> String {
    let payload: serde_json::Value =
        serde_json::from_str(payload).unwrap_or_else(|_| serde_json::Value::String(payload.into()));
    serde_json::json!({ "attempt": attempt, "error": error, "payload": payload }).to_string()
}

/// A soft delete's audit record.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Deletion {
    /// When.
    pub deleted_at: Timestamp,
    /// By whom.
    pub deleted_by: String,
    /// Why.
    pub reason: String,
}

/// A stored snapshot as read.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// The event.
    pub event_id: EventId,
    /// Its type.
    pub event_type: String,
    /// The stage.
    pub stage: String,
    /// Bytes before compression.
    pub size_original: u64,
    /// Bytes stored (0 once soft-deleted).
    pub size_compressed: u64,
    /// Whether it carries media.
    pub contains_media: bool,
    /// Whether it carries base64 data.
    pub contains_base64: bool,
    /// When it was taken.
    pub created_at: Timestamp,
    /// The JSON text (redacted as configured in operator views); `None` once soft-deleted.
    #[serde(serialize_with = "raw_json")]
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub payload: Option<String>,
    /// Who deleted it, when and why, if it was.
    pub deleted: Option<Deletion>,
}

fn raw_json<S: serde::Serializer>(
    payload: &Option<String>,
    s: S,
) -> std::result::Result<S::Ok, S::Error> {
    match payload {
        None => s.serialize_none(),
        Some(text) => match serde_json::value::RawValue::from_string(text.clone()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(text),
        },
    }
}

/// A stored snapshot as the store returns it: compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    /// Everything but the payload (which is `None` here).
    pub meta: Snapshot,
    /// The compressed bytes; `None` once soft-deleted.
    pub blob: Option<Vec<u8>>,
}

#[cfg(test)]
mod tests;

//! Partitions of a concurrency limit: a subscription may split its events by tenant (their
//! ordering key, or a named metadata field) and allow at most `max_in_flight` runs of each
//! partition at once, beside its limit over all partitions.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::MAX_IN_FLIGHT;
use crate::error::{Error, Result};
use crate::event::{Event, Metadata};

/// The longest metadata field name a partition may name.
pub const MAX_FIELD_LEN: usize = 128;

/// What a partition may be written as: `ordering_key`, or `metadata.` and a field name of
/// letters, digits and `_ . : -` (the admin API's document carries this pattern).
pub const PARTITION_BY_REGEX: &str = "^(ordering_key|metadata\\.[A-Za-z0-9_.:-]{1,128})$";

/// What splits a subscription's events into partitions. Written `ordering_key` or
/// `metadata.<field>` (the CLI, the admin API and the store use that form).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PartitionBy {
    /// The event's ordering key.
    OrderingKey,
    /// The value of this metadata field.
    Metadata(String),
}

impl PartitionBy {
    /// The partition an event with `ordering_key` and `metadata` falls in. An event without
    /// the key or the field falls in the partition named `""`, which is limited like any other.
    pub fn of(&self, ordering_key: Option<&str>, metadata: &Metadata) -> String {
        match self {
            PartitionBy::OrderingKey => ordering_key.unwrap_or_default().to_owned(),
            PartitionBy::Metadata(field) => metadata.get(field).cloned().unwrap_or_default(),
        }
    }
}

impl fmt::Display for PartitionBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PartitionBy::OrderingKey => f.write_str("ordering_key"),
            PartitionBy::Metadata(field) => write!(f, "metadata.{field}"),
        }
    }
}

impl FromStr for PartitionBy {
    type Err = Error;

    fn from_str(s: &str) -> Result<PartitionBy> {
        let refuse = |problem: &str| {
            Error::invalid(
                "partition_by",
                format!("{s:?}: {problem}"),
                format!(
                    "ordering_key, or metadata.<field> with a field name of 1 to {MAX_FIELD_LEN} letters, digits, '_', '.', ':' or '-'"
                ),
            )
        };
        if s == "ordering_key" {
            return Ok(PartitionBy::OrderingKey);
        }
        let Some(field) = s.strip_prefix("metadata.") else {
            return Err(refuse("not a partition"));
        };
        if field.is_empty() || field.len() > MAX_FIELD_LEN {
            return Err(refuse("the field name's length is out of range"));
        }
        if !field
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c))
        {
            return Err(refuse("the field name has a character it may not have"));
        }
        Ok(PartitionBy::Metadata(field.to_owned()))
    }
}

impl Serialize for PartitionBy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PartitionBy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for PartitionBy {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .description(Some(
                "What splits the events into partitions: `ordering_key`, or `metadata.<field>`",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for PartitionBy {}

/// A limit per partition: at most `max_in_flight` runs of each partition at once, across
/// every process.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionLimit {
    /// What splits the events into partitions.
    pub by: PartitionBy,
    /// Runs of one partition at once, at most.
    pub max_in_flight: u32,
}

impl PartitionLimit {
    /// At most `max_in_flight` runs of each partition `by` splits the events into.
    pub fn new(by: PartitionBy, max_in_flight: u32) -> PartitionLimit {
        PartitionLimit { by, max_in_flight }
    }

    /// Refuses a limit out of range (1 to [`MAX_IN_FLIGHT`]).
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_IN_FLIGHT).contains(&self.max_in_flight) {
            return Err(Error::invalid(
                "per_partition",
                self.max_in_flight.to_string(),
                format!("1 to {MAX_IN_FLIGHT}"),
            ));
        }
        Ok(())
    }
}

/// What a run asks a slot for: its event's id and what its partition is read from.
#[derive(Debug, Clone, Default)]
pub struct SlotAsk {
    /// The event.
    pub id: crate::event::EventId,
    /// The event's ordering key.
    pub ordering_key: Option<String>,
    /// The event's metadata.
    pub metadata: Metadata,
}

impl SlotAsk {
    /// The ask of event `id` with no key and no metadata (its partition is `""`).
    pub fn new(id: crate::event::EventId) -> SlotAsk {
        SlotAsk {
            id,
            ..SlotAsk::default()
        }
    }

    /// The ask of `event`'s run.
    pub fn of(event: &Event) -> SlotAsk {
        SlotAsk {
            id: event.id,
            ordering_key: event.ordering_key.clone(),
            metadata: event.metadata.clone(),
        }
    }

    /// The partition the run falls in under `by` (`""` when the limit has no partitions).
    pub fn partition(&self, by: Option<&PartitionBy>) -> String {
        by.map(|b| b.of(self.ordering_key.as_deref(), &self.metadata))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_written_and_read_back() {
        for text in ["ordering_key", "metadata.tenant", "metadata.a.b"] {
            let by: PartitionBy = text.parse().unwrap_or(PartitionBy::OrderingKey);
            assert_eq!(by.to_string(), text);
        }
        let long = format!("metadata.{}", "x".repeat(MAX_FIELD_LEN + 1));
        let longest = format!("metadata.{}", "x".repeat(MAX_FIELD_LEN));
        assert!(longest.parse::<PartitionBy>().is_ok());
        let pattern = regex::Regex::new(PARTITION_BY_REGEX).ok();
        let matches = |s: &str| pattern.as_ref().is_some_and(|p| p.is_match(s));
        assert!(matches(&longest) && matches("ordering_key") && matches("metadata.a-b:c_d.e"));
        for bad in [
            "",
            "tenant",
            "metadata.",
            "metadata.a\nb",
            "metadata.é",
            "metadata.a b",
            long.as_str(),
            "key",
        ] {
            assert!(!matches(bad), "{bad:?}");
            let e = bad.parse::<PartitionBy>().err().map(|e| e.kind());
            assert_eq!(e, Some(crate::ErrorKind::InvalidInput), "{bad:?}");
        }
    }

    #[test]
    fn an_event_falls_in_its_keys_or_fields_partition_or_the_empty_one() {
        let mut ask = SlotAsk::new(crate::event::EventId::new());
        let tenant = PartitionBy::Metadata("tenant".into());
        assert_eq!(ask.partition(Some(&tenant)), "");
        assert_eq!(ask.partition(Some(&PartitionBy::OrderingKey)), "");
        ask.metadata.insert("tenant".into(), "acme".into());
        ask.ordering_key = Some("order-7".into());
        assert_eq!(ask.partition(Some(&tenant)), "acme");
        assert_eq!(ask.partition(Some(&PartitionBy::OrderingKey)), "order-7");
        assert_eq!(ask.partition(None), "");
    }

    #[test]
    fn partition_limits_are_checked() {
        assert!(
            PartitionLimit::new(PartitionBy::OrderingKey, 2)
                .check()
                .is_ok()
        );
        assert!(
            PartitionLimit::new(PartitionBy::OrderingKey, 0)
                .check()
                .is_err()
        );
        assert!(
            PartitionLimit::new(PartitionBy::OrderingKey, MAX_IN_FLIGHT + 1)
                .check()
                .is_err()
        );
    }
}

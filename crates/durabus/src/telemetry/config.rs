//! The metrics' settings.

use std::time::Duration;

use crate::error::{Error, Result};

/// Settings of the Prometheus metrics (see `EventBus::metrics_text`, feature `metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsConfig {
    /// Put before every metric name: letters, digits and `_`, starting with a letter; a
    /// trailing `_` is implied. Defaults to `durabus_`.
    pub prefix: String,
    /// Longest a scrape serves store gauges (depths, ages) without querying the store again.
    /// Defaults to 15 s.
    pub gauge_refresh: Duration,
    /// Failure groups `failure_group_dead_letters` labels by fingerprint (those with the most
    /// open dead letters); the others are summed as `group="other"`, so the series stay
    /// bounded however many distinct errors occur. 1 to [`MAX_LABELLED_GROUPS`]; defaults
    /// to 10.
    pub failure_groups: u32,
    /// Event types `dead_letter_records` labels one by one (those with the most open dead
    /// letters); the others are summed as `type="other"`, so the series stay bounded however
    /// many types there are. 1 to [`MAX_LABELLED_GROUPS`]; defaults to 10.
    pub dead_letter_types: u32,
}

/// The most failure groups the metrics label one by one.
pub const MAX_LABELLED_GROUPS: u32 = 100;

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            prefix: "durabus_".into(),
            gauge_refresh: Duration::from_secs(15),
            failure_groups: 10,
            dead_letter_types: 10,
        }
    }
}

impl MetricsConfig {
    /// The prefix without its trailing `_` (how the metrics registry wants it).
    pub fn stem(&self) -> &str {
        self.prefix.trim_end_matches('_')
    }

    /// Checks the prefix and the numbers of labelled failure groups and types.
    pub fn validate(&self) -> Result<()> {
        for (field, n) in [
            ("metrics.failure_groups", self.failure_groups),
            ("metrics.dead_letter_types", self.dead_letter_types),
        ] {
            if !(1..=MAX_LABELLED_GROUPS).contains(&n) {
                return Err(Error::invalid(
                    field,
                    format!("{n}"),
                    format!("1 to {MAX_LABELLED_GROUPS}"),
                ));
            }
        }
        let stem = self.stem();
        let mut chars = stem.chars();
        let ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(Error::invalid(
                "metrics.prefix",
                format!("{:?} is not a metric name prefix", self.prefix),
                "letters, digits and '_', starting with a letter",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn labelled_groups_are_bounded() {
        for n in [1, 10, MAX_LABELLED_GROUPS] {
            let c = MetricsConfig {
                failure_groups: n,
                ..MetricsConfig::default()
            };
            assert!(c.validate().is_ok(), "{n}");
        }
        for n in [0, MAX_LABELLED_GROUPS + 1, u32::MAX] {
            let c = MetricsConfig {
                failure_groups: n,
                ..MetricsConfig::default()
            };
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{n}");
            assert!(e.to_string().contains("metrics.failure_groups"), "{e}");
            let c = MetricsConfig {
                dead_letter_types: n,
                ..MetricsConfig::default()
            };
            let e = c.validate().unwrap_err();
            assert_eq!(e.kind(), crate::ErrorKind::InvalidInput, "{n}");
            assert!(e.to_string().contains("metrics.dead_letter_types"), "{e}");
        }
        let c = MetricsConfig {
            dead_letter_types: 100,
            ..MetricsConfig::default()
        };
        assert!(c.validate().is_ok());
    }
}

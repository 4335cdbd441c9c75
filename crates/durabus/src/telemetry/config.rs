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
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            prefix: "durabus_".into(),
            gauge_refresh: Duration::from_secs(15),
        }
    }
}

impl MetricsConfig {
    /// The prefix without its trailing `_` (how the metrics registry wants it).
    pub fn stem(&self) -> &str {
        self.prefix.trim_end_matches('_')
    }

    /// Checks the prefix.
    pub fn validate(&self) -> Result<()> {
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

//! What an operator is shown: `[gauges]` (figures computed from the
//! stores), `[notify]` (the webhook), `[tracing]` (OpenTelemetry) and
//! `[audit]` (the audit log's retention). Each section with its defaults
//! and its own checks.

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

/// `[gauges]`: the gauges computed from the stores (`tickler_jobs`, overdue, drift, lags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaugesSettings {
    /// How often one instance (the lowest live id running the reconciler)
    /// computes the gauges from MySQL: jobs by status and topic, overdue,
    /// drift, results lag.
    pub interval_ms: u64,
    /// How often the bursts ahead are found again (a range read of the
    /// next `burst_horizon_ms`' jobs); at least `interval_ms`.
    pub counts_interval_ms: u64,
    /// How long each computation of the gauges goes on with the count of
    /// jobs by status and topic (`tickler_jobs`), which reads every live
    /// job's index entry: a table larger than that reads takes several
    /// passes, each bounded (`tickler_jobs_count_age_seconds`).
    pub counts_budget_ms: u64,
    /// Most topics the `tickler_jobs` gauge names; the rest are summed
    /// under `topic="_other"`.
    pub topics_max: usize,
    /// How far ahead the busiest minute of each topic is looked for
    /// (`tickler_burst_ahead_*`, the TicklerBurstAhead alert).
    pub burst_horizon_ms: u64,
    /// What a topic without a pace can take, in jobs a second: what your
    /// deployment drains a burst at (`tickler bench`'s burst stage measures
    /// it).
    pub burst_drain_per_second: u32,
}

impl Default for GaugesSettings {
    fn default() -> Self {
        GaugesSettings {
            interval_ms: 15_000,
            counts_interval_ms: 60_000,
            counts_budget_ms: 500,
            topics_max: 50,
            burst_horizon_ms: 6 * 3_600_000,
            burst_drain_per_second: 10_000,
        }
    }
}

impl GaugesSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1_000..=3_600_000).contains(&self.interval_ms) {
            return Err(invalid(
                "gauges.interval_ms",
                "must be between 1000 and 3600000",
            ));
        }
        if self.counts_interval_ms < self.interval_ms || self.counts_interval_ms > 86_400_000 {
            return Err(invalid(
                "gauges.counts_interval_ms",
                "must be at least gauges.interval_ms and at most 86400000",
            ));
        }
        if !(10..=60_000).contains(&self.counts_budget_ms) {
            return Err(invalid(
                "gauges.counts_budget_ms",
                "must be between 10 and 60000",
            ));
        }
        if !(1..=10_000).contains(&self.topics_max) {
            return Err(invalid("gauges.topics_max", "must be between 1 and 10000"));
        }
        if !(60_000..=7 * 86_400_000).contains(&self.burst_horizon_ms) {
            return Err(invalid(
                "gauges.burst_horizon_ms",
                "must be between 60000 (a minute) and 604800000 (a week)",
            ));
        }
        if self.burst_drain_per_second == 0 {
            return Err(invalid(
                "gauges.burst_drain_per_second",
                "must be 1 or more",
            ));
        }
        Ok(())
    }
}

/// `[notify]`: the webhook for dead jobs and backlogs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifySettings {
    /// Where the reporter instance posts JSON when jobs end dead and when a
    /// backlog builds up (`http://` or `https://`); none by default.
    pub webhook_url: Option<String>,
    /// A backlog is an overdue pending job older than this.
    pub backlog_ms: u64,
    /// While a backlog lasts, it is said again this often.
    pub repeat_ms: u64,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            webhook_url: None,
            backlog_ms: 300_000,
            repeat_ms: 3_600_000,
        }
    }
}

impl NotifySettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(url) = &self.webhook_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "notify.webhook_url",
                    "must start with http:// or https://",
                ));
            }
        }
        if !(1_000..=604_800_000).contains(&self.backlog_ms) {
            return Err(invalid(
                "notify.backlog_ms",
                "must be between 1000 and 604800000",
            ));
        }
        if !(60_000..=604_800_000).contains(&self.repeat_ms) {
            return Err(invalid(
                "notify.repeat_ms",
                "must be between 60000 and 604800000",
            ));
        }
        Ok(())
    }
}

/// `[tracing]`: OpenTelemetry traces over OTLP (off unless an endpoint is
/// set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingSettings {
    /// The OTLP/HTTP endpoint (`http://otel-collector:4318`): spans go to
    /// its `/v1/traces`, as JSON. None: no traces.
    pub otlp_endpoint: Option<String>,
    /// The spans' `service.name`.
    pub service_name: String,
    /// How often the spans gathered are sent.
    pub export_interval_ms: u64,
}

impl Default for TracingSettings {
    fn default() -> Self {
        TracingSettings {
            otlp_endpoint: None,
            service_name: "tickler".to_owned(),
            export_interval_ms: 2_000,
        }
    }
}

impl TracingSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if let Some(endpoint) = &self.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(invalid(
                    "tracing.otlp_endpoint",
                    "must start with http:// or https:// (an OTLP/HTTP collector, e.g. http://otel-collector:4318)",
                ));
            }
        }
        if self.export_interval_ms < 100 {
            return Err(invalid(
                "tracing.export_interval_ms",
                "must be at least 100",
            ));
        }
        Ok(())
    }
}

/// `[consumption]`: following the consumer groups that read tickler's
/// topics, to know when each job was consumed (#59).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsumptionSettings {
    /// How often the committed offsets of the followed groups are read (by
    /// every instance with the reconciler role): a job's `consumed` time is
    /// this precise.
    pub interval_ms: u64,
    /// A group that has not read a record this long after it was produced
    /// is stalled (`tickler_consumer_stalled`, the TicklerConsumerStalled
    /// alert); `[topics.T] consumed_within_ms` sets it per topic.
    pub alert_after_ms: u64,
    /// Also follow the groups found reading a topic tickler produces to
    /// (their members' assignments), beside `[topics.T] consumer_groups`.
    pub discover: bool,
}

impl Default for ConsumptionSettings {
    fn default() -> Self {
        ConsumptionSettings {
            interval_ms: 1_000,
            alert_after_ms: 300_000,
            discover: true,
        }
    }
}

impl ConsumptionSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(100..=600_000).contains(&self.interval_ms) {
            return Err(invalid(
                "consumption.interval_ms",
                "must be between 100 and 600000",
            ));
        }
        if self.alert_after_ms < self.interval_ms {
            return Err(invalid(
                "consumption.alert_after_ms",
                "must be at least consumption.interval_ms",
            ));
        }
        Ok(())
    }
}

/// `[audit]`: the audit log of control-plane changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Rows of the audit log older than this many days are purged (by the
    /// reconciler role); 0 keeps them.
    pub retention_days: u32,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            retention_days: 400,
        }
    }
}

impl AuditSettings {
    /// The section's own checks: none yet (any number of days will do, 0
    /// keeps every row). A rule for a new setting goes here.
    pub fn validate(&self) -> Result<(), ConfigError> {
        Ok(())
    }
}

//! What a job may be and what becomes of it: `[jobs]` (limits, the default
//! result policy, dead letters, retention), `[topics."…"]` (a business
//! topic's own policy and pace) and `[results]` (the topic consumers report
//! on). Each section with its defaults and its own checks.

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};
use crate::domain::policy::{Policy, PolicyOverrides};
use crate::domain::{job, topic_pattern};

/// `[jobs]`: what a job may be and what becomes of it: limits, the result policy of jobs that set none, dead letters, retention.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JobsSettings {
    /// Most jobs in one `POST /v1/jobs/batch`.
    pub batch_max: usize,
    /// Largest payload accepted, in bytes (after base64 decoding).
    pub payload_max_bytes: usize,
    /// Latest a job may be scheduled, counted from now.
    pub max_schedule_ahead_days: u64,
    /// Topics jobs may be created for, as patterns where `*` matches any
    /// run of characters (`orders.*`); empty allows every topic that is not
    /// reserved.
    pub topics_allowed: Vec<String>,
    /// Where a record for each job that ends `dead` goes; none by default.
    pub dead_letter_topic: Option<String>,
    /// Finished jobs (succeeded, dead, cancelled, dispatched without a
    /// result to wait for) unchanged for this many days are deleted, with
    /// their history; 0 keeps them forever.
    pub retention_days: u32,
    /// The same in milliseconds, for soaks and tests; when above 0 it
    /// replaces `retention_days`.
    pub retention_ms: u64,
    /// Result policy of jobs whose request and topic leave it open:
    /// whether a consumer reports back...
    pub expects_result: bool,
    /// ...how many attempts a job gets in all...
    pub max_attempts: u32,
    /// ...the retry delay, `min(cap, base * 2^(attempt-1))` jittered to
    /// between half of it and all of it...
    pub backoff_base_ms: u32,
    pub backoff_cap_ms: u32,
    /// ...and how long a dispatched job waits for its result before the
    /// silence counts as a retry.
    pub ack_timeout_ms: u32,
}

impl Default for JobsSettings {
    fn default() -> Self {
        // One place for the policy's defaults: policy::Policy.
        let policy = Policy::default();
        JobsSettings {
            batch_max: 1_000,
            payload_max_bytes: 1024 * 1024,
            max_schedule_ahead_days: 3650,
            topics_allowed: Vec::new(),
            dead_letter_topic: None,
            retention_days: 30,
            retention_ms: 0,
            expects_result: policy.expects_result,
            max_attempts: policy.max_attempts,
            backoff_base_ms: policy.backoff_base_ms,
            backoff_cap_ms: policy.backoff_cap_ms,
            ack_timeout_ms: policy.ack_timeout_ms,
        }
    }
}

impl JobsSettings {
    /// The result policy of jobs whose request and topic leave it open.
    pub fn policy(&self) -> Policy {
        Policy {
            expects_result: self.expects_result,
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base_ms,
            backoff_cap_ms: self.backoff_cap_ms,
            ack_timeout_ms: self.ack_timeout_ms,
        }
    }

    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.payload_max_bytes == 0 || self.payload_max_bytes > 16 * 1024 * 1024 - 1 {
            return Err(invalid(
                "jobs.payload_max_bytes",
                "must be between 1 and 16777215 (the MEDIUMBLOB column)",
            ));
        }
        if !(1..=10_000).contains(&self.batch_max) {
            return Err(invalid("jobs.batch_max", "must be between 1 and 10000"));
        }
        if !(1..=36_500).contains(&self.max_schedule_ahead_days) {
            return Err(invalid(
                "jobs.max_schedule_ahead_days",
                "must be between 1 and 36500",
            ));
        }
        if let Err(problem) = self.policy().validate() {
            return Err(ConfigError::Invalid {
                field: "jobs (expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms)".into(),
                problem: format!("give an invalid result policy: {problem}"),
            });
        }
        if self.retention_days > 36_500 {
            return Err(invalid(
                "jobs.retention_days",
                "must be at most 36500 (0 keeps finished jobs forever)",
            ));
        }
        for pattern in &self.topics_allowed {
            if let Err(problem) = topic_pattern::validate(pattern) {
                return Err(ConfigError::Invalid {
                    field: "jobs.topics_allowed".into(),
                    problem,
                });
            }
        }
        if let Some(dlt) = &self.dead_letter_topic {
            if job::topic_validate(dlt).is_err() {
                return Err(invalid(
                    "jobs.dead_letter_topic",
                    "must be a valid Kafka topic name",
                ));
            }
        }
        Ok(())
    }
}

/// One business topic's settings; what is left out comes from the defaults.
/// The policy fields repeat `PolicyOverrides` rather than flatten it: serde
/// cannot refuse unknown keys through `flatten`, and a typo in a topic's
/// settings must stop start-up, not be ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TopicConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expects_result: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_base_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backoff_cap_ms: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_timeout_ms: Option<u32>,
    /// Most jobs of this topic dispatched per second, across every
    /// instance (`PATCH /v1/topics/{topic}` overrides it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_per_second: Option<u32>,
    /// What this topic's jobs are grouped by for fair dispatch: `key:SEP`
    /// (the key up to the first SEP) or `header:NAME` (that header's value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
    /// Most jobs of one group dispatched per second, across every
    /// instance; without it the groups only share `max_per_second` fairly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_max_per_second: Option<u32>,
    /// Overrides `jobs.dead_letter_topic`; `""` turns dead letters off here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
    /// The consumer groups that read this topic, followed to know when
    /// each job was consumed (`consumed` in a job's view), beside those
    /// found reading it (`consumption.discover`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_groups: Option<Vec<String>>,
    /// A group that has not read a record of this topic this long after it
    /// was produced is stalled (overrides `consumption.alert_after_ms`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumed_within_ms: Option<u64>,
    /// A job of this topic created without `expires_at` or `ttl_ms` may
    /// still be produced this long after its time, then ends `expired`:
    /// after a long outage, a year of reminders does not all go out late
    /// at once. The topic's owner decides, not every producer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_ttl_ms: Option<u64>,
    /// Most jobs of this topic dispatched and not yet finished (awaiting
    /// their result, or being produced) at once, across the fleet: due
    /// jobs past it wait in the index until results come back. Stops a
    /// backlog from flooding consumers that are still recovering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// Most jobs of each group (of `group_by`: a tenant) dispatched and
    /// not yet finished at once, across the fleet: one tenant's backlog
    /// cannot take every slot consumers have. Needs `group_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_max_in_flight: Option<u32>,
    /// Most of this topic's jobs overdue at once — pending, due longer ago
    /// than `overdue_after_ms` — before `overdue_policy` acts: after a long
    /// outage, the topic's owner decides what a backlog becomes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_overdue: Option<u32>,
    /// What past `max_overdue` does: `alert` (the default: a gauge and the
    /// TicklerTopicOverdueCapped alert; everything goes out, late) or
    /// `expire` (the oldest overdue first attempts beyond the cap end
    /// `expired`, never produced; the newest `max_overdue` go out) or
    /// `defer` (the backlog beyond the oldest `max_overdue` is moved later,
    /// in its order, at most `max_overdue` per `overdue_after_ms`: it goes
    /// out paced, none unsent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overdue_policy: Option<OverduePolicy>,
    /// How long after its time a pending job counts as overdue for
    /// `max_overdue` (default 60000): jobs due a moment ago are a burst
    /// being produced, not a backlog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overdue_after_ms: Option<u64>,
}

/// `[topics.T] overdue_policy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OverduePolicy {
    #[default]
    Alert,
    Expire,
    Defer,
}

impl TopicConfig {
    pub fn overrides(&self) -> PolicyOverrides {
        PolicyOverrides {
            expects_result: self.expects_result,
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base_ms,
            backoff_cap_ms: self.backoff_cap_ms,
            ack_timeout_ms: self.ack_timeout_ms,
        }
    }

    /// The checks of `topic`'s entry on its own; the first problem found
    /// names its setting. Its result policy, which it completes from
    /// `[jobs]`, is checked with the rules between sections
    /// (`super::validate`).
    pub fn validate(&self, topic: &str) -> Result<(), ConfigError> {
        if let Some(group) = self.consumer_groups.iter().flatten().find(|group| {
            group.is_empty() || group.len() > 255 || group.chars().any(char::is_control)
        }) {
            return Err(ConfigError::Invalid {
                field: "topics.consumer_groups".into(),
                problem: format!(
                    "{group:?} for topic {topic:?} is not a consumer group id: 1 to 255 bytes, no control characters"
                ),
            });
        }
        if self.consumed_within_ms == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.consumed_within_ms".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: leave it unset for consumption.alert_after_ms"
                ),
            });
        }
        if self.default_ttl_ms == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.default_ttl_ms".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: leave it unset for jobs that never expire unless they say so"
                ),
            });
        }
        if self.max_overdue == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.max_overdue".into(),
                problem: format!("is 0 for topic {topic:?}: at least 1"),
            });
        }
        if (self.overdue_policy.is_some() || self.overdue_after_ms.is_some())
            && self.max_overdue.is_none()
        {
            return Err(ConfigError::Invalid {
                field: "topics.overdue_policy".into(),
                problem: format!(
                    "is set for topic {topic:?} without max_overdue: say how many overdue jobs it acts past"
                ),
            });
        }
        if self.max_in_flight == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.max_in_flight".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: pause the topic instead (POST /v1/topics/{topic}/pause)"
                ),
            });
        }
        if self.group_max_in_flight == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.group_max_in_flight".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: pause the topic instead (POST /v1/topics/{topic}/pause)"
                ),
            });
        }
        if self.group_max_in_flight.is_some() && self.group_by.is_none() {
            return Err(ConfigError::Invalid {
                field: "topics.group_max_in_flight".into(),
                problem: format!(
                    "is set for topic {topic:?} without group_by: say what its jobs are grouped by"
                ),
            });
        }
        if self.max_per_second == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.max_per_second".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: pause the topic instead (POST /v1/topics/{topic}/pause)"
                ),
            });
        }
        if let Some(by) = &self.group_by {
            crate::domain::grouping::GroupBy::parse(by).map_err(|problem| {
                ConfigError::Invalid {
                    field: "topics.group_by".into(),
                    problem: format!("for topic {topic:?}: {problem}"),
                }
            })?;
        }
        if self.group_max_per_second == Some(0) {
            return Err(ConfigError::Invalid {
                field: "topics.group_max_per_second".into(),
                problem: format!("is 0 for topic {topic:?}: leave it unset for no pace per group"),
            });
        }
        if self.group_max_per_second.is_some() && self.group_by.is_none() {
            return Err(ConfigError::Invalid {
                field: "topics.group_max_per_second".into(),
                problem: format!(
                    "is set for topic {topic:?} without group_by: say what its jobs are grouped by"
                ),
            });
        }
        let problem = if job::topic_validate(topic).is_err() {
            Some("is not a valid Kafka topic name")
        } else {
            match &self.dead_letter_topic {
                Some(dlt) if !dlt.is_empty() && job::topic_validate(dlt).is_err() => {
                    Some("has a jobs.dead_letter_topic that is not a valid topic name")
                }
                _ => None,
            }
        };
        if let Some(problem) = problem {
            return Err(ConfigError::Invalid {
                field: "topics".into(),
                problem: format!("entry {topic:?}: {problem}"),
            });
        }
        Ok(())
    }
}

/// `[results]`: the results topic consumers report on, and how tickler reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ResultsSettings {
    /// The topic consumers report results on.
    pub topic: String,
    /// Consumer group tickler reads the results topic with.
    pub group: String,
    /// Partitions of the results topic when tickler creates it (it exists
    /// already in most deployments; then this is not used).
    pub topic_partitions: i32,
    /// Most reports applied in one transaction.
    pub batch: usize,
}

impl Default for ResultsSettings {
    fn default() -> Self {
        ResultsSettings {
            topic: "tickler.results".to_owned(),
            group: "tickler".to_owned(),
            topic_partitions: 4,
            batch: 500,
        }
    }
}

impl ResultsSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if job::topic_validate(&self.topic).is_err() {
            return Err(invalid("results.topic", "must be a valid Kafka topic name"));
        }
        if self.group.is_empty() {
            return Err(invalid("results.group", "must not be empty"));
        }
        if self.topic_partitions < 1 {
            return Err(invalid("results.topic_partitions", "must be at least 1"));
        }
        if !(1..=10_000).contains(&self.batch) {
            return Err(invalid("results.batch", "must be between 1 and 10000"));
        }
        Ok(())
    }
}

//! What the configuration says of each business topic, for the roles that
//! act on jobs (the API, the resolver, the bulk runner, the ingress, the
//! dead letters, the topic controls): the result policy of its jobs, its
//! pace, its dead-letter topic, and whether jobs may be made for it.

use std::collections::BTreeMap;

use super::{JobsSettings, OverduePolicy, TopicConfig};
use crate::domain::policy::Policy;
use crate::domain::request::TopicDefaults;
use crate::domain::topic_pattern;

/// Built once from the configuration ([`super::Config::topic_rules`]) and
/// shared.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicRules {
    pub(super) jobs: JobsSettings,
    pub(super) topics: BTreeMap<String, TopicConfig>,
    pub(super) results_topic: String,
    pub(super) request_topics: Vec<String>,
    pub(super) reply_topic: Option<String>,
}

impl Default for TopicRules {
    fn default() -> Self {
        super::Config::default().topic_rules()
    }
}

impl TopicRules {
    /// The result policy of jobs that set none themselves.
    pub fn policy_default(&self) -> Policy {
        self.jobs.policy()
    }

    /// The result policy of jobs on `topic`, before the request's own.
    pub fn policy_for(&self, topic: &str) -> Policy {
        match self.topics.get(topic) {
            Some(settings) => settings.overrides().over(self.policy_default()),
            None => self.policy_default(),
        }
    }

    /// What a job created on `topic` inherits when it says nothing of it:
    /// the topic's result policy and its `default_ttl_ms`.
    pub fn defaults_for(&self, topic: &str) -> TopicDefaults {
        TopicDefaults {
            policy: self.policy_for(topic),
            ttl_ms: self.topics.get(topic).and_then(|t| t.default_ttl_ms),
        }
    }

    /// The topics with a `max_in_flight` or a `group_max_in_flight`, and
    /// each one's (topic, group).
    pub fn in_flight_limits(&self) -> Vec<(String, Option<u32>, Option<u32>)> {
        self.topics
            .iter()
            .filter(|(_, t)| t.max_in_flight.is_some() || t.group_max_in_flight.is_some())
            .map(|(topic, t)| (topic.clone(), t.max_in_flight, t.group_max_in_flight))
            .collect()
    }

    /// The topics with a `max_overdue`: each one's cap, policy and
    /// `overdue_after_ms`.
    pub fn overdue_caps(&self) -> Vec<(String, u32, OverduePolicy, u64)> {
        self.topics
            .iter()
            .filter_map(|(topic, t)| {
                t.max_overdue.map(|cap| {
                    (
                        topic.clone(),
                        cap,
                        t.overdue_policy.unwrap_or_default(),
                        t.overdue_after_ms.unwrap_or(60_000),
                    )
                })
            })
            .collect()
    }

    /// The configured pace of `topic`, jobs per second, if any.
    pub fn max_per_second_for(&self, topic: &str) -> Option<u32> {
        self.topics.get(topic).and_then(|t| t.max_per_second)
    }

    /// Whether a configured topic groups its jobs by the token that
    /// created them (`group_by = "token"`).
    pub fn any_grouped_by_token(&self) -> bool {
        self.topics
            .values()
            .any(|t| t.group_by.as_deref() == Some("token"))
    }

    /// Whether any topic's jobs are grouped by a header.
    pub fn any_grouped_by_header(&self) -> bool {
        self.topics.values().any(|t| {
            t.group_by
                .as_deref()
                .is_some_and(|by| by.starts_with("header:"))
        })
    }

    /// The configured grouping of `topic` (`group_by`, checked at start-up)
    /// and its groups' pace.
    pub fn grouping_for(&self, topic: &str) -> (Option<&str>, Option<u32>) {
        self.topics.get(topic).map_or((None, None), |t| {
            (t.group_by.as_deref(), t.group_max_per_second)
        })
    }

    /// Where dead jobs of `topic` are recorded, if anywhere.
    pub fn dead_letter_for(&self, topic: &str) -> Option<&str> {
        let chosen = match self
            .topics
            .get(topic)
            .and_then(|t| t.dead_letter_topic.as_deref())
        {
            Some(topic_own) => Some(topic_own),
            None => self.jobs.dead_letter_topic.as_deref(),
        };
        chosen.filter(|t| !t.is_empty())
    }

    /// Why jobs may not be created for `topic`, if they may not: tickler's
    /// own topics (results, dead letters), Kafka's internal ones (`__*`),
    /// and anything outside `jobs.topics_allowed`. A job on the results topic
    /// would be read as a report about someone else's job.
    pub fn topic_reserved(&self, topic: &str) -> Option<String> {
        if topic == self.results_topic {
            return Some(format!("topic {topic:?} is tickler's results topic"));
        }
        let dead_letters = self
            .topics
            .values()
            .filter_map(|t| t.dead_letter_topic.as_deref())
            .chain(self.jobs.dead_letter_topic.as_deref());
        if dead_letters.into_iter().any(|dlt| dlt == topic) {
            return Some(format!("topic {topic:?} is a dead-letter topic"));
        }
        if topic.starts_with("__") {
            return Some(format!("topic {topic:?} is internal to Kafka"));
        }
        if self.request_topics.iter().any(|t| t == topic) {
            return Some(format!(
                "topic {topic:?} is a request topic of tickler's ingress"
            ));
        }
        if self.reply_topic.as_deref() == Some(topic) {
            return Some(format!("topic {topic:?} is the ingress's reply topic"));
        }
        if !self.jobs.topics_allowed.is_empty()
            && !self
                .jobs
                .topics_allowed
                .iter()
                .any(|p| topic_pattern::matches(p, topic))
        {
            return Some(format!(
                "topic {topic:?} is outside jobs.topics_allowed ({})",
                self.jobs.topics_allowed.join(", ")
            ));
        }
        None
    }

    /// Whether the configuration gives any topic a pace.
    pub fn any_paced(&self) -> bool {
        self.topics
            .values()
            .any(|t| t.max_per_second.is_some() || t.group_max_per_second.is_some())
    }

    /// Every dead-letter topic named: the default and the topics' own.
    pub fn dead_letter_topics(&self) -> Vec<&str> {
        let mut topics: Vec<&str> = self
            .topics
            .values()
            .filter_map(|t| t.dead_letter_topic.as_deref())
            .chain(self.jobs.dead_letter_topic.as_deref())
            .filter(|t| !t.is_empty())
            .collect();
        topics.sort_unstable();
        topics.dedup();
        topics
    }
}

//! The checks of every setting and of the rules between them, run once at
//! start-up; the first problem found names its setting.

use std::net::SocketAddr;

use super::{
    durations_bounded, invalid, AuthMode, Config, ConfigError, Role, DISPATCH_LOOKAHEAD_MAX_MS,
    INGRESS_TOPIC_MAX,
};
use crate::domain::{job, topic_pattern};

/// librdkafka settings tickler's promises rest on, with why: `kafka_options`
/// (applied after tickler's own) may not change them.
const KAFKA_OPTIONS_RESERVED: &[(&str, &str)] = &[
    (
        "message.timeout.ms",
        "use kafka.message_timeout_ms (claims in doubt are timed by it)",
    ),
    (
        "delivery.timeout.ms",
        "use kafka.message_timeout_ms (claims in doubt are timed by it)",
    ),
    (
        "transactional.id",
        "tickler's producers are idempotent, not transactional",
    ),
    (
        "acks",
        "tickler produces with acks=all: a record acknowledged by the leader alone can be lost with it",
    ),
    (
        "enable.idempotence",
        "tickler's producers are idempotent: without it a retried send can duplicate or reorder records",
    ),
    (
        "enable.auto.commit",
        "the ingress and the results consumer commit an offset only after MySQL has what it read",
    ),
    (
        "enable.auto.offset.store",
        "the ingress and the results consumer commit an offset only after MySQL has what it read",
    ),
    (
        "isolation.level",
        "reading a topic back must see every record a producer may have written",
    ),
    (
        "group.id",
        "set the group of each consumer by its own setting (results.group, ingress group)",
    ),
];

impl Config {
    /// Checks every setting and the rules between them; the first problem
    /// found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_stores()?;
        self.validate_api()?;
        self.validate_timing()?;
        self.validate_topics()?;
        self.validate_ingress()
    }

    /// The request topics, their targets and the reply topic.
    fn validate_ingress(&self) -> Result<(), ConfigError> {
        let ingress = &self.ingress;
        for (topic, settings) in &ingress.topics {
            let problem = if job::topic_validate(topic).is_err() {
                Some("is not a valid Kafka topic name".to_owned())
            } else if topic.len() > INGRESS_TOPIC_MAX {
                Some(format!("is longer than {INGRESS_TOPIC_MAX} characters (the history names its writes ingress:<topic>, in a column of 110)"))
            } else if *topic == self.results.topic || topic.starts_with("__") {
                Some("is tickler's results topic or internal to Kafka".to_owned())
            } else if settings.targets.is_empty() {
                Some("names no targets: give the topic patterns its records may schedule onto, e.g. targets = [\"orders.*\"]".to_owned())
            } else {
                settings
                    .targets
                    .iter()
                    .find_map(|pattern| topic_pattern::validate(pattern).err())
            };
            if let Some(problem) = problem {
                return Err(ConfigError::Invalid {
                    field: "ingress.topics".into(),
                    problem: format!("entry {topic:?}: {problem}"),
                });
            }
        }
        if let Some(reply) = &ingress.reply_topic {
            if job::topic_validate(reply).is_err() {
                return Err(invalid(
                    "ingress.reply_topic",
                    "must be a valid Kafka topic name",
                ));
            }
            if ingress.topics.contains_key(reply) || *reply == self.results.topic {
                return Err(invalid(
                    "ingress.reply_topic",
                    "must not be a request topic or the results topic",
                ));
            }
        }
        if ingress.group.is_empty() {
            return Err(invalid("ingress.group", "must not be empty"));
        }
        if ingress.group == self.results.group {
            return Err(invalid(
                "ingress.group",
                "must differ from results.group (one group would split the two topics' partitions between two consumers)",
            ));
        }
        if !(1..=10_000).contains(&ingress.batch) {
            return Err(invalid("ingress.batch", "must be between 1 and 10000"));
        }
        if ingress.topic_partitions < 1 {
            return Err(invalid("ingress.topic_partitions", "must be at least 1"));
        }
        Ok(())
    }

    /// Where the stores are and how to reach them; the roles and shards.
    fn validate_stores(&self) -> Result<(), ConfigError> {
        if !self.mysql.url.starts_with("mysql://") && !self.mysql.url.starts_with("mariadb://") {
            return Err(invalid("mysql.url", "must start with mysql://"));
        }
        let redis_schemes = [
            "redis://",
            "rediss://",
            "redis+sentinel://",
            "rediss+sentinel://",
        ];
        if !redis_schemes.iter().any(|s| self.redis.url.starts_with(s)) {
            return Err(invalid(
                "redis.url",
                "must start with redis://, rediss://, redis+sentinel:// or rediss+sentinel://",
            ));
        }
        let redis_tls = self.redis.url.starts_with("rediss://")
            || self.redis.url.starts_with("rediss+sentinel://");
        if self.redis.prefix.is_empty() || self.redis.prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis.prefix",
                "must be non-empty and may not contain '{' or '}' (they delimit hash tags)",
            ));
        }
        if self.kafka.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must name at least one broker"));
        }
        let redis_tls_files = [
            &self.redis.tls_ca,
            &self.redis.tls_cert,
            &self.redis.tls_key,
        ];
        if redis_tls_files.iter().any(|s| s.is_some()) && !redis_tls {
            return Err(invalid(
                "redis.tls_ca/redis.tls_cert/redis.tls_key",
                "need a rediss:// or rediss+sentinel:// redis.url (TLS)",
            ));
        }
        if self.redis.tls_cert.is_some() != self.redis.tls_key.is_some() {
            return Err(invalid(
                "redis.tls_cert/redis.tls_key",
                "must be given together",
            ));
        }
        if !(1..=16_384).contains(&self.cluster.shards) {
            return Err(invalid("cluster.shards", "must be between 1 and 16384"));
        }
        Ok(())
    }

    /// The API: addresses, TLS, authentication and what a request may ask.
    fn validate_api(&self) -> Result<(), ConfigError> {
        let Ok(http_addr) = self.api.addr.parse::<SocketAddr>() else {
            return Err(invalid(
                "api.addr",
                "must be an address like 127.0.0.1:8080",
            ));
        };
        if self.api.auth == AuthMode::None
            && !http_addr.ip().is_loopback()
            && !self.api.allow_anonymous
            && self.has_role(Role::Api)
        {
            return Err(ConfigError::Invalid {
                field: "api.auth".into(),
                problem: format!(
                    "is none and api.addr {http_addr} is not a loopback address: anyone who \
                     reaches it could produce to any topic and cancel any job. Use api.auth = \
                     \"tokens\" (tickler token create), or set api.allow_anonymous = true on purpose"
                ),
            });
        }
        if let Some(addr) = &self.api.metrics_addr {
            if addr.parse::<SocketAddr>().is_err() {
                return Err(invalid(
                    "api.metrics_addr",
                    "must be an address like 127.0.0.1:9090",
                ));
            }
        }
        if self.api.tls_cert.is_some() != self.api.tls_key.is_some() {
            return Err(invalid(
                "api.tls_cert/api.tls_key",
                "must be given together (a PEM certificate chain and its private key)",
            ));
        }
        if self.api.token_refresh_ms < 100 {
            return Err(invalid("api.token_refresh_ms", "must be at least 100"));
        }
        if self.api.quota_recount_ms < 100 {
            return Err(invalid("api.quota_recount_ms", "must be at least 100"));
        }
        if self.api.max_connections == 0 {
            return Err(invalid("api.max_connections", "must be positive"));
        }
        if self.api.header_timeout_ms < 100 || self.api.body_timeout_ms < 100 {
            return Err(invalid(
                "api.header_timeout_ms/api.body_timeout_ms",
                "must be at least 100",
            ));
        }
        if self.api.idle_timeout_ms < self.api.header_timeout_ms {
            return Err(invalid(
                "api.idle_timeout_ms",
                "must be at least api.header_timeout_ms",
            ));
        }
        if self.jobs.payload_max_bytes == 0 || self.jobs.payload_max_bytes > 16 * 1024 * 1024 - 1 {
            return Err(invalid(
                "jobs.payload_max_bytes",
                "must be between 1 and 16777215 (the MEDIUMBLOB column)",
            ));
        }
        if !(1..=10_000).contains(&self.jobs.batch_max) {
            return Err(invalid("jobs.batch_max", "must be between 1 and 10000"));
        }
        if !(1..=36_500).contains(&self.jobs.max_schedule_ahead_days) {
            return Err(invalid(
                "jobs.max_schedule_ahead_days",
                "must be between 1 and 36500",
            ));
        }
        Ok(())
    }

    /// Intervals, leases and timeouts, and the rules between them.
    ///
    /// Long because it is a list of checks, one per setting.
    fn validate_timing(&self) -> Result<(), ConfigError> {
        durations_bounded(&serde_json::to_value(self).unwrap_or_default(), "")?;
        if self.schedules.interval_ms < 10 {
            return Err(invalid("schedules.interval_ms", "must be at least 10"));
        }
        if !(1_000..=3_600_000).contains(&self.gauges.interval_ms) {
            return Err(invalid(
                "gauges.interval_ms",
                "must be between 1000 and 3600000",
            ));
        }
        if self.gauges.counts_interval_ms < self.gauges.interval_ms
            || self.gauges.counts_interval_ms > 86_400_000
        {
            return Err(invalid(
                "gauges.counts_interval_ms",
                "must be at least gauges.interval_ms and at most 86400000",
            ));
        }
        if !(10..=60_000).contains(&self.gauges.counts_budget_ms) {
            return Err(invalid(
                "gauges.counts_budget_ms",
                "must be between 10 and 60000",
            ));
        }
        if !(500..=600_000).contains(&self.cluster.instance_ttl_ms) {
            return Err(invalid(
                "cluster.instance_ttl_ms",
                "must be between 500 and 600000",
            ));
        }
        if self.loader.window_ms < 1_000 {
            return Err(invalid("loader.window_ms", "must be at least 1000"));
        }
        if self.loader.interval_ms == 0 || self.loader.interval_ms * 2 > self.loader.window_ms {
            return Err(invalid(
                "loader.interval_ms",
                "must be positive and at most half of loader.window_ms, or jobs could enter the window unseen",
            ));
        }
        if self.loader.batch == 0 || self.dispatcher.batch == 0 {
            return Err(invalid("loader.batch/dispatcher.batch", "must be positive"));
        }
        if !(500..=600_000).contains(&self.kafka.doubt_margin_ms) {
            return Err(invalid(
                "kafka.doubt_margin_ms",
                "must be between 500 and 600000",
            ));
        }
        // A claim's records are handed over only while they can land or be
        // given up (message timeout, then the margin) before its lease ends:
        // at least a second to send in.
        if self.dispatcher.claim_lease_ms < self.claim_lease_least(self.kafka.doubt_margin_ms) {
            return Err(invalid(
                "dispatcher.claim_lease_ms",
                "must be at least dispatcher.lookahead_ms + kafka.message_timeout_ms + kafka.doubt_margin_ms + 500, or a claim leaves no time to send its records",
            ));
        }
        if let Some((key, why)) = KAFKA_OPTIONS_RESERVED
            .iter()
            .find(|(key, _)| self.kafka.options.contains_key(*key))
        {
            return Err(invalid(
                "kafka.options",
                &format!("may not set {key}: {why}"),
            ));
        }
        if self.reconciler.interval_ms == 0 {
            return Err(invalid("reconciler.interval_ms", "must be positive"));
        }
        if self.kafka.topic_refresh_ms < 1_000 {
            return Err(invalid("kafka.topic_refresh_ms", "must be at least 1000"));
        }
        if self.dispatcher.ack_wait_ms == 0
            || self.dispatcher.ack_wait_ms > self.kafka.message_timeout_ms
        {
            return Err(invalid(
                "dispatcher.ack_wait_ms",
                "must be positive and at most kafka.message_timeout_ms",
            ));
        }
        if self.shutdown_timeout_ms < 1_000 {
            return Err(invalid("shutdown_timeout_ms", "must be at least 1000"));
        }
        // A broker that answers nothing holds the pipeline full until its
        // records time out: that is no stall.
        if self.dispatcher.stall_ms < self.kafka.message_timeout_ms + 1_000 {
            return Err(invalid(
                "dispatcher.stall_ms",
                "must be at least kafka.message_timeout_ms + 1000: a broker that answers nothing holds the dispatcher that long",
            ));
        }
        if self.dispatcher.idle_ms == 0 {
            return Err(invalid("dispatcher.idle_ms", "must be positive"));
        }
        if self.dispatcher.lookahead_ms > DISPATCH_LOOKAHEAD_MAX_MS {
            return Err(invalid(
                "dispatcher.lookahead_ms",
                "must be at most 1000 (a claimed job cannot be cancelled any more)",
            ));
        }
        Ok(())
    }

    /// Topics and what happens to jobs: policies, results, dead letters,
    /// retention, the gauges and the webhook.
    ///
    /// Long because it is a list of checks, one per setting.
    fn validate_topics(&self) -> Result<(), ConfigError> {
        if let Some((topic, _)) = self
            .topics
            .iter()
            .find(|(_, t)| t.max_per_second == Some(0))
        {
            return Err(ConfigError::Invalid {
                field: "topics.max_per_second".into(),
                problem: format!(
                    "is 0 for topic {topic:?}: pause the topic instead (POST /v1/topics/{topic}/pause)"
                ),
            });
        }
        for (topic, settings) in &self.topics {
            if let Some(by) = &settings.group_by {
                crate::domain::grouping::GroupBy::parse(by).map_err(|problem| {
                    ConfigError::Invalid {
                        field: "topics.group_by".into(),
                        problem: format!("for topic {topic:?}: {problem}"),
                    }
                })?;
            }
            if settings.group_max_per_second == Some(0) {
                return Err(ConfigError::Invalid {
                    field: "topics.group_max_per_second".into(),
                    problem: format!(
                        "is 0 for topic {topic:?}: leave it unset for no pace per group"
                    ),
                });
            }
            if settings.group_max_per_second.is_some() && settings.group_by.is_none() {
                return Err(ConfigError::Invalid {
                    field: "topics.group_max_per_second".into(),
                    problem: format!("is set for topic {topic:?} without group_by: say what its jobs are grouped by"),
                });
            }
        }
        if let Some(endpoint) = &self.tracing.otlp_endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err(invalid(
                    "tracing.otlp_endpoint",
                    "must start with http:// or https:// (an OTLP/HTTP collector, e.g. http://otel-collector:4318)",
                ));
            }
        }
        if self.tracing.export_interval_ms < 100 {
            return Err(invalid(
                "tracing.export_interval_ms",
                "must be at least 100",
            ));
        }
        if self.dispatcher.smooth_per_second == Some(0) {
            return Err(invalid(
                "dispatcher.smooth_per_second",
                "is 0: leave it unset to smooth nothing",
            ));
        }
        if let Some(url) = &self.notify.webhook_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "notify.webhook_url",
                    "must start with http:// or https://",
                ));
            }
        }
        if !(1_000..=604_800_000).contains(&self.notify.backlog_ms) {
            return Err(invalid(
                "notify.backlog_ms",
                "must be between 1000 and 604800000",
            ));
        }
        if !(60_000..=604_800_000).contains(&self.notify.repeat_ms) {
            return Err(invalid(
                "notify.repeat_ms",
                "must be between 60000 and 604800000",
            ));
        }
        if !(100..=60_000).contains(&self.reconciler.watermark_interval_ms) {
            return Err(invalid(
                "reconciler.watermark_interval_ms",
                "must be between 100 and 60000",
            ));
        }
        if self.reconciler.watermark_settle_ms > 60_000 {
            return Err(invalid(
                "reconciler.watermark_settle_ms",
                "must be at most 60000",
            ));
        }
        if !(1..=10_000).contains(&self.gauges.topics_max) {
            return Err(invalid("gauges.topics_max", "must be between 1 and 10000"));
        }
        if !(60_000..=7 * 86_400_000).contains(&self.gauges.burst_horizon_ms) {
            return Err(invalid(
                "gauges.burst_horizon_ms",
                "must be between 60000 (a minute) and 604800000 (a week)",
            ));
        }
        if self.gauges.burst_drain_per_second == 0 {
            return Err(invalid(
                "gauges.burst_drain_per_second",
                "must be 1 or more",
            ));
        }
        if let Err(problem) = self.topic_rules().policy_default().validate() {
            return Err(ConfigError::Invalid {
                field: "jobs (expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms)".into(),
                problem: format!("give an invalid result policy: {problem}"),
            });
        }
        for (topic, settings) in &self.topics {
            let problem = if job::topic_validate(topic).is_err() {
                Some("is not a valid Kafka topic name".to_owned())
            } else if let Err(problem) = self.topic_rules().policy_for(topic).validate() {
                Some(problem)
            } else {
                match &settings.dead_letter_topic {
                    Some(dlt) if !dlt.is_empty() && job::topic_validate(dlt).is_err() => Some(
                        "has a jobs.dead_letter_topic that is not a valid topic name".to_owned(),
                    ),
                    _ => None,
                }
            };
            if let Some(problem) = problem {
                return Err(ConfigError::Invalid {
                    field: "topics".into(),
                    problem: format!("entry {topic:?}: {problem}"),
                });
            }
        }
        if job::topic_validate(&self.results.topic).is_err() {
            return Err(invalid("results.topic", "must be a valid Kafka topic name"));
        }
        if self.results.group.is_empty() {
            return Err(invalid("results.group", "must not be empty"));
        }
        if self.results.topic_partitions < 1 {
            return Err(invalid("results.topic_partitions", "must be at least 1"));
        }
        if !(1..=10_000).contains(&self.results.batch) {
            return Err(invalid("results.batch", "must be between 1 and 10000"));
        }
        if !(1..=19).contains(&self.compression.level) {
            return Err(invalid("compression.level", "must be between 1 and 19"));
        }
        if self.compression.dict_delay_ms > 3_600_000 {
            return Err(invalid(
                "compression.dict_delay_ms",
                "must be at most 3600000",
            ));
        }
        if self.jobs.retention_days > 36_500 {
            return Err(invalid(
                "jobs.retention_days",
                "must be at most 36500 (0 keeps finished jobs forever)",
            ));
        }
        for pattern in &self.jobs.topics_allowed {
            if let Err(problem) = topic_pattern::validate(pattern) {
                return Err(ConfigError::Invalid {
                    field: "jobs.topics_allowed".into(),
                    problem,
                });
            }
        }
        if let Some(dlt) = &self.jobs.dead_letter_topic {
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

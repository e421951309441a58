//! The checks run once at start-up: each section's own (its `validate`,
//! beside its defaults in `sections/`), then the rules between sections,
//! which are here. The first problem found names its setting.

use std::net::SocketAddr;

use super::{
    durations_bounded, invalid, AuthMode, Config, ConfigError, Role, INGRESS_TOPIC_RESERVED,
};

impl Config {
    /// Checks every setting and the rules between them; the first problem
    /// found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        // First: the rules below add durations, which must not overflow.
        durations_bounded(&serde_json::to_value(self).unwrap_or_default(), "")?;
        self.sections_validate()?;
        if self.shutdown_timeout_ms < 1_000 {
            return Err(invalid("shutdown_timeout_ms", "must be at least 1000"));
        }
        self.anonymous_validate()?;
        self.dispatcher_timing_validate()?;
        self.topics_policy_validate()?;
        self.ingress_results_validate()
    }

    /// Each section's own checks, in the order of the file. Every field is
    /// named, so that a new section without its `validate` does not build.
    fn sections_validate(&self) -> Result<(), ConfigError> {
        let Config {
            roles: _,
            shutdown_timeout_ms: _,
            mysql,
            redis,
            kafka,
            api,
            jobs,
            cluster,
            loader,
            schedules,
            tzdata,
            dispatcher,
            reconciler,
            results,
            gauges,
            notify,
            audit,
            consumption,
            encryption,
            compression,
            tracing,
            ingress,
            topics,
            renamed: _,
        } = self;
        mysql.validate()?;
        redis.validate()?;
        kafka.validate()?;
        api.validate()?;
        jobs.validate()?;
        cluster.validate()?;
        loader.validate()?;
        schedules.validate()?;
        tzdata.validate()?;
        dispatcher.validate()?;
        reconciler.validate()?;
        results.validate()?;
        gauges.validate()?;
        notify.validate()?;
        audit.validate()?;
        consumption.validate()?;
        encryption.validate()?;
        compression.validate()?;
        tracing.validate()?;
        ingress.validate()?;
        for (topic, settings) in topics {
            settings.validate(topic)?;
        }
        Ok(())
    }

    /// `[api]` with the roles: `auth = none` listens beyond loopback only
    /// when `api.allow_anonymous` says so, and only matters with the API
    /// role.
    fn anonymous_validate(&self) -> Result<(), ConfigError> {
        let Ok(http_addr) = self.api.addr.parse::<SocketAddr>() else {
            // Refused by the section's own check.
            return Ok(());
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
        Ok(())
    }

    /// `[dispatcher]` with `[kafka]`: the dispatcher's lease and waits
    /// cover the producer's timings.
    fn dispatcher_timing_validate(&self) -> Result<(), ConfigError> {
        // A claim's records are handed over only while they can land or be
        // given up (message timeout, then the margin) before its lease ends:
        // at least a second to send in.
        if self.dispatcher.claim_lease_ms < self.claim_lease_least(self.kafka.doubt_margin_ms) {
            return Err(invalid(
                "dispatcher.claim_lease_ms",
                "must be at least dispatcher.lookahead_ms + kafka.message_timeout_ms + kafka.doubt_margin_ms + 500, or a claim leaves no time to send its records",
            ));
        }
        if self.dispatcher.ack_wait_ms == 0
            || self.dispatcher.ack_wait_ms > self.kafka.message_timeout_ms
        {
            return Err(invalid(
                "dispatcher.ack_wait_ms",
                "must be positive and at most kafka.message_timeout_ms",
            ));
        }
        // A broker that answers nothing holds the pipeline full until its
        // records time out: that is no stall.
        if self.dispatcher.stall_ms < self.kafka.message_timeout_ms + 1_000 {
            return Err(invalid(
                "dispatcher.stall_ms",
                "must be at least kafka.message_timeout_ms + 1000: a broker that answers nothing holds the dispatcher that long",
            ));
        }
        Ok(())
    }

    /// `[topics."…"]` with `[jobs]`: each topic's result policy, its own
    /// settings over the default, is one that works.
    fn topics_policy_validate(&self) -> Result<(), ConfigError> {
        let rules = self.topic_rules();
        for topic in self.topics.keys() {
            if let Err(problem) = rules.policy_for(topic).validate() {
                return Err(ConfigError::Invalid {
                    field: "topics".into(),
                    problem: format!("entry {topic:?}: {problem}"),
                });
            }
        }
        Ok(())
    }

    /// `[ingress]` with `[results]`: no request or reply topic is the
    /// results topic, and the two consumers have groups of their own.
    fn ingress_results_validate(&self) -> Result<(), ConfigError> {
        let ingress = &self.ingress;
        if ingress.topics.contains_key(&self.results.topic) {
            return Err(ConfigError::Invalid {
                field: "ingress.topics".into(),
                problem: format!("entry {:?}: {INGRESS_TOPIC_RESERVED}", self.results.topic),
            });
        }
        if ingress.reply_topic.as_ref() == Some(&self.results.topic) {
            return Err(invalid(
                "ingress.reply_topic",
                "must not be a request topic or the results topic",
            ));
        }
        if ingress.group == self.results.group {
            return Err(invalid(
                "ingress.group",
                "must differ from results.group (one group would split the two topics' partitions between two consumers)",
            ));
        }
        Ok(())
    }
}

//! The ways jobs come in: `[api]`, the HTTP API (addresses, authentication,
//! TLS, limits), and `[ingress]`, the request topics of scheduling through
//! Kafka. Each section with its defaults and its own checks.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};
use crate::domain::{job, topic_pattern};

/// Longest name of a request topic: the history's `actor` column (110
/// characters) holds `ingress:<topic>`.
pub const INGRESS_TOPIC_MAX: usize = 100;

/// `[api]`: the HTTP API: where it listens, authentication, rate limits, TLS and connection limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiSettings {
    /// Address the HTTP API listens on.
    pub addr: String,
    /// A second address serving only `/metrics`, without a token, for a
    /// scraper on a private network.
    pub metrics_addr: Option<String>,
    /// `tokens`: every `/v1` call carries `Authorization: Bearer <secret>`
    /// of a token made by `tickler token create`. `none`: anyone who
    /// reaches the port may do anything; allowed only on a loopback
    /// `addr` unless `allow_anonymous` says otherwise.
    pub auth: AuthMode,
    /// Lets `auth = none` listen on an address other than loopback. Meant
    /// for a private network behind something that authenticates.
    pub allow_anonymous: bool,
    /// How often the API reads `api_tokens` again: a revoke takes effect
    /// within this long.
    pub token_refresh_ms: u64,
    /// How often the tokens with a quota have their usage counted again
    /// (by the reconciler role): a job that left pending stops counting
    /// within this long.
    pub quota_recount_ms: u64,
    /// Requests per second one token may make (0: unlimited), unless the
    /// token sets its own; beyond it, 429 with `Retry-After`.
    pub rate_requests: u32,
    /// Jobs per second one token may create (0: unlimited), likewise. The
    /// default is above what one instance takes (about 35,000 a second in
    /// batches on a small machine), so it stops a runaway client, never a
    /// busy one; give a client a lower rate on its token.
    pub rate_jobs: u32,
    /// PEM certificate chain and private key: the API speaks HTTPS.
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    /// Most connections the API holds at once; more wait in the kernel's
    /// backlog.
    pub max_connections: usize,
    /// A client has this long to finish the TLS handshake, and a request's
    /// headers from their first byte (from the connection's start for its
    /// first request).
    pub header_timeout_ms: u64,
    /// A kept-alive connection that sends nothing for this long after an
    /// answer is closed. Longer than a load balancer's or client pool's
    /// idle timeout, so the server is never the one that closes a
    /// connection a client is about to reuse.
    pub idle_timeout_ms: u64,
    /// A client has this long to send a request's body: 408 after it.
    pub body_timeout_ms: u64,
    /// On SIGTERM, `/readyz` answers 503 for this long before the roles
    /// stop (the API still serves meanwhile), so a load balancer that polls
    /// readiness stops sending here first. 0: stop at once.
    pub drain_ms: u64,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            addr: "127.0.0.1:8080".to_owned(),
            metrics_addr: None,
            auth: AuthMode::Tokens,
            allow_anonymous: false,
            token_refresh_ms: 5_000,
            quota_recount_ms: 5_000,
            rate_requests: 1_000,
            rate_jobs: 50_000,
            tls_cert: None,
            tls_key: None,
            max_connections: 1_024,
            header_timeout_ms: 5_000,
            idle_timeout_ms: 75_000,
            body_timeout_ms: 30_000,
            drain_ms: 0,
        }
    }
}

impl ApiSettings {
    /// The section's own checks; the first problem found names its setting.
    /// Whether `auth = none` may listen beyond loopback depends on the
    /// roles too: a rule between sections (`super::validate`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.addr.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "api.addr",
                "must be an address like 127.0.0.1:8080",
            ));
        }
        if let Some(addr) = &self.metrics_addr {
            if addr.parse::<SocketAddr>().is_err() {
                return Err(invalid(
                    "api.metrics_addr",
                    "must be an address like 127.0.0.1:9090",
                ));
            }
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(invalid(
                "api.tls_cert/api.tls_key",
                "must be given together (a PEM certificate chain and its private key)",
            ));
        }
        if self.token_refresh_ms < 100 {
            return Err(invalid("api.token_refresh_ms", "must be at least 100"));
        }
        if self.quota_recount_ms < 100 {
            return Err(invalid("api.quota_recount_ms", "must be at least 100"));
        }
        if self.max_connections == 0 {
            return Err(invalid("api.max_connections", "must be positive"));
        }
        if self.header_timeout_ms < 100 || self.body_timeout_ms < 100 {
            return Err(invalid(
                "api.header_timeout_ms/api.body_timeout_ms",
                "must be at least 100",
            ));
        }
        if self.idle_timeout_ms < self.header_timeout_ms {
            return Err(invalid(
                "api.idle_timeout_ms",
                "must be at least api.header_timeout_ms",
            ));
        }
        Ok(())
    }
}

/// The `api.auth` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    Tokens,
    None,
}

/// The `ingress` settings: request topics, each with the target topics its
/// records may schedule onto, and the reply topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngressSettings {
    /// Request topics by name, each with the target-topic patterns its
    /// records may schedule onto (as a token's topics). Kafka's ACLs say
    /// who may write to a request topic; this says where its records may
    /// lead.
    pub topics: BTreeMap<String, IngressTopic>,
    /// Where every request's outcome is produced; none by default.
    pub reply_topic: Option<String>,
    /// The consumer group reading the request topics.
    pub group: String,
    /// Most records written to MySQL in one pass (one multi-row insert).
    pub batch: usize,
    /// Partitions of a request or reply topic tickler has to create.
    pub topic_partitions: i32,
}

impl Default for IngressSettings {
    fn default() -> Self {
        IngressSettings {
            topics: BTreeMap::new(),
            reply_topic: None,
            group: "tickler-ingress".to_owned(),
            batch: 2_000,
            topic_partitions: 4,
        }
    }
}

/// What an ingress entry or the reply topic is told when it is Kafka's own
/// (`__…`) or, checked with `[results]` (`super::validate`), tickler's
/// results topic.
pub(in crate::config) const INGRESS_TOPIC_RESERVED: &str =
    "is tickler's results topic or internal to Kafka";

impl IngressSettings {
    /// The section's own checks; the first problem found names its setting.
    /// That no request or reply topic is the results topic, and that the
    /// group is not the results consumer's, are rules between sections
    /// (`super::validate`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (topic, settings) in &self.topics {
            let problem = if job::topic_validate(topic).is_err() {
                Some("is not a valid Kafka topic name".to_owned())
            } else if topic.len() > INGRESS_TOPIC_MAX {
                Some(format!("is longer than {INGRESS_TOPIC_MAX} characters (the history names its writes ingress:<topic>, in a column of 110)"))
            } else if topic.starts_with("__") {
                Some(INGRESS_TOPIC_RESERVED.to_owned())
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
        if let Some(reply) = &self.reply_topic {
            if job::topic_validate(reply).is_err() {
                return Err(invalid(
                    "ingress.reply_topic",
                    "must be a valid Kafka topic name",
                ));
            }
            if self.topics.contains_key(reply) {
                return Err(invalid(
                    "ingress.reply_topic",
                    "must not be a request topic or the results topic",
                ));
            }
        }
        if self.group.is_empty() {
            return Err(invalid("ingress.group", "must not be empty"));
        }
        if !(1..=10_000).contains(&self.batch) {
            return Err(invalid("ingress.batch", "must be between 1 and 10000"));
        }
        if self.topic_partitions < 1 {
            return Err(invalid("ingress.topic_partitions", "must be at least 1"));
        }
        Ok(())
    }
}

/// One request topic's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngressTopic {
    /// Target-topic patterns (`orders.*`) this topic's records may
    /// schedule onto; at least one.
    pub targets: Vec<String>,
}

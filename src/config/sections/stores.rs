//! Where the three stores are and how to reach them: `[mysql]`, the source
//! of truth; `[redis]`, the near-term index; `[kafka]`, the brokers and the
//! producer's timings. Each section with its defaults and its own checks.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{invalid, ConfigError};

/// `[mysql]`: MySQL, the source of truth: where it is, the pool, and how `tickler migrate` installs the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlSettings {
    /// `mysql://user:password@host:port/database` — the source of truth.
    pub url: String,
    /// Connections in the MySQL pool.
    pub pool_size: u32,
    /// What kind of server tickler writes to: `auto` (the default: the
    /// server says, from `VERSION()`), `mysql` (MySQL or MariaDB: the
    /// hand-edit triggers may be installed) or `portable` (TiDB, Vitess,
    /// or a MySQL run as they would be: no trigger, hand edits observed).
    pub engine: Engine,
    /// Whether changes made by hand in SQL are recorded in the jobs'
    /// history: `observe` (the reconciler compares changed rows with their
    /// history and records the difference as actor `sql`; no trigger, on
    /// every engine), `trigger` (triggers on `jobs`, installed by `tickler
    /// migrate`; not on a portable engine), `off` (`migrate` drops them)
    /// or `keep` (the default: `migrate` leaves them as it finds them, so a
    /// new database has none). tickler records its own changes either way.
    pub history_hand_edits: HandEdits,
    /// How `tickler migrate` installs the schema in an empty database:
    /// from `schema/baseline.sql` on TiDB (`auto`), always (`on`) or never
    /// (`off`: the migrations one by one).
    pub schema_baseline: SchemaBaseline,
}

impl Default for MysqlSettings {
    fn default() -> Self {
        MysqlSettings {
            url: "mysql://tickler:tickler@127.0.0.1:3306/tickler".to_owned(),
            pool_size: 16,
            engine: Engine::Auto,
            history_hand_edits: HandEdits::Keep,
            schema_baseline: SchemaBaseline::Auto,
        }
    }
}

impl MysqlSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.url.starts_with("mysql://") && !self.url.starts_with("mariadb://") {
            return Err(invalid("mysql.url", "must start with mysql://"));
        }
        if self.engine == Engine::Portable && self.history_hand_edits == HandEdits::Trigger {
            return Err(invalid(
                "mysql.history_hand_edits",
                "is trigger, which mysql.engine = portable does not use: set observe \
                 (hand edits recorded without a trigger)",
            ));
        }
        Ok(())
    }
}

/// The `mysql.history_hand_edits` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HandEdits {
    /// Triggers on `jobs` record what sessions without `@tickler_actor`
    /// (people, scripts) change, as actor `sql`. Creating them takes the
    /// TRIGGER privilege, and SUPER (or `log_bin_trust_function_creators =
    /// 1`) where binary logging is on.
    Trigger,
    /// No trigger: hand edits leave no history rows.
    Off,
    /// No trigger (`tickler migrate` drops them): the reconciler reads the
    /// rows changed since its last pass, each beside its last history row,
    /// and records as actor `sql` those whose status, time or attempt is
    /// not what their history says, at the row's `updated_at`. Works on
    /// every engine, TiDB and Vitess included (docs/operations.md, "Hand
    /// edits in the history").
    Observe,
    /// `tickler migrate` installs nothing and drops nothing. The default: a
    /// new database records no hand edits, and every row a claim or a mark
    /// changes is spared the trigger (about 5 µs of MariaDB's ~68 per
    /// dispatched job in the burst, docs/benchmarks.md); one upgraded from a
    /// version that installed the triggers by default keeps them until `off`
    /// is set.
    Keep,
}

/// The `mysql.engine` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// `portable` when the server's `VERSION()` names TiDB or Vitess,
    /// `mysql` otherwise.
    Auto,
    /// MySQL or MariaDB: what only they have (triggers) may be used.
    Mysql,
    /// Only what TiDB and a sharded Vitess have too (docs/scaling.md).
    Portable,
}

impl Engine {
    /// What `auto` means on a server whose `VERSION()` is `version`.
    pub fn resolve(self, version: &str) -> Engine {
        match self {
            Engine::Auto if version.contains("TiDB") || version.contains("Vitess") => {
                Engine::Portable
            }
            Engine::Auto => Engine::Mysql,
            chosen => chosen,
        }
    }
}

/// The `mysql.schema_baseline` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemaBaseline {
    /// On TiDB (its `VERSION()` says so), whose server refuses some of the
    /// migrations' statements; the migrations elsewhere.
    Auto,
    On,
    Off,
}

/// `[redis]`: Redis, the near-term index: where it is, the key prefix, TLS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSettings {
    /// `redis://host:port/db` — the near-term index (`rediss://` for TLS;
    /// several comma-separated URLs for a Redis Cluster;
    /// `redis+sentinel://sentinel1:26379,sentinel2:26379/master-name` for
    /// the master a Redis Sentinel names).
    pub url: String,
    /// Prefix of every Redis key, so several deployments can share a Redis.
    pub prefix: String,
    /// Run the index on a Redis Cluster with the cluster client (implied
    /// when `url` lists several comma-separated seed URLs).
    pub cluster: bool,
    /// With `rediss://`: PEM file of the CA that signed Redis's
    /// certificate (the system's roots otherwise)...
    pub tls_ca: Option<String>,
    /// ...and the client certificate and key, when Redis asks for one.
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: "redis://127.0.0.1:6379/0".to_owned(),
            prefix: "tickler".to_owned(),
            cluster: false,
            tls_ca: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl RedisSettings {
    /// The section's own checks; the first problem found names its setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let redis_schemes = [
            "redis://",
            "rediss://",
            "redis+sentinel://",
            "rediss+sentinel://",
        ];
        if !redis_schemes.iter().any(|s| self.url.starts_with(s)) {
            return Err(invalid(
                "redis.url",
                "must start with redis://, rediss://, redis+sentinel:// or rediss+sentinel://",
            ));
        }
        let redis_tls =
            self.url.starts_with("rediss://") || self.url.starts_with("rediss+sentinel://");
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis.prefix",
                "must be non-empty and may not contain '{' or '}' (they delimit hash tags)",
            ));
        }
        let redis_tls_files = [&self.tls_ca, &self.tls_cert, &self.tls_key];
        if redis_tls_files.iter().any(|s| s.is_some()) && !redis_tls {
            return Err(invalid(
                "redis.tls_ca/redis.tls_cert/redis.tls_key",
                "need a rediss:// or rediss+sentinel:// redis.url (TLS)",
            ));
        }
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(invalid(
                "redis.tls_cert/redis.tls_key",
                "must be given together",
            ));
        }
        Ok(())
    }
}

/// `[kafka]`: Kafka: the brokers, client options, the producer's timings, and the topic checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaSettings {
    /// Kafka bootstrap servers, comma-separated.
    pub brokers: String,
    /// Extra librdkafka properties for every Kafka client tickler makes —
    /// the producer, the results consumer, the read-back, topic
    /// administration — applied last (e.g. `security.protocol`,
    /// `sasl.mechanism`, `ssl.ca.location`, `debug`).
    pub options: BTreeMap<String, String>,
    /// Kafka producer: how long librdkafka may wait to fill a batch.
    pub linger_ms: u64,
    /// Kafka producer: how long a record may take to be acknowledged before
    /// the send fails (its claim is then read back after `doubt_margin_ms`,
    /// and produced again if nothing of it landed).
    pub message_timeout_ms: u64,
    /// How long after its producer gave up on a record the broker may still
    /// make it visible (what was on the wire; a follower lagging in the
    /// in-sync replicas). A claim in doubt is read back no sooner, and a
    /// claim's records are handed to the producer only while they can land
    /// or be given up this long before its lease ends. On a replicated
    /// cluster: the brokers' `replica.lag.time.max.ms`.
    pub doubt_margin_ms: u64,
    /// How often the broker's list of topics is fetched again (the API's
    /// check and the dispatcher both read it; an unknown topic also
    /// triggers a fetch, at most once a second).
    pub topic_refresh_ms: u64,
    /// What create does with a topic the broker does not have: `reject`
    /// (400 `unknown_topic`), `warn` (accept, log and count), `off`.
    pub topic_check: TopicCheck,
}

impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings {
            brokers: "127.0.0.1:9092".to_owned(),
            options: BTreeMap::new(),
            linger_ms: 1,
            message_timeout_ms: 3_000,
            doubt_margin_ms: 2_000,
            topic_refresh_ms: 10_000,
            topic_check: TopicCheck::Reject,
        }
    }
}

/// librdkafka settings tickler's promises rest on, with why: `kafka.options`
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

impl KafkaSettings {
    /// The section's own checks; the first problem found names its setting.
    /// The dispatcher's timings that must cover these are checked with the
    /// rules between sections (`super::validate`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.brokers.trim().is_empty() {
            return Err(invalid("kafka.brokers", "must name at least one broker"));
        }
        if !(500..=600_000).contains(&self.doubt_margin_ms) {
            return Err(invalid(
                "kafka.doubt_margin_ms",
                "must be between 500 and 600000",
            ));
        }
        if let Some((key, why)) = KAFKA_OPTIONS_RESERVED
            .iter()
            .find(|(key, _)| self.options.contains_key(*key))
        {
            return Err(invalid(
                "kafka.options",
                &format!("may not set {key}: {why}"),
            ));
        }
        if self.topic_refresh_ms < 1_000 {
            return Err(invalid("kafka.topic_refresh_ms", "must be at least 1000"));
        }
        Ok(())
    }
}

/// The `kafka.topic_check` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopicCheck {
    Reject,
    Warn,
    Off,
}

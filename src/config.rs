//! Configuration: defaults, then an optional TOML file, then `TICKLER_*`
//! environment variables (the last word wins). The only module that reads
//! the environment or configuration files. Validated once at start-up.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

/// Every setting, with its default. Durations carry their unit in the name so
/// that `TICKLER_WINDOW_MS=600000` reads unambiguously.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `mysql://user:password@host:port/database` — the source of truth.
    pub mysql_url: String,
    /// Connections in the MySQL pool.
    pub mysql_pool_size: u32,
    /// `redis://host:port/db` — the near-term index.
    pub redis_url: String,
    /// Prefix of every Redis key, so several deployments can share a Redis.
    pub redis_prefix: String,
    /// Kafka bootstrap servers, comma-separated.
    pub kafka_brokers: String,
    /// Extra librdkafka properties for the producer, applied last (e.g.
    /// `security.protocol`, `sasl.mechanism`, `ssl.ca.location`, `debug`).
    pub kafka_options: BTreeMap<String, String>,
    /// Address the HTTP API listens on.
    pub http_addr: String,
    /// Roles this process runs: any of `api`, `loader`, `dispatcher`,
    /// `reconciler`.
    pub roles: Vec<String>,
    /// Number of logical shards (one Redis ZSET each). Changing it on a live
    /// deployment strands indexed jobs until the reconciler re-feeds them.
    pub shards: u32,
    /// Jobs due within this much of now are kept in Redis; later ones only
    /// in MySQL.
    pub window_ms: u64,
    /// How often the loader looks for jobs entering the window.
    pub loader_interval_ms: u64,
    /// Rows the loader reads per query.
    pub loader_batch: u32,
    /// Most jobs one dispatcher claims per shard per pass.
    pub dispatch_batch: u32,
    /// A claim (in Redis and in MySQL) expires after this long; a dispatcher
    /// that died mid-batch has its jobs retried after it.
    pub claim_lease_ms: u64,
    /// Longest the dispatcher sleeps when nothing is due, so that jobs
    /// indexed by another instance are noticed.
    pub dispatch_idle_ms: u64,
    /// Time between reconciler passes (expired claims, overdue probe).
    pub reconcile_interval_ms: u64,
    /// How overdue a pending job must be before the reconciler checks that
    /// Redis holds it.
    pub reconcile_grace_ms: u64,
    /// Kafka producer: how long librdkafka may wait to fill a batch.
    pub kafka_linger_ms: u64,
    /// Kafka producer: how long a record may take to be acknowledged before
    /// the send fails (and the job is retried).
    pub kafka_message_timeout_ms: u64,
    /// Most jobs in one `POST /v1/jobs/batch`.
    pub batch_max: usize,
    /// Largest payload accepted, in bytes (after base64 decoding).
    pub payload_max_bytes: usize,
    /// Latest a job may be scheduled, counted from now.
    pub max_schedule_ahead_days: u64,
    /// `max_attempts` given to jobs that do not set it.
    pub default_max_attempts: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mysql_url: "mysql://tickler:tickler@127.0.0.1:3306/tickler".to_owned(),
            mysql_pool_size: 16,
            redis_url: "redis://127.0.0.1:6379/0".to_owned(),
            redis_prefix: "tickler".to_owned(),
            kafka_brokers: "127.0.0.1:9092".to_owned(),
            kafka_options: BTreeMap::new(),
            http_addr: "127.0.0.1:8080".to_owned(),
            roles: ROLES.iter().map(|role| role.to_string()).collect(),
            shards: 16,
            window_ms: 600_000,
            loader_interval_ms: 1_000,
            loader_batch: 5_000,
            dispatch_batch: 500,
            claim_lease_ms: 30_000,
            dispatch_idle_ms: 1_000,
            reconcile_interval_ms: 2_000,
            reconcile_grace_ms: 1_000,
            kafka_linger_ms: 1,
            kafka_message_timeout_ms: 10_000,
            batch_max: 1_000,
            payload_max_bytes: 1024 * 1024,
            max_schedule_ahead_days: 3650,
            default_max_attempts: 1,
        }
    }
}

/// A setting that cannot work, with what is wrong in words.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("invalid configuration: {field} {problem}")]
    Invalid {
        field: &'static str,
        problem: String,
    },
}

pub const ROLES: [&str; 4] = ["api", "loader", "dispatcher", "reconciler"];

impl Config {
    /// Defaults, overridden by `file` (when given) and then by `TICKLER_*`
    /// variables; validated.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only variables naming a setting are read: TICKLER_CONFIG, TICKLER_LOG
        // and the test suite's TICKLER_TEST_* are not settings.
        let known = Config::keys();
        let env = Env::prefixed("TICKLER_")
            .filter(move |key| known.iter().any(|k| key.as_str().eq_ignore_ascii_case(k)));
        let config: Config = figment
            .merge(env)
            .extract()
            .map_err(|err| ConfigError::Load(Box::new(err)))?;
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |field, problem: &str| ConfigError::Invalid {
            field,
            problem: problem.to_owned(),
        };
        if !self.mysql_url.starts_with("mysql://") && !self.mysql_url.starts_with("mariadb://") {
            return Err(invalid("mysql_url", "must start with mysql://"));
        }
        if !self.redis_url.starts_with("redis://") && !self.redis_url.starts_with("rediss://") {
            return Err(invalid(
                "redis_url",
                "must start with redis:// or rediss://",
            ));
        }
        if self.redis_prefix.is_empty() || self.redis_prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis_prefix",
                "must be non-empty and may not contain '{' or '}' (they delimit hash tags)",
            ));
        }
        if self.kafka_brokers.trim().is_empty() {
            return Err(invalid("kafka_brokers", "must name at least one broker"));
        }
        if self.http_addr.parse::<SocketAddr>().is_err() {
            return Err(invalid(
                "http_addr",
                "must be an address like 127.0.0.1:8080",
            ));
        }
        if let Some(role) = self.roles.iter().find(|r| !ROLES.contains(&r.as_str())) {
            return Err(ConfigError::Invalid {
                field: "roles",
                problem: format!("has unknown role {role:?} (known: {})", ROLES.join(", ")),
            });
        }
        if !(1..=16_384).contains(&self.shards) {
            return Err(invalid("shards", "must be between 1 and 16384"));
        }
        if self.window_ms < 1_000 {
            return Err(invalid("window_ms", "must be at least 1000"));
        }
        if self.loader_interval_ms == 0 || self.loader_interval_ms * 2 > self.window_ms {
            return Err(invalid(
                "loader_interval_ms",
                "must be positive and at most half of window_ms, or jobs could enter the window unseen",
            ));
        }
        if self.loader_batch == 0 || self.dispatch_batch == 0 {
            return Err(invalid("loader_batch/dispatch_batch", "must be positive"));
        }
        // librdkafka notices a timed-out message up to a second or so after
        // message.timeout.ms; the lease must outlast that, or a send still in
        // flight is rescued and produced twice.
        if self.claim_lease_ms < self.kafka_message_timeout_ms + 3_000 {
            return Err(invalid(
                "claim_lease_ms",
                "must be at least kafka_message_timeout_ms + 3000, or a send still in flight could be claimed again",
            ));
        }
        if self.reconcile_interval_ms == 0 {
            return Err(invalid("reconcile_interval_ms", "must be positive"));
        }
        if self.dispatch_idle_ms == 0 {
            return Err(invalid("dispatch_idle_ms", "must be positive"));
        }
        if self.payload_max_bytes == 0 || self.payload_max_bytes > 16 * 1024 * 1024 - 1 {
            return Err(invalid(
                "payload_max_bytes",
                "must be between 1 and 16777215 (the MEDIUMBLOB column)",
            ));
        }
        if !(1..=10_000).contains(&self.batch_max) {
            return Err(invalid("batch_max", "must be between 1 and 10000"));
        }
        if !(1..=36_500).contains(&self.max_schedule_ahead_days) {
            return Err(invalid(
                "max_schedule_ahead_days",
                "must be between 1 and 36500",
            ));
        }
        if self.default_max_attempts == 0 {
            return Err(invalid("default_max_attempts", "must be at least 1"));
        }
        Ok(())
    }

    /// The names of every setting, as they appear in files and (upper-cased,
    /// prefixed) in the environment.
    pub fn keys() -> Vec<String> {
        match serde_json::to_value(Config::default()) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }

    pub fn window(&self) -> Duration {
        Duration::from_millis(self.window_ms)
    }

    pub fn claim_lease(&self) -> Duration {
        Duration::from_millis(self.claim_lease_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_point_at_local_services() {
        let config = Config::default();
        config.validate().unwrap();
        assert!(config.mysql_url.contains("127.0.0.1:3306"));
        assert_eq!(config.kafka_brokers, "127.0.0.1:9092");
        assert_eq!(config.shards, 16);
        assert_eq!(config.window(), Duration::from_secs(600));
        for role in ["api", "loader", "dispatcher", "reconciler"] {
            assert!(config.has_role(role), "{role} runs by default");
        }
    }

    #[test]
    fn file_then_environment_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("tickler.toml", "shards = 8\nredis_prefix = \"from-file\"\n")?;
            jail.set_env("TICKLER_REDIS_PREFIX", "from-env");
            jail.set_env("TICKLER_ROLES", "[api]");
            let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
            assert_eq!(config.shards, 8);
            assert_eq!(config.redis_prefix, "from-env");
            assert_eq!(config.roles, vec!["api".to_owned()]);
            Ok(())
        });
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_SHARDS", "0");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("shards"), "{err}");
            jail.set_env("TICKLER_SHARDS", "many");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(
                err.contains("\"SHARDS\"") && err.contains("TICKLER_"),
                "{err}"
            );
            Ok(())
        });
        let config = Config {
            roles: vec!["api".into(), "reaper".into()],
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("\"reaper\""), "{err}");
    }

    #[test]
    fn unknown_keys_in_a_file_are_refused() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("tickler.toml", "shard = 8\n")?;
            let err = Config::load(Some(Path::new("tickler.toml"))).unwrap_err();
            assert!(err.to_string().contains("shard"), "{err}");
            Ok(())
        });
    }
}

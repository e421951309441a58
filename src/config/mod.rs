//! Configuration: defaults, then an optional TOML file, then `TICKLER_*`
//! environment variables (the last word wins). The only module that reads
//! the environment or configuration files. Validated once at start-up.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Format, Serialized, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

mod env;
mod rules;
mod sections;
mod validate;

pub use env::env_name;
use env::{env_merge, env_path, FlatNamesMoved};
pub use rules::TopicRules;
pub use sections::*;

/// Every setting, with its default, by section: `[mysql]`, `[redis]`,
/// `[kafka]`, `[api]`, `[jobs]`, `[cluster]`, `[loader]`, `[schedules]`,
/// `[dispatcher]`, `[reconciler]`, `[results]`, `[gauges]`, `[notify]`,
/// `[audit]`, `[tracing]`, `[ingress]` and `[topics."…"]`. Durations carry their unit in the name so
/// that `TICKLER_LOADER_WINDOW_MS=600000` reads unambiguously. The flat names
/// of before the sections (`window_ms`, `TICKLER_CLAIM_LEASE_MS`) are still
/// read, with a warning naming the new one ([`RENAMED`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Roles this process runs: any of `api`, `loader`, `dispatcher`,
    /// `reconciler`, `results`, `ingress` (which does nothing unless
    /// `ingress.topics` names a request topic).
    pub roles: Vec<Role>,
    /// Longest an orderly stop (SIGTERM, or a role that stopped on its own)
    /// may take; past it `tickler serve` exits all the same, status 1.
    pub shutdown_timeout_ms: u64,
    /// MySQL, the source of truth: where it is, the pool, and how `tickler migrate` installs the schema.
    pub mysql: MysqlSettings,
    /// Redis, the near-term index: where it is, the key prefix, TLS.
    pub redis: RedisSettings,
    /// Kafka: the brokers, client options, the producer's timings, and the topic checks.
    pub kafka: KafkaSettings,
    /// The HTTP API: where it listens, authentication, rate limits, TLS and connection limits.
    pub api: ApiSettings,
    /// What a job may be and what becomes of it: limits, the result policy of jobs that set none, dead letters, retention.
    pub jobs: JobsSettings,
    /// Many instances: the shards a new deployment starts with, and when a silent instance is dead.
    pub cluster: ClusterSettings,
    /// The loader: the window of jobs kept in Redis, and its passes.
    pub loader: LoaderSettings,
    /// Recurring schedules: how far ahead their occurrences are created.
    pub schedules: SchedulesSettings,
    /// The time-zone rules local times are resolved with.
    pub tzdata: TzdataSettings,
    /// The dispatcher: batches, the claim lease, and its timings.
    pub dispatcher: DispatcherSettings,
    /// The reconciler's passes.
    pub reconciler: ReconcilerSettings,
    /// The results topic consumers report on, and how tickler reads it.
    pub results: ResultsSettings,
    /// The gauges computed from the stores (`tickler_jobs`, overdue, drift, lags).
    pub gauges: GaugesSettings,
    /// The webhook for dead jobs and backlogs.
    pub notify: NotifySettings,
    /// The audit log's retention.
    pub audit: AuditSettings,
    /// `[consumption]`: the consumer groups followed.
    pub consumption: ConsumptionSettings,
    /// Payloads and headers encrypted at rest.
    pub encryption: EncryptionSettings,
    /// Payloads compressed at rest.
    pub compression: CompressionSettings,
    /// OpenTelemetry traces.
    pub tracing: TracingSettings,
    /// Scheduling by producing to Kafka: the request topics tickler
    /// consumes, and where it answers (docs/api.md, "Scheduling through
    /// Kafka"). None by default.
    pub ingress: IngressSettings,
    /// Per-topic result policy and dead-letter topic, by business topic
    /// (`[topics."orders.reminders"]` in the file).
    pub topics: BTreeMap<String, TopicConfig>,
    /// The flat names this configuration was given in, each with its new
    /// name (`("TICKLER_WINDOW_MS", "TICKLER_LOADER_WINDOW_MS")`): read, and
    /// warned about at start-up.
    #[serde(skip)]
    pub renamed: Vec<(String, String)>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            roles: Role::ALL.to_vec(),
            shutdown_timeout_ms: 90_000,
            mysql: MysqlSettings::default(),
            redis: RedisSettings::default(),
            kafka: KafkaSettings::default(),
            api: ApiSettings::default(),
            jobs: JobsSettings::default(),
            cluster: ClusterSettings::default(),
            loader: LoaderSettings::default(),
            schedules: SchedulesSettings::default(),
            tzdata: TzdataSettings::default(),
            dispatcher: DispatcherSettings::default(),
            reconciler: ReconcilerSettings::default(),
            results: ResultsSettings::default(),
            gauges: GaugesSettings::default(),
            notify: NotifySettings::default(),
            audit: AuditSettings::default(),
            consumption: ConsumptionSettings::default(),
            encryption: EncryptionSettings::default(),
            compression: CompressionSettings::default(),
            tracing: TracingSettings::default(),
            ingress: IngressSettings::default(),
            topics: BTreeMap::new(),
            renamed: Vec::new(),
        }
    }
}

/// The flat names of before the sections, each with its section's key: read
/// from a file or the environment for one more release, with a warning
/// (those of [`KEPT`] for good, without one).
pub const RENAMED: &[(&str, &str)] = &[
    ("mysql_url", "mysql.url"),
    ("mysql_pool_size", "mysql.pool_size"),
    ("history_hand_edits", "mysql.history_hand_edits"),
    ("schema_baseline", "mysql.schema_baseline"),
    ("redis_url", "redis.url"),
    ("redis_prefix", "redis.prefix"),
    ("redis_cluster", "redis.cluster"),
    ("redis_tls_ca", "redis.tls_ca"),
    ("redis_tls_cert", "redis.tls_cert"),
    ("redis_tls_key", "redis.tls_key"),
    ("kafka_brokers", "kafka.brokers"),
    ("kafka_options", "kafka.options"),
    ("kafka_linger_ms", "kafka.linger_ms"),
    ("kafka_message_timeout_ms", "kafka.message_timeout_ms"),
    ("doubt_margin_ms", "kafka.doubt_margin_ms"),
    ("topic_refresh_ms", "kafka.topic_refresh_ms"),
    ("topic_check", "kafka.topic_check"),
    ("http_addr", "api.addr"),
    ("metrics_addr", "api.metrics_addr"),
    ("auth", "api.auth"),
    ("allow_anonymous", "api.allow_anonymous"),
    ("token_refresh_ms", "api.token_refresh_ms"),
    ("api_rate_requests", "api.rate_requests"),
    ("api_rate_jobs", "api.rate_jobs"),
    ("api_tls_cert", "api.tls_cert"),
    ("api_tls_key", "api.tls_key"),
    ("api_max_connections", "api.max_connections"),
    ("api_header_timeout_ms", "api.header_timeout_ms"),
    ("api_idle_timeout_ms", "api.idle_timeout_ms"),
    ("api_body_timeout_ms", "api.body_timeout_ms"),
    ("batch_max", "jobs.batch_max"),
    ("payload_max_bytes", "jobs.payload_max_bytes"),
    ("max_schedule_ahead_days", "jobs.max_schedule_ahead_days"),
    ("topics_allowed", "jobs.topics_allowed"),
    ("dead_letter_topic", "jobs.dead_letter_topic"),
    ("retention_days", "jobs.retention_days"),
    ("retention_ms", "jobs.retention_ms"),
    ("default_expects_result", "jobs.expects_result"),
    ("default_max_attempts", "jobs.max_attempts"),
    ("default_backoff_base_ms", "jobs.backoff_base_ms"),
    ("default_backoff_cap_ms", "jobs.backoff_cap_ms"),
    ("default_ack_timeout_ms", "jobs.ack_timeout_ms"),
    ("shards", "cluster.shards"),
    ("instance_ttl_ms", "cluster.instance_ttl_ms"),
    ("window_ms", "loader.window_ms"),
    ("loader_interval_ms", "loader.interval_ms"),
    ("loader_batch", "loader.batch"),
    ("schedule_lookahead_ms", "schedules.lookahead_ms"),
    ("schedule_interval_ms", "schedules.interval_ms"),
    ("dispatch_batch", "dispatcher.batch"),
    ("claim_lease_ms", "dispatcher.claim_lease_ms"),
    ("dispatch_idle_ms", "dispatcher.idle_ms"),
    ("dispatch_stall_ms", "dispatcher.stall_ms"),
    ("dispatch_ack_wait_ms", "dispatcher.ack_wait_ms"),
    ("dispatch_lookahead_ms", "dispatcher.lookahead_ms"),
    ("reconcile_interval_ms", "reconciler.interval_ms"),
    ("reconcile_grace_ms", "reconciler.grace_ms"),
    ("results_topic", "results.topic"),
    ("results_group", "results.group"),
    ("results_topic_partitions", "results.topic_partitions"),
    ("results_batch", "results.batch"),
    ("truth_interval_ms", "gauges.interval_ms"),
    ("truth_counts_interval_ms", "gauges.counts_interval_ms"),
    ("gauge_topics_max", "gauges.topics_max"),
    ("notify_webhook_url", "notify.webhook_url"),
    ("notify_backlog_ms", "notify.backlog_ms"),
    ("notify_repeat_ms", "notify.repeat_ms"),
];

/// A setting that cannot work, with what is wrong in words.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    #[error("invalid configuration: {field} {problem}")]
    Invalid {
        field: std::borrow::Cow<'static, str>,
        problem: String,
    },
}

/// The longest duration any `*_ms` setting may have: ten years. A job's
/// time is bounded by `jobs.max_schedule_ahead_days`; no interval, lease or
/// window needs more, and much more overflows the time arithmetic it is
/// used in (a panic in a role, not an error at start-up).
pub const DURATION_MAX_MS: u64 = 10 * 365 * 86_400_000;

/// Every `*_ms` setting in `value` (the configuration as JSON; `prefix`
/// names the table it is in) is at most [`DURATION_MAX_MS`].
fn durations_bounded(value: &serde_json::Value, prefix: &str) -> Result<(), ConfigError> {
    let Some(table) = value.as_object() else {
        return Ok(());
    };
    for (key, value) in table {
        let name = format!("{prefix}{key}");
        if key.ends_with("_ms") && value.as_u64().is_some_and(|ms| ms > DURATION_MAX_MS) {
            return Err(ConfigError::Invalid {
                field: name.into(),
                problem: format!("must be at most {DURATION_MAX_MS} (ten years)"),
            });
        }
        if value.is_object() {
            durations_bounded(value, &format!("{name}."))?;
        }
    }
    Ok(())
}

/// A setting's problem, as [`ConfigError::Invalid`].
fn invalid(field: &'static str, problem: &str) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        problem: problem.to_owned(),
    }
}

/// What an instance does (`roles`); every instance also keeps its
/// membership, its copy of the topic controls, its codec's upkeep and the
/// clock guard, and refreshes the broker's topics with the api, dispatcher
/// or ingress role. The services each role runs are the role table's,
/// `crate::app::services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The HTTP API, the token cache (`api.auth = tokens`), the bulk
    /// runner, and the metrics listener (with `api.metrics_addr`).
    Api,
    /// The loader and the schedule materializer.
    Loader,
    /// Claims due jobs and produces them.
    Dispatcher,
    /// The reconciler (repairs from MySQL), the reporter (the gauges and
    /// the webhook), the due-time watermarks, the quotas counted again,
    /// and the retention purge.
    Reconciler,
    /// Consumes the results topic; produces dead letters.
    Results,
    /// Jobs scheduled by producing to a request topic.
    Ingress,
}

impl Role {
    /// Every role, in the order `tickler config` prints them.
    pub const ALL: [Role; 6] = [
        Role::Api,
        Role::Loader,
        Role::Dispatcher,
        Role::Reconciler,
        Role::Results,
        Role::Ingress,
    ];

    /// The role's name in the configuration and in `instances.roles`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Api => "api",
            Role::Loader => "loader",
            Role::Dispatcher => "dispatcher",
            Role::Reconciler => "reconciler",
            Role::Results => "results",
            Role::Ingress => "ingress",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `scheme://user:password@host…` with the password (and anything after
/// `?` that names one) masked.
pub fn url_masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None => format!("{user}@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((k, _))
                        if ["password", "secret", "token", "key"]
                            .iter()
                            .any(|w| k.to_ascii_lowercase().contains(w)) =>
                    {
                        format!("{k}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// A URL whose path is its secret — an incoming webhook's
/// (`https://hooks.slack.com/services/T…/B…/XXXX`, Mattermost's
/// `/hooks/…`) — as [`url_masked`] shows it, with all after the host
/// (path, query, fragment) masked: `https://hooks.slack.com/***`.
pub fn url_path_masked(url: &str) -> String {
    let masked = url_masked(url);
    let Some((scheme, rest)) = masked.split_once("://") else {
        // Not a URL: nothing in it can be told from a secret.
        return "***".to_owned();
    };
    match rest.find(['/', '?', '#']) {
        Some(at) => format!("{scheme}://{}/***", &rest[..at]),
        None => masked,
    }
}

/// Flat names that stay names of their setting, without a warning: the
/// contract users build on names `TICKLER_HTTP_ADDR`.
pub const KEPT: &[&str] = &["http_addr"];

/// The sections of the configuration, as `[section]` in a file.
pub const SECTIONS: &[&str] = &[
    "mysql",
    "redis",
    "kafka",
    "api",
    "jobs",
    "cluster",
    "loader",
    "schedules",
    "tzdata",
    "dispatcher",
    "reconciler",
    "results",
    "gauges",
    "notify",
    "audit",
    "consumption",
    "encryption",
    "compression",
    "tracing",
];

impl Config {
    /// Defaults, overridden by `file` (when given) and then by `TICKLER_*`
    /// variables; validated. The flat names of before the sections are
    /// read as their new ones, and listed in [`Config::renamed`] (a name
    /// given both ways takes the new one's value).
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let mut renamed = Vec::new();
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            let given = Toml::file_exact(file);
            if let Ok(data) = given.data() {
                for dict in data.values() {
                    renamed.extend(
                        RENAMED
                            .iter()
                            .filter(|(old, _)| dict.contains_key(*old) && !KEPT.contains(old))
                            .map(|(old, new)| ((*old).to_owned(), (*new).to_owned())),
                    );
                }
            }
            figment = figment.merge(FlatNamesMoved(given));
        }
        // Only variables naming a setting are read: TICKLER_CONFIG, TICKLER_LOG
        // and the test suite's TICKLER_TEST_* are not settings. The flat
        // names first, so that a new name given as well wins.
        let vars: Vec<(String, String, bool)> = std::env::vars()
            .filter_map(|(var, _)| {
                let (path, flat) = env_path(var.strip_prefix("TICKLER_")?)?;
                Some((path, var, flat))
            })
            .collect();
        for flat_pass in [true, false] {
            for (path, var, flat) in vars.iter().filter(|(_, _, flat)| *flat == flat_pass) {
                let kept = KEPT.iter().any(|old| env_name(old) == *var);
                if *flat && !kept {
                    renamed.push((var.clone(), env_name(path)));
                }
                figment = env_merge(figment, var, path)?;
            }
        }
        let mut config: Config = figment
            .extract()
            .map_err(|err| ConfigError::Load(Box::new(err)))?;
        config.renamed = renamed;
        // A lease left at its default follows the timeouts it must cover: a
        // deployment that raised `kafka.message_timeout_ms` or
        // `kafka.doubt_margin_ms` (or the lookahead) gets the least lease that
        // leaves a claim time to send, rather than a refusal to start. A
        // lease set by hand is checked as set.
        if config.dispatcher.claim_lease_ms == DispatcherSettings::default().claim_lease_ms {
            config.dispatcher.claim_lease_ms = config
                .dispatcher
                .claim_lease_ms
                .max(config.claim_lease_least(config.kafka.doubt_margin_ms));
        }
        config.validate()?;
        Ok(config)
    }

    /// The key path of every setting, as a file gives it (`roles`,
    /// `loader.window_ms`; `ingress` and `topics` are tables of their own).
    /// In the environment: [`env_name`].
    pub fn keys() -> Vec<String> {
        let Ok(serde_json::Value::Object(map)) = serde_json::to_value(Config::default()) else {
            return Vec::new();
        };
        let mut keys = Vec::new();
        for (key, value) in map {
            match value {
                serde_json::Value::Object(section) if SECTIONS.contains(&key.as_str()) => {
                    keys.extend(section.keys().map(|name| format!("{key}.{name}")));
                }
                _ => keys.push(key),
            }
        }
        keys
    }

    /// The settings as JSON, with every secret masked (`***`): passwords
    /// in URLs, the webhook's path, and `kafka.options` whose name says
    /// password or secret.
    /// What `tickler config` prints.
    pub fn masked(&self) -> serde_json::Value {
        let mut shown = self.clone();
        shown.mysql.url = url_masked(&shown.mysql.url);
        // A Sentinel URL's commas separate sentinels within one URL.
        shown.redis.url = if shown.redis.url.contains("+sentinel://") {
            url_masked(&shown.redis.url)
        } else {
            shown
                .redis
                .url
                .split(',')
                .map(url_masked)
                .collect::<Vec<_>>()
                .join(",")
        };
        // A webhook's URL is its credential: its path is the secret.
        shown.notify.webhook_url = shown.notify.webhook_url.as_deref().map(url_path_masked);
        shown.tracing.otlp_endpoint = shown.tracing.otlp_endpoint.as_deref().map(url_masked);
        for (key, value) in shown.kafka.options.iter_mut() {
            let key = key.to_ascii_lowercase();
            if key.contains("password") || key.contains("secret") || key.ends_with(".pem") {
                *value = "***".to_owned();
            }
        }
        serde_json::to_value(&shown).unwrap_or_default()
    }

    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    pub fn window(&self) -> Duration {
        Duration::from_millis(self.loader.window_ms)
    }

    /// What this configuration says of each business topic, for the
    /// roles that act on jobs.
    pub fn topic_rules(&self) -> TopicRules {
        TopicRules {
            jobs: self.jobs.clone(),
            topics: self.topics.clone(),
            results_topic: self.results.topic.clone(),
            request_topics: self.ingress.topics.keys().cloned().collect(),
            reply_topic: self.ingress.reply_topic.clone(),
        }
    }

    /// The shortest `dispatcher.claim_lease_ms` that leaves a claim time to be held
    /// until its job is due (`dispatcher.lookahead_ms`), then half a second
    /// to be handed to the producer, whose record then lands or is given up
    /// (`kafka.message_timeout_ms`) `doubt_margin_ms` before the lease ends.
    pub fn claim_lease_least(&self, doubt_margin_ms: u64) -> u64 {
        self.dispatcher.lookahead_ms + self.kafka.message_timeout_ms + doubt_margin_ms + 500
    }

    pub fn claim_lease(&self) -> Duration {
        Duration::from_millis(self.dispatcher.claim_lease_ms)
    }

    pub fn instance_ttl(&self) -> Duration {
        Duration::from_millis(self.cluster.instance_ttl_ms)
    }
}

#[cfg(test)]
mod tests;

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

use crate::job;
use crate::policy::{Policy, PolicyOverrides};
use crate::topic_pattern;

/// Every setting, with its default. Durations carry their unit in the name so
/// that `TICKLER_WINDOW_MS=600000` reads unambiguously.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `mysql://user:password@host:port/database` — the source of truth.
    pub mysql_url: String,
    /// Connections in the MySQL pool.
    pub mysql_pool_size: u32,
    /// `redis://host:port/db` — the near-term index (`rediss://` for TLS;
    /// several comma-separated URLs for a Redis Cluster;
    /// `redis+sentinel://sentinel1:26379,sentinel2:26379/master-name` for
    /// the master a Redis Sentinel names).
    pub redis_url: String,
    /// Prefix of every Redis key, so several deployments can share a Redis.
    pub redis_prefix: String,
    /// Kafka bootstrap servers, comma-separated.
    pub kafka_brokers: String,
    /// Extra librdkafka properties for every Kafka client tickler makes —
    /// the producer, the results consumer, the read-back, topic
    /// administration — applied last (e.g. `security.protocol`,
    /// `sasl.mechanism`, `ssl.ca.location`, `debug`).
    pub kafka_options: BTreeMap<String, String>,
    /// Address the HTTP API listens on.
    pub http_addr: String,
    /// Roles this process runs: any of `api`, `loader`, `dispatcher`,
    /// `reconciler`, `results`, `ingress` (which does nothing unless
    /// `ingress.topics` names a request topic).
    pub roles: Vec<Role>,
    /// Number of logical shards (one Redis ZSET each) a new deployment
    /// starts with. After the first start the count is the deployment's,
    /// kept in MySQL (`shard_leases`); raise it with `tickler shards resize`.
    pub shards: u32,
    /// Run the index on a Redis Cluster with the cluster client (implied
    /// when `redis_url` lists several comma-separated seed URLs).
    pub redis_cluster: bool,
    /// An instance whose heartbeat (on the database's clock) is older than
    /// this is dead for everyone: its shards are taken over and the jobs its
    /// dispatcher held are produced again by the others. It beats every
    /// fifth of this.
    pub instance_ttl_ms: u64,
    /// How often one instance (the lowest live id running the reconciler)
    /// computes the gauges from MySQL: jobs by status and topic, overdue,
    /// drift, results lag.
    pub truth_interval_ms: u64,
    /// How often the jobs are counted by status and topic, the one gauge
    /// whose cost grows with the table (seconds at ten million live jobs);
    /// at least `truth_interval_ms`.
    pub truth_counts_interval_ms: u64,
    /// Where the reporter instance posts JSON when jobs end dead and when a
    /// backlog builds up (`http://` or `https://`); none by default.
    pub notify_webhook_url: Option<String>,
    /// A backlog is an overdue pending job older than this.
    pub notify_backlog_ms: u64,
    /// While a backlog lasts, it is said again this often.
    pub notify_repeat_ms: u64,
    /// Most topics the `tickler_jobs` gauge names; the rest are summed
    /// under `topic="_other"`.
    pub gauge_topics_max: usize,
    /// Jobs due within this much of now are kept in Redis; later ones only
    /// in MySQL.
    pub window_ms: u64,
    /// How often the loader looks for jobs entering the window.
    pub loader_interval_ms: u64,
    /// Occurrences of a schedule are created as jobs this far ahead (and
    /// always the next one, however far).
    pub schedule_lookahead_ms: u64,
    /// How often the loader looks for schedules that need their next
    /// occurrences created.
    pub schedule_interval_ms: u64,
    /// Rows the loader reads per query.
    pub loader_batch: u32,
    /// Most jobs one dispatcher claims per shard per pass.
    pub dispatch_batch: u32,
    /// A claim (in Redis and in MySQL) expires after this long. Its records
    /// are handed to the producer only while they can land or be given up
    /// before it ends, so past it the claim is read back and, if nothing of
    /// it landed, produced again: a dispatcher that died or paused
    /// mid-batch costs its jobs this much, a pass and the read back.
    pub claim_lease_ms: u64,
    /// Longest the dispatcher sleeps when nothing is due, so that jobs
    /// indexed by another instance are noticed.
    pub dispatch_idle_ms: u64,
    /// A dispatcher busy this long without finishing a pass (a call to
    /// MySQL, Redis or Kafka that never returns: a connection a failover
    /// left half-open) gives up: the instance stops in order, so the others
    /// take its shards instead of waiting on a process that beats its
    /// heart and sends nothing.
    pub dispatch_stall_ms: u64,
    /// Longest an orderly stop (SIGTERM, or a role that stopped on its own)
    /// may take; past it `tickler serve` exits all the same, status 1.
    pub shutdown_timeout_ms: u64,
    /// How long the dispatcher waits for the broker's acknowledgements of
    /// records sent together before it leaves those of a topic the broker
    /// stopped answering for to settle in the background, so one bad topic
    /// never holds up the others; past it, a broker slow for every topic
    /// holds claiming back.
    pub dispatch_ack_wait_ms: u64,
    /// The dispatcher claims jobs due within this many milliseconds (in
    /// Redis and in MySQL, by the database's clock) and holds each until its
    /// time, so that claiming costs no lateness. A cancel in this last
    /// stretch answers `in_flight`. 0 claims only what is due.
    pub dispatch_lookahead_ms: u64,
    /// Time between reconciler passes (expired claims, overdue probe).
    pub reconcile_interval_ms: u64,
    /// How overdue a pending job must be before the reconciler checks that
    /// Redis holds it.
    pub reconcile_grace_ms: u64,
    /// Kafka producer: how long librdkafka may wait to fill a batch.
    pub kafka_linger_ms: u64,
    /// Kafka producer: how long a record may take to be acknowledged before
    /// the send fails (its claim is then read back after `doubt_margin_ms`,
    /// and produced again if nothing of it landed).
    pub kafka_message_timeout_ms: u64,
    /// How long after its producer gave up on a record the broker may still
    /// make it visible (what was on the wire; a follower lagging in the
    /// in-sync replicas). A claim in doubt is read back no sooner, and a
    /// claim's records are handed to the producer only while they can land
    /// or be given up this long before its lease ends. On a replicated
    /// cluster: the brokers' `replica.lag.time.max.ms`.
    pub doubt_margin_ms: u64,
    /// Whether changes made by hand in SQL are recorded in the jobs'
    /// history: `trigger` (triggers on `jobs`, installed by `tickler
    /// migrate`, record them as actor `sql`), `off` (`migrate` drops them)
    /// or `keep` (the default: `migrate` leaves them as it finds them, so a
    /// new database has none). tickler records its own changes either way.
    pub history_hand_edits: HandEdits,
    /// How `tickler migrate` installs the schema in an empty database:
    /// from `schema/baseline.sql` on TiDB (`auto`), always (`on`) or never
    /// (`off`: the migrations one by one).
    pub schema_baseline: SchemaBaseline,
    /// What create does with a topic the broker does not have: `reject`
    /// (400 `unknown_topic`), `warn` (accept, log and count), `off`.
    pub topic_check: TopicCheck,
    /// How often the broker's list of topics is fetched again (the API's
    /// check and the dispatcher both read it; an unknown topic also
    /// triggers a fetch, at most once a second).
    pub topic_refresh_ms: u64,
    /// Most jobs in one `POST /v1/jobs/batch`.
    pub batch_max: usize,
    /// Largest payload accepted, in bytes (after base64 decoding).
    pub payload_max_bytes: usize,
    /// Latest a job may be scheduled, counted from now.
    pub max_schedule_ahead_days: u64,
    /// Result policy of jobs whose request and topic leave it open:
    /// whether a consumer reports back...
    pub default_expects_result: bool,
    /// ...how many attempts a job gets in all...
    pub default_max_attempts: u32,
    /// ...the retry delay, `min(cap, base * 2^(attempt-1))` jittered to
    /// between half of it and all of it...
    pub default_backoff_base_ms: u32,
    pub default_backoff_cap_ms: u32,
    /// ...and how long a dispatched job waits for its result before the
    /// silence counts as a retry.
    pub default_ack_timeout_ms: u32,
    /// Per-topic result policy and dead-letter topic, by business topic
    /// (`[topics."orders.reminders"]` in the file).
    pub topics: BTreeMap<String, TopicConfig>,
    /// The topic consumers report results on.
    pub results_topic: String,
    /// Consumer group tickler reads the results topic with.
    pub results_group: String,
    /// Partitions of the results topic when tickler creates it (it exists
    /// already in most deployments; then this is not used).
    pub results_topic_partitions: i32,
    /// Most reports applied in one transaction.
    pub results_batch: usize,
    /// Where a record for each job that ends `dead` goes; none by default.
    pub dead_letter_topic: Option<String>,
    /// Finished jobs (succeeded, dead, cancelled, dispatched without a
    /// result to wait for) unchanged for this many days are deleted, with
    /// their history; 0 keeps them forever.
    pub retention_days: u32,
    /// The same in milliseconds, for soaks and tests; when above 0 it
    /// replaces `retention_days`.
    pub retention_ms: u64,
    /// Topics jobs may be created for, as patterns where `*` matches any
    /// run of characters (`orders.*`); empty allows every topic that is not
    /// reserved.
    pub topics_allowed: Vec<String>,
    /// `tokens`: every `/v1` call carries `Authorization: Bearer <secret>`
    /// of a token made by `tickler token create`. `none`: anyone who
    /// reaches the port may do anything; allowed only on a loopback
    /// `http_addr` unless `allow_anonymous` says otherwise.
    pub auth: AuthMode,
    /// Lets `auth = none` listen on an address other than loopback. Meant
    /// for a private network behind something that authenticates.
    pub allow_anonymous: bool,
    /// How often the API reads `api_tokens` again: a revoke takes effect
    /// within this long.
    pub token_refresh_ms: u64,
    /// Requests per second one token may make (0: unlimited), unless the
    /// token sets its own; beyond it, 429 with `Retry-After`.
    pub api_rate_requests: u32,
    /// Jobs per second one token may create (0: unlimited), likewise. The
    /// default is above what one instance takes (about 35,000 a second in
    /// batches on a small machine), so it stops a runaway client, never a
    /// busy one; give a client a lower rate on its token.
    pub api_rate_jobs: u32,
    /// PEM certificate chain and private key: the API speaks HTTPS.
    pub api_tls_cert: Option<String>,
    pub api_tls_key: Option<String>,
    /// A second address serving only `/metrics`, without a token, for a
    /// scraper on a private network.
    pub metrics_addr: Option<String>,
    /// Most connections the API holds at once; more wait in the kernel's
    /// backlog.
    pub api_max_connections: usize,
    /// A client has this long to finish the TLS handshake, and a request's
    /// headers from their first byte (from the connection's start for its
    /// first request).
    pub api_header_timeout_ms: u64,
    /// A kept-alive connection that sends nothing for this long after an
    /// answer is closed. Longer than a load balancer's or client pool's
    /// idle timeout, so the server is never the one that closes a
    /// connection a client is about to reuse.
    pub api_idle_timeout_ms: u64,
    /// A client has this long to send a request's body: 408 after it.
    pub api_body_timeout_ms: u64,
    /// With `rediss://`: PEM file of the CA that signed Redis's
    /// certificate (the system's roots otherwise)...
    pub redis_tls_ca: Option<String>,
    /// ...and the client certificate and key, when Redis asks for one.
    pub redis_tls_cert: Option<String>,
    pub redis_tls_key: Option<String>,
    /// Scheduling by producing to Kafka: the request topics tickler
    /// consumes, and where it answers (docs/api.md, "Scheduling through
    /// Kafka"). None by default.
    pub ingress: IngressSettings,
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

/// One request topic's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngressTopic {
    /// Target-topic patterns (`orders.*`) this topic's records may
    /// schedule onto; at least one.
    pub targets: Vec<String>,
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

/// The `auth` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    Tokens,
    None,
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
    /// Overrides `dead_letter_topic`; `""` turns dead letters off here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letter_topic: Option<String>,
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
}

impl Default for Config {
    fn default() -> Self {
        let policy = Policy::default();
        Config {
            mysql_url: "mysql://tickler:tickler@127.0.0.1:3306/tickler".to_owned(),
            mysql_pool_size: 16,
            redis_url: "redis://127.0.0.1:6379/0".to_owned(),
            redis_prefix: "tickler".to_owned(),
            kafka_brokers: "127.0.0.1:9092".to_owned(),
            kafka_options: BTreeMap::new(),
            http_addr: "127.0.0.1:8080".to_owned(),
            roles: Role::ALL.to_vec(),
            shards: 16,
            instance_ttl_ms: 5_000,
            truth_interval_ms: 15_000,
            truth_counts_interval_ms: 60_000,
            notify_webhook_url: None,
            notify_backlog_ms: 300_000,
            notify_repeat_ms: 3_600_000,
            gauge_topics_max: 50,
            redis_cluster: false,
            window_ms: 600_000,
            loader_interval_ms: 1_000,
            schedule_lookahead_ms: 10_000,
            schedule_interval_ms: 1_000,
            loader_batch: 5_000,
            dispatch_batch: 500,
            claim_lease_ms: 5_600,
            dispatch_idle_ms: 1_000,
            dispatch_stall_ms: 60_000,
            shutdown_timeout_ms: 90_000,
            dispatch_ack_wait_ms: 200,
            dispatch_lookahead_ms: 20,
            reconcile_interval_ms: 1_000,
            reconcile_grace_ms: 1_000,
            kafka_linger_ms: 1,
            kafka_message_timeout_ms: 3_000,
            doubt_margin_ms: 2_000,
            topic_check: TopicCheck::Reject,
            history_hand_edits: HandEdits::Keep,
            schema_baseline: SchemaBaseline::Auto,
            topic_refresh_ms: 10_000,
            batch_max: 1_000,
            payload_max_bytes: 1024 * 1024,
            max_schedule_ahead_days: 3650,
            // One place for the policy's defaults: policy::Policy.
            default_expects_result: policy.expects_result,
            default_max_attempts: policy.max_attempts,
            default_backoff_base_ms: policy.backoff_base_ms,
            default_backoff_cap_ms: policy.backoff_cap_ms,
            default_ack_timeout_ms: policy.ack_timeout_ms,
            topics: BTreeMap::new(),
            results_topic: "tickler.results".to_owned(),
            results_group: "tickler".to_owned(),
            results_topic_partitions: 4,
            results_batch: 500,
            dead_letter_topic: None,
            retention_days: 30,
            retention_ms: 0,
            topics_allowed: Vec::new(),
            auth: AuthMode::Tokens,
            allow_anonymous: false,
            token_refresh_ms: 5_000,
            api_rate_requests: 1_000,
            api_rate_jobs: 50_000,
            api_tls_cert: None,
            api_tls_key: None,
            metrics_addr: None,
            api_max_connections: 1_024,
            api_header_timeout_ms: 5_000,
            api_idle_timeout_ms: 75_000,
            api_body_timeout_ms: 30_000,
            redis_tls_ca: None,
            redis_tls_cert: None,
            redis_tls_key: None,
            ingress: IngressSettings::default(),
        }
    }
}

/// The `history_hand_edits` setting.
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
    /// `tickler migrate` installs nothing and drops nothing. The default: a
    /// new database records no hand edits, and every row a claim or a mark
    /// changes is spared the trigger (about 5 µs of MariaDB's ~68 per
    /// dispatched job in the burst, docs/benchmarks.md); one upgraded from a
    /// version that installed the triggers by default keeps them until `off`
    /// is set.
    Keep,
}

/// The `schema_baseline` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SchemaBaseline {
    /// On TiDB (its `VERSION()` says so), whose server refuses some of the
    /// migrations' statements; the migrations elsewhere.
    Auto,
    On,
    Off,
}

/// The `topic_check` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TopicCheck {
    Reject,
    Warn,
    Off,
}

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
/// time is bounded by `max_schedule_ahead_days`; no interval, lease or
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

/// Longest name of a request topic: the history's `actor` column (110
/// characters) holds `ingress:<topic>`.
pub const INGRESS_TOPIC_MAX: usize = 100;

/// Longest `dispatch_lookahead_ms`: a job claimed ahead can no longer be
/// cancelled, so the stretch stays short.
pub const DISPATCH_LOOKAHEAD_MAX_MS: u64 = 1_000;

/// What an instance does (`roles`); every instance also keeps its
/// membership and its copy of the topic controls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The HTTP API (and the token cache, the bulk runner).
    Api,
    /// The loader and the schedule materializer.
    Loader,
    /// Claims due jobs and produces them.
    Dispatcher,
    /// Repairs from MySQL, the retention purge, the gauges.
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
fn url_masked(url: &str) -> String {
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

/// List settings, given in the environment as `a,b,c` (or `[a, b]`).
const ENV_LISTS: &[&str] = &["roles", "topics_allowed"];
/// Map settings of strings, given in the environment as an inline TOML
/// table whose keys may be dotted without quotes, as librdkafka's are:
/// `{security.protocol="SSL", ssl.ca.location="/etc/ca.pem"}`.
const ENV_MAPS: &[&str] = &["kafka_options"];

/// librdkafka settings tickler's promises rest on, with why: `kafka_options`
/// (applied after tickler's own) may not change them.
const KAFKA_OPTIONS_RESERVED: &[(&str, &str)] = &[
    (
        "message.timeout.ms",
        "use kafka_message_timeout_ms (claims in doubt are timed by it)",
    ),
    (
        "delivery.timeout.ms",
        "use kafka_message_timeout_ms (claims in doubt are timed by it)",
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
        "set the group of each consumer by its own setting (results_group, ingress group)",
    ),
];
/// Table settings, given in the environment as an inline TOML table:
/// `TICKLER_INGRESS='{reply_topic="tickler.replies", topics={"tickler.requests"={targets=["orders.*"]}}}'`.
const ENV_TABLES: &[&str] = &["ingress"];

/// `api,dispatcher`, `[api, dispatcher]` or `["api","dispatcher"]`: the
/// items, trimmed, without quotes; empty items dropped.
fn env_list(text: &str) -> Vec<String> {
    let text = text.trim();
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .unwrap_or(text);
    inner
        .split(',')
        .map(|item| {
            item.trim()
                .trim_matches(|c| c == '"' || c == '\'')
                .to_owned()
        })
        .filter(|item| !item.is_empty())
        .collect()
}

/// An inline TOML table of strings, numbers or booleans, flattened: a
/// dotted key without quotes (`security.protocol="SSL"`, which TOML reads
/// as nested tables) and a quoted one (`"security.protocol"="SSL"`) give
/// the same entry. Values become strings, as librdkafka takes them.
fn env_map(text: &str) -> Result<BTreeMap<String, String>, String> {
    use figment::value::Value;

    fn flatten(
        prefix: &str,
        value: &Value,
        out: &mut BTreeMap<String, String>,
    ) -> Result<(), String> {
        match value {
            Value::Dict(_, dict) => {
                for (key, value) in dict {
                    let key = if prefix.is_empty() {
                        key.clone()
                    } else {
                        format!("{prefix}.{key}")
                    };
                    flatten(&key, value, out)?;
                }
                Ok(())
            }
            Value::String(_, text) => {
                out.insert(prefix.to_owned(), text.clone());
                Ok(())
            }
            Value::Bool(_, b) => {
                out.insert(prefix.to_owned(), b.to_string());
                Ok(())
            }
            Value::Num(_, n) => {
                let text = n
                    .to_i128()
                    .map(|i| i.to_string())
                    .or_else(|| n.to_f64().map(|f| f.to_string()))
                    .unwrap_or_default();
                out.insert(prefix.to_owned(), text);
                Ok(())
            }
            _ => Err(format!(
                "{prefix:?} must be a string, a number or a boolean"
            )),
        }
    }

    let table: Value = Figment::from(Toml::string(&format!("map = {}", text.trim())))
        .extract_inner("map")
        // The parser's message would quote the value, which may hold a
        // password: only the form that works is said.
        .map_err(|_| {
            "not an inline table such as {security.protocol=\"SSL\", ssl.ca.location=\"/etc/ca.pem\"}".to_owned()
        })?;
    let mut out = BTreeMap::new();
    flatten("", &table, &mut out)?;
    Ok(out)
}

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
        // Lists and maps have forms of their own in the environment
        // (`api,dispatcher`; `{security.protocol="SSL"}`), read below.
        let known = Config::keys();
        let env = Env::prefixed("TICKLER_").filter(move |key| {
            known.iter().any(|k| key.as_str().eq_ignore_ascii_case(k))
                && !ENV_LISTS
                    .iter()
                    .chain(ENV_MAPS)
                    .chain(ENV_TABLES)
                    .any(|k| key.as_str().eq_ignore_ascii_case(k))
        });
        let mut figment = figment.merge(env);
        for key in ENV_LISTS {
            let var = format!("TICKLER_{}", key.to_ascii_uppercase());
            if let Ok(text) = std::env::var(&var) {
                let list = env_list(&text);
                // Checked here, so that a mistake names the variable.
                if *key == "roles" {
                    if let Some(unknown) = list
                        .iter()
                        .find(|name| !Role::ALL.iter().any(|role| role.as_str() == *name))
                    {
                        let known: Vec<&str> = Role::ALL.iter().map(|r| r.as_str()).collect();
                        return Err(ConfigError::Invalid {
                            field: "roles".into(),
                            problem: format!(
                                "{var}: unknown role {unknown:?} (known: {})",
                                known.join(", ")
                            ),
                        });
                    }
                }
                figment = figment.merge(Serialized::default(key, list));
            }
        }
        for key in ENV_MAPS {
            let var = format!("TICKLER_{}", key.to_ascii_uppercase());
            if let Ok(text) = std::env::var(&var) {
                let map = env_map(&text).map_err(|problem| ConfigError::Invalid {
                    field: (*key).into(),
                    problem: format!("{var}: {problem}"),
                })?;
                figment = figment.merge(Serialized::default(key, map));
            }
        }
        for key in ENV_TABLES {
            let var = format!("TICKLER_{}", key.to_ascii_uppercase());
            if let Ok(text) = std::env::var(&var) {
                let table = format!("{key} = {}", text.trim());
                // Checked on its own first, so a mistake names the variable.
                Figment::from(Toml::string(&table))
                    .extract_inner::<figment::value::Value>(key)
                    .map_err(|_| ConfigError::Invalid {
                        field: (*key).into(),
                        problem: format!(
                            "{var}: not an inline TOML table such as {{topics={{\"tickler.requests\"={{targets=[\"orders.*\"]}}}}}}"
                        ),
                    })?;
                figment = figment.merge(Toml::string(&table));
            }
        }
        let mut config: Config = figment
            .extract()
            .map_err(|err| ConfigError::Load(Box::new(err)))?;
        // A lease left at its default follows the timeouts it must cover: a
        // deployment that raised `kafka_message_timeout_ms` or
        // `doubt_margin_ms` (or the lookahead) gets the least lease that
        // leaves a claim time to send, rather than a refusal to start. A
        // lease set by hand is checked as set.
        if config.claim_lease_ms == Config::default().claim_lease_ms {
            config.claim_lease_ms = config
                .claim_lease_ms
                .max(config.claim_lease_least(config.doubt_margin_ms));
        }
        config.validate()?;
        Ok(config)
    }

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
            } else if *topic == self.results_topic || topic.starts_with("__") {
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
            if ingress.topics.contains_key(reply) || *reply == self.results_topic {
                return Err(invalid(
                    "ingress.reply_topic",
                    "must not be a request topic or the results topic",
                ));
            }
        }
        if ingress.group.is_empty() {
            return Err(invalid("ingress.group", "must not be empty"));
        }
        if ingress.group == self.results_group {
            return Err(invalid(
                "ingress.group",
                "must differ from results_group (one group would split the two topics' partitions between two consumers)",
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
        if !self.mysql_url.starts_with("mysql://") && !self.mysql_url.starts_with("mariadb://") {
            return Err(invalid("mysql_url", "must start with mysql://"));
        }
        let redis_schemes = [
            "redis://",
            "rediss://",
            "redis+sentinel://",
            "rediss+sentinel://",
        ];
        if !redis_schemes.iter().any(|s| self.redis_url.starts_with(s)) {
            return Err(invalid(
                "redis_url",
                "must start with redis://, rediss://, redis+sentinel:// or rediss+sentinel://",
            ));
        }
        let redis_tls = self.redis_url.starts_with("rediss://")
            || self.redis_url.starts_with("rediss+sentinel://");
        if self.redis_prefix.is_empty() || self.redis_prefix.contains(['{', '}']) {
            return Err(invalid(
                "redis_prefix",
                "must be non-empty and may not contain '{' or '}' (they delimit hash tags)",
            ));
        }
        if self.kafka_brokers.trim().is_empty() {
            return Err(invalid("kafka_brokers", "must name at least one broker"));
        }
        let redis_tls_files = [
            &self.redis_tls_ca,
            &self.redis_tls_cert,
            &self.redis_tls_key,
        ];
        if redis_tls_files.iter().any(|s| s.is_some()) && !redis_tls {
            return Err(invalid(
                "redis_tls_ca/redis_tls_cert/redis_tls_key",
                "need a rediss:// or rediss+sentinel:// redis_url (TLS)",
            ));
        }
        if self.redis_tls_cert.is_some() != self.redis_tls_key.is_some() {
            return Err(invalid(
                "redis_tls_cert/redis_tls_key",
                "must be given together",
            ));
        }
        if !(1..=16_384).contains(&self.shards) {
            return Err(invalid("shards", "must be between 1 and 16384"));
        }
        Ok(())
    }

    /// The API: addresses, TLS, authentication and what a request may ask.
    fn validate_api(&self) -> Result<(), ConfigError> {
        let Ok(http_addr) = self.http_addr.parse::<SocketAddr>() else {
            return Err(invalid(
                "http_addr",
                "must be an address like 127.0.0.1:8080",
            ));
        };
        if self.auth == AuthMode::None
            && !http_addr.ip().is_loopback()
            && !self.allow_anonymous
            && self.has_role(Role::Api)
        {
            return Err(ConfigError::Invalid {
                field: "auth".into(),
                problem: format!(
                    "is none and http_addr {http_addr} is not a loopback address: anyone who \
                     reaches it could produce to any topic and cancel any job. Use auth = \
                     \"tokens\" (tickler token create), or set allow_anonymous = true on purpose"
                ),
            });
        }
        if let Some(addr) = &self.metrics_addr {
            if addr.parse::<SocketAddr>().is_err() {
                return Err(invalid(
                    "metrics_addr",
                    "must be an address like 127.0.0.1:9090",
                ));
            }
        }
        if self.api_tls_cert.is_some() != self.api_tls_key.is_some() {
            return Err(invalid(
                "api_tls_cert/api_tls_key",
                "must be given together (a PEM certificate chain and its private key)",
            ));
        }
        if self.token_refresh_ms < 100 {
            return Err(invalid("token_refresh_ms", "must be at least 100"));
        }
        if self.api_max_connections == 0 {
            return Err(invalid("api_max_connections", "must be positive"));
        }
        if self.api_header_timeout_ms < 100 || self.api_body_timeout_ms < 100 {
            return Err(invalid(
                "api_header_timeout_ms/api_body_timeout_ms",
                "must be at least 100",
            ));
        }
        if self.api_idle_timeout_ms < self.api_header_timeout_ms {
            return Err(invalid(
                "api_idle_timeout_ms",
                "must be at least api_header_timeout_ms",
            ));
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
        Ok(())
    }

    /// Intervals, leases and timeouts, and the rules between them.
    ///
    /// Long because it is a list of checks, one per setting.
    fn validate_timing(&self) -> Result<(), ConfigError> {
        durations_bounded(&serde_json::to_value(self).unwrap_or_default(), "")?;
        if self.schedule_interval_ms < 10 {
            return Err(invalid("schedule_interval_ms", "must be at least 10"));
        }
        if !(1_000..=3_600_000).contains(&self.truth_interval_ms) {
            return Err(invalid(
                "truth_interval_ms",
                "must be between 1000 and 3600000",
            ));
        }
        if self.truth_counts_interval_ms < self.truth_interval_ms
            || self.truth_counts_interval_ms > 86_400_000
        {
            return Err(invalid(
                "truth_counts_interval_ms",
                "must be at least truth_interval_ms and at most 86400000",
            ));
        }
        if !(500..=600_000).contains(&self.instance_ttl_ms) {
            return Err(invalid("instance_ttl_ms", "must be between 500 and 600000"));
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
        if !(500..=600_000).contains(&self.doubt_margin_ms) {
            return Err(invalid("doubt_margin_ms", "must be between 500 and 600000"));
        }
        // A claim's records are handed over only while they can land or be
        // given up (message timeout, then the margin) before its lease ends:
        // at least a second to send in.
        if self.claim_lease_ms < self.claim_lease_least(self.doubt_margin_ms) {
            return Err(invalid(
                "claim_lease_ms",
                "must be at least dispatch_lookahead_ms + kafka_message_timeout_ms + doubt_margin_ms + 500, or a claim leaves no time to send its records",
            ));
        }
        if let Some((key, why)) = KAFKA_OPTIONS_RESERVED
            .iter()
            .find(|(key, _)| self.kafka_options.contains_key(*key))
        {
            return Err(invalid(
                "kafka_options",
                &format!("may not set {key}: {why}"),
            ));
        }
        if self.reconcile_interval_ms == 0 {
            return Err(invalid("reconcile_interval_ms", "must be positive"));
        }
        if self.topic_refresh_ms < 1_000 {
            return Err(invalid("topic_refresh_ms", "must be at least 1000"));
        }
        if self.dispatch_ack_wait_ms == 0
            || self.dispatch_ack_wait_ms > self.kafka_message_timeout_ms
        {
            return Err(invalid(
                "dispatch_ack_wait_ms",
                "must be positive and at most kafka_message_timeout_ms",
            ));
        }
        if self.shutdown_timeout_ms < 1_000 {
            return Err(invalid("shutdown_timeout_ms", "must be at least 1000"));
        }
        // A broker that answers nothing holds the pipeline full until its
        // records time out: that is no stall.
        if self.dispatch_stall_ms < self.kafka_message_timeout_ms + 1_000 {
            return Err(invalid(
                "dispatch_stall_ms",
                "must be at least kafka_message_timeout_ms + 1000: a broker that answers nothing holds the dispatcher that long",
            ));
        }
        if self.dispatch_idle_ms == 0 {
            return Err(invalid("dispatch_idle_ms", "must be positive"));
        }
        if self.dispatch_lookahead_ms > DISPATCH_LOOKAHEAD_MAX_MS {
            return Err(invalid(
                "dispatch_lookahead_ms",
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
        if let Some(url) = &self.notify_webhook_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(invalid(
                    "notify_webhook_url",
                    "must start with http:// or https://",
                ));
            }
        }
        if !(1_000..=604_800_000).contains(&self.notify_backlog_ms) {
            return Err(invalid(
                "notify_backlog_ms",
                "must be between 1000 and 604800000",
            ));
        }
        if !(60_000..=604_800_000).contains(&self.notify_repeat_ms) {
            return Err(invalid(
                "notify_repeat_ms",
                "must be between 60000 and 604800000",
            ));
        }
        if !(1..=10_000).contains(&self.gauge_topics_max) {
            return Err(invalid("gauge_topics_max", "must be between 1 and 10000"));
        }
        if let Err(problem) = self.policy_default().validate() {
            return Err(ConfigError::Invalid {
                field: "default_*".into(),
                problem: format!("give an invalid result policy: {problem}"),
            });
        }
        for (topic, settings) in &self.topics {
            let problem = if job::topic_validate(topic).is_err() {
                Some("is not a valid Kafka topic name".to_owned())
            } else if let Err(problem) = self.policy_for(topic).validate() {
                Some(problem)
            } else {
                match &settings.dead_letter_topic {
                    Some(dlt) if !dlt.is_empty() && job::topic_validate(dlt).is_err() => {
                        Some("has a dead_letter_topic that is not a valid topic name".to_owned())
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
        }
        if job::topic_validate(&self.results_topic).is_err() {
            return Err(invalid("results_topic", "must be a valid Kafka topic name"));
        }
        if self.results_group.is_empty() {
            return Err(invalid("results_group", "must not be empty"));
        }
        if self.results_topic_partitions < 1 {
            return Err(invalid("results_topic_partitions", "must be at least 1"));
        }
        if !(1..=10_000).contains(&self.results_batch) {
            return Err(invalid("results_batch", "must be between 1 and 10000"));
        }
        if self.retention_days > 36_500 {
            return Err(invalid(
                "retention_days",
                "must be at most 36500 (0 keeps finished jobs forever)",
            ));
        }
        for pattern in &self.topics_allowed {
            if let Err(problem) = topic_pattern::validate(pattern) {
                return Err(ConfigError::Invalid {
                    field: "topics_allowed".into(),
                    problem,
                });
            }
        }
        if let Some(dlt) = &self.dead_letter_topic {
            if job::topic_validate(dlt).is_err() {
                return Err(invalid(
                    "dead_letter_topic",
                    "must be a valid Kafka topic name",
                ));
            }
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

    /// The settings as JSON, with every secret masked (`***`): passwords
    /// in URLs, and `kafka_options` whose name says password or secret.
    /// What `tickler config` prints.
    pub fn masked(&self) -> serde_json::Value {
        let mut shown = self.clone();
        shown.mysql_url = url_masked(&shown.mysql_url);
        // A Sentinel URL's commas separate sentinels within one URL.
        shown.redis_url = if shown.redis_url.contains("+sentinel://") {
            url_masked(&shown.redis_url)
        } else {
            shown
                .redis_url
                .split(',')
                .map(url_masked)
                .collect::<Vec<_>>()
                .join(",")
        };
        shown.notify_webhook_url = shown.notify_webhook_url.as_deref().map(url_masked);
        for (key, value) in shown.kafka_options.iter_mut() {
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
        Duration::from_millis(self.window_ms)
    }

    /// The result policy of jobs that set none themselves.
    pub fn policy_default(&self) -> Policy {
        Policy {
            expects_result: self.default_expects_result,
            max_attempts: self.default_max_attempts,
            backoff_base_ms: self.default_backoff_base_ms,
            backoff_cap_ms: self.default_backoff_cap_ms,
            ack_timeout_ms: self.default_ack_timeout_ms,
        }
    }

    /// The result policy of jobs on `topic`, before the request's own.
    pub fn policy_for(&self, topic: &str) -> Policy {
        match self.topics.get(topic) {
            Some(settings) => settings.overrides().over(self.policy_default()),
            None => self.policy_default(),
        }
    }

    /// The configured pace of `topic`, jobs per second, if any.
    pub fn max_per_second_for(&self, topic: &str) -> Option<u32> {
        self.topics.get(topic).and_then(|t| t.max_per_second)
    }

    /// Where dead jobs of `topic` are recorded, if anywhere.
    pub fn dead_letter_for(&self, topic: &str) -> Option<&str> {
        let chosen = match self
            .topics
            .get(topic)
            .and_then(|t| t.dead_letter_topic.as_deref())
        {
            Some(topic_own) => Some(topic_own),
            None => self.dead_letter_topic.as_deref(),
        };
        chosen.filter(|t| !t.is_empty())
    }

    /// Why jobs may not be created for `topic`, if they may not: tickler's
    /// own topics (results, dead letters), Kafka's internal ones (`__*`),
    /// and anything outside `topics_allowed`. A job on the results topic
    /// would be read as a report about someone else's job.
    pub fn topic_reserved(&self, topic: &str) -> Option<String> {
        if topic == self.results_topic {
            return Some(format!("topic {topic:?} is tickler's results topic"));
        }
        let dead_letters = self
            .topics
            .values()
            .filter_map(|t| t.dead_letter_topic.as_deref())
            .chain(self.dead_letter_topic.as_deref());
        if dead_letters.into_iter().any(|dlt| dlt == topic) {
            return Some(format!("topic {topic:?} is a dead-letter topic"));
        }
        if topic.starts_with("__") {
            return Some(format!("topic {topic:?} is internal to Kafka"));
        }
        if self.ingress.topics.contains_key(topic) {
            return Some(format!(
                "topic {topic:?} is a request topic of tickler's ingress"
            ));
        }
        if self.ingress.reply_topic.as_deref() == Some(topic) {
            return Some(format!("topic {topic:?} is the ingress's reply topic"));
        }
        if !self.topics_allowed.is_empty()
            && !self
                .topics_allowed
                .iter()
                .any(|p| topic_pattern::matches(p, topic))
        {
            return Some(format!(
                "topic {topic:?} is outside topics_allowed ({})",
                self.topics_allowed.join(", ")
            ));
        }
        None
    }

    /// The shortest `claim_lease_ms` that leaves a claim time to be held
    /// until its job is due (`dispatch_lookahead_ms`), then half a second
    /// to be handed to the producer, whose record then lands or is given up
    /// (`kafka_message_timeout_ms`) `doubt_margin_ms` before the lease ends.
    pub fn claim_lease_least(&self, doubt_margin_ms: u64) -> u64 {
        self.dispatch_lookahead_ms + self.kafka_message_timeout_ms + doubt_margin_ms + 500
    }

    pub fn claim_lease(&self) -> Duration {
        Duration::from_millis(self.claim_lease_ms)
    }

    pub fn instance_ttl(&self) -> Duration {
        Duration::from_millis(self.instance_ttl_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_doubts_timing_is_tickler_s_own_and_leaves_time_to_send() {
        let mut config = Config::default();
        config
            .kafka_options
            .insert("message.timeout.ms".to_owned(), "60000".to_owned());
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("kafka_message_timeout_ms"), "{err}");
        let config = Config {
            doubt_margin_ms: 30_000,
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("claim_lease_ms"), "{err}");
        let config = Config {
            doubt_margin_ms: 30_000,
            claim_lease_ms: 41_000,
            ..Config::default()
        };
        assert!(config.validate().is_ok());
    }

    #[test]
    fn kafka_options_may_not_change_a_safety_setting_and_the_refusal_names_it() {
        for key in [
            "acks",
            "enable.idempotence",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "isolation.level",
            "group.id",
            "transactional.id",
            "delivery.timeout.ms",
        ] {
            let mut config = Config::default();
            config.kafka_options.insert(key.to_owned(), "1".to_owned());
            let err = config.validate().unwrap_err().to_string();
            assert!(
                err.contains("kafka_options") && err.contains(&format!("may not set {key}:")),
                "{key}: {err}"
            );
        }
        let mut config = Config::default();
        config
            .kafka_options
            .insert("security.protocol".to_owned(), "SSL".to_owned());
        config
            .kafka_options
            .insert("compression.type".to_owned(), "zstd".to_owned());
        assert!(config.validate().is_ok(), "others pass through");
    }

    #[test]
    fn the_printed_configuration_masks_every_secret() {
        let mut config = Config {
            mysql_url: "mysql://tickler:hunter2@db:3306/tickler?ssl-mode=required".to_owned(),
            redis_url: "redis://:pw@r1:6379,redis://r2:6379".to_owned(),
            notify_webhook_url: Some("https://hooks.example/x?token=abc&x=1".to_owned()),
            ..Config::default()
        };
        config
            .kafka_options
            .insert("sasl.password".to_owned(), "s3cret".to_owned());
        config
            .kafka_options
            .insert("security.protocol".to_owned(), "SASL_SSL".to_owned());
        let shown = config.masked().to_string();
        for secret in ["hunter2", ":pw@", "s3cret", "abc"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("mysql://tickler:***@db:3306/tickler?ssl-mode=required"),
            "{shown}"
        );
        assert!(shown.contains("SASL_SSL"));
        assert!(shown.contains("token=***&x=1"), "{shown}");

        let sentinel = Config {
            redis_url: "redis+sentinel://app:pw1@s1:26379,s2:26379/m?sentinel_password=pw2"
                .to_owned(),
            ..Config::default()
        };
        let shown = sentinel.masked().to_string();
        for secret in ["pw1", "pw2"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(
            shown.contains("redis+sentinel://app:***@s1:26379,s2:26379/m?sentinel_password=***"),
            "{shown}"
        );
    }

    #[test]
    fn a_default_lease_follows_a_raised_message_timeout_and_a_set_one_is_checked() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_KAFKA_MESSAGE_TIMEOUT_MS", "10000");
            let config = Config::load(None).map_err(|e| e.to_string())?;
            assert_eq!(config.claim_lease_ms, 20 + 10_000 + 2_000 + 500);
            jail.set_env("TICKLER_CLAIM_LEASE_MS", "6000");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("claim_lease_ms"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_sentinel_redis_url_is_taken_and_tls_files_need_a_tls_scheme() {
        let sentinel = |url: &str| Config {
            redis_url: url.to_owned(),
            ..Config::default()
        };
        sentinel("redis+sentinel://s1:26379,s2:26379/m")
            .validate()
            .unwrap();
        let tls = Config {
            redis_tls_ca: Some("/ca.pem".to_owned()),
            ..sentinel("rediss+sentinel://s1/m")
        };
        tls.validate().unwrap();
        let plain = Config {
            redis_tls_ca: Some("/ca.pem".to_owned()),
            ..sentinel("redis+sentinel://s1/m")
        };
        let err = plain.validate().unwrap_err().to_string();
        assert!(err.contains("rediss+sentinel://"), "{err}");
        let err = sentinel("sentinel://s1/m")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("redis+sentinel://"), "{err}");
    }

    #[test]
    fn lists_and_maps_have_environment_forms_people_type() {
        assert_eq!(env_list("api,dispatcher"), ["api", "dispatcher"]);
        assert_eq!(env_list(" [api, dispatcher] "), ["api", "dispatcher"]);
        assert_eq!(env_list(r#"["api","results"]"#), ["api", "results"]);
        assert!(env_list("").is_empty());
        let map = env_map(r#"{security.protocol="SSL",ssl.ca.location="/path/ca.pem"}"#).unwrap();
        assert_eq!(map["security.protocol"], "SSL");
        assert_eq!(map["ssl.ca.location"], "/path/ca.pem");
        let quoted =
            env_map(r#"{"security.protocol"="SSL", "ssl.ca.location"="/path/ca.pem"}"#).unwrap();
        assert_eq!(quoted, map);
        let typed = env_map("{linger.ms=5, enable.idempotence=true}").unwrap();
        assert_eq!(
            (
                typed["linger.ms"].as_str(),
                typed["enable.idempotence"].as_str()
            ),
            ("5", "true")
        );
        let err = env_map("security.protocol=SSL").unwrap_err();
        assert!(err.contains("inline table"), "{err}");
        let err = env_map("{sasl.password=hunter2 oops}").unwrap_err();
        assert!(
            !err.contains("hunter2"),
            "a refused value is never echoed: {err}"
        );
    }

    #[test]
    fn defaults_are_valid_and_point_at_local_services() {
        let config = Config::default();
        config.validate().unwrap();
        assert!(config.mysql_url.contains("127.0.0.1:3306"));
        assert_eq!(config.kafka_brokers, "127.0.0.1:9092");
        assert_eq!(config.shards, 16);
        assert_eq!(config.window(), Duration::from_secs(600));
        for role in Role::ALL {
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
            assert_eq!(config.roles, vec![Role::Api]);
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
            jail.set_env("TICKLER_SHARDS", "8");
            jail.set_env("TICKLER_ROLES", "[api, reaper]");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(
                err.contains("\"reaper\"") && err.contains("TICKLER_ROLES"),
                "{err}"
            );
            Ok(())
        });
        figment::Jail::expect_with(|jail| {
            jail.create_file("tickler.toml", "roles = [\"api\", \"reaper\"]\n")?;
            let err = Config::load(Some(Path::new("tickler.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("reaper") && err.contains("roles"), "{err}");
            Ok(())
        });
        let config = Config {
            retention_days: 40_000,
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("retention_days"), "{err}");
        let config = Config {
            dispatch_lookahead_ms: 5_000,
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("dispatch_lookahead_ms"), "{err}");
        // Absurd durations are refused at start-up, not met as an overflow
        // in a role (a lease added to an instant, a window to a time).
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_CLAIM_LEASE_MS", u64::MAX.to_string());
            let err = Config::load(None).unwrap_err().to_string();
            assert!(
                err.contains("claim_lease_ms must be at most 315360000000"),
                "{err}"
            );
            jail.set_env("TICKLER_CLAIM_LEASE_MS", "30000");
            jail.set_env("TICKLER_WINDOW_MS", (DURATION_MAX_MS + 1).to_string());
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("window_ms must be at most"), "{err}");
            jail.set_env("TICKLER_WINDOW_MS", DURATION_MAX_MS.to_string());
            assert!(Config::load(None).is_ok());
            Ok(())
        });
    }

    #[test]
    fn topics_override_the_default_policy() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "tickler.toml",
                "default_max_attempts = 3\ndead_letter_topic = \"all.dead\"\n\
                 [topics.\"orders.reminders\"]\nexpects_result = true\nack_timeout_ms = 60000\n\
                 [topics.quiet]\ndead_letter_topic = \"\"\n",
            )?;
            let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
            let policy = config.policy_for("orders.reminders");
            assert!(policy.expects_result);
            assert_eq!(policy.ack_timeout_ms, 60_000);
            assert_eq!(policy.max_attempts, 3, "from the defaults");
            assert!(!config.policy_for("other").expects_result);
            assert_eq!(config.dead_letter_for("other"), Some("all.dead"));
            assert_eq!(config.dead_letter_for("quiet"), None);

            jail.create_file(
                "bad.toml",
                "[topics.\"orders\"]\nbackoff_base_ms = 5000\nbackoff_cap_ms = 10\n",
            )?;
            let err = Config::load(Some(Path::new("bad.toml")))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("\"orders\"") && err.contains("backoff_base_ms"),
                "{err}"
            );
            jail.create_file("typo.toml", "[topics.orders]\nmax_attempt = 5\n")?;
            let err = Config::load(Some(Path::new("typo.toml")))
                .unwrap_err()
                .to_string();
            assert!(err.contains("max_attempt"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn tickler_and_kafka_topics_are_reserved() {
        let mut config = Config {
            dead_letter_topic: Some("dead".to_owned()),
            ..Config::default()
        };
        config.topics.insert(
            "orders".to_owned(),
            TopicConfig {
                dead_letter_topic: Some("orders-dlq".to_owned()),
                ..TopicConfig::default()
            },
        );
        for topic in [
            "tickler.results",
            "dead",
            "orders-dlq",
            "__consumer_offsets",
        ] {
            assert!(config.topic_reserved(topic).is_some(), "{topic}");
        }
        assert!(config.topic_reserved("orders").is_none());
        config.topics_allowed = vec!["orders*".to_owned()];
        assert!(config.topic_reserved("orders.eu").is_none());
        assert!(config.topic_reserved("payments").is_some());
        config.topics_allowed = vec!["bad pattern".to_owned()];
        assert!(config.validate().is_err());
    }

    #[test]
    fn anonymous_access_stays_on_loopback_unless_allowed_on_purpose() {
        let mut config = Config {
            auth: AuthMode::None,
            http_addr: "0.0.0.0:8080".to_owned(),
            ..Config::default()
        };
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("auth") && err.contains("allow_anonymous"),
            "{err}"
        );
        config.allow_anonymous = true;
        config.validate().unwrap();
        config.allow_anonymous = false;
        config.http_addr = "127.0.0.1:8080".to_owned();
        config.validate().unwrap();
        config.http_addr = "[::1]:8080".to_owned();
        config.validate().unwrap();
        config.http_addr = "0.0.0.0:8080".to_owned();
        config.auth = AuthMode::Tokens;
        config.validate().unwrap();
        config.roles = vec![Role::Dispatcher];
        config.auth = AuthMode::None;
        config.validate().unwrap();
    }

    #[test]
    fn tls_settings_come_in_working_sets() {
        let config = Config {
            api_tls_cert: Some("cert.pem".to_owned()),
            ..Config::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("api_tls_key"));
        let config = Config {
            redis_tls_ca: Some("ca.pem".to_owned()),
            ..Config::default()
        };
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("rediss://"));
        let config = Config {
            redis_url: "rediss://127.0.0.1:6380".to_owned(),
            redis_tls_ca: Some("ca.pem".to_owned()),
            ..Config::default()
        };
        config.validate().unwrap();
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

    #[test]
    fn ingress_settings_come_from_a_file_or_one_environment_variable() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "tickler.toml",
                r#"
                    [ingress]
                    reply_topic = "tickler.replies"
                    [ingress.topics."tickler.requests"]
                    targets = ["orders.*"]
                "#,
            )?;
            let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
            assert_eq!(
                config.ingress.reply_topic.as_deref(),
                Some("tickler.replies")
            );
            assert_eq!(
                config.ingress.topics["tickler.requests"].targets,
                vec!["orders.*".to_owned()]
            );
            assert_eq!(config.ingress.group, "tickler-ingress", "the default stays");
            jail.set_env(
                "TICKLER_INGRESS",
                r#"{topics={"billing.requests"={targets=["billing.*"]}}, batch=50}"#,
            );
            let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
            assert_eq!(config.ingress.batch, 50);
            assert_eq!(
                config.ingress.topics["billing.requests"].targets,
                vec!["billing.*".to_owned()]
            );
            assert_eq!(
                config.ingress.reply_topic.as_deref(),
                Some("tickler.replies")
            );
            jail.set_env("TICKLER_INGRESS", "topics=");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("TICKLER_INGRESS"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn ingress_topics_are_checked_and_reserved() {
        let mut config = Config::default();
        config.ingress.topics.insert(
            "tickler.requests".to_owned(),
            IngressTopic {
                targets: vec!["orders.*".to_owned()],
            },
        );
        config.ingress.reply_topic = Some("tickler.replies".to_owned());
        config.validate().unwrap();
        assert!(config.topic_reserved("tickler.requests").is_some());
        assert!(config.topic_reserved("tickler.replies").is_some());
        assert!(config.topic_reserved("orders.eu").is_none());

        let refused = |change: &dyn Fn(&mut Config), field: &str| {
            let mut bad = config.clone();
            change(&mut bad);
            let err = bad.validate().expect_err(field).to_string();
            assert!(err.contains(field), "{field}: {err}");
        };
        refused(
            &|c| {
                c.ingress
                    .topics
                    .get_mut("tickler.requests")
                    .unwrap()
                    .targets = Vec::new();
            },
            "ingress.topics",
        );
        refused(
            &|c| {
                c.ingress
                    .topics
                    .get_mut("tickler.requests")
                    .unwrap()
                    .targets = vec!["a b".to_owned()];
            },
            "ingress.topics",
        );
        refused(
            &|c| {
                c.ingress.topics.insert(
                    "tickler.results".to_owned(),
                    IngressTopic {
                        targets: vec!["*".to_owned()],
                    },
                );
            },
            "ingress.topics",
        );
        refused(
            &|c| c.ingress.reply_topic = Some("tickler.requests".to_owned()),
            "ingress.reply_topic",
        );
        refused(
            &|c| c.ingress.group = c.results_group.clone(),
            "ingress.group",
        );
        refused(&|c| c.ingress.batch = 0, "ingress.batch");
        refused(
            &|c| {
                c.ingress.topics.insert(
                    "r".repeat(INGRESS_TOPIC_MAX + 1),
                    IngressTopic {
                        targets: vec!["*".to_owned()],
                    },
                );
            },
            "ingress.topics",
        );
    }
}

//! Configuration: defaults, then an optional TOML file, then `TICKLER_*`
//! environment variables (the last word wins). The only module that reads
//! the environment or configuration files. Validated once at start-up.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Format, Serialized, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

use crate::job;
use crate::policy::{Policy, PolicyOverrides};
use crate::topic_pattern;

/// Every setting, with its default, by section: `[mysql]`, `[redis]`,
/// `[kafka]`, `[api]`, `[jobs]`, `[cluster]`, `[loader]`, `[schedules]`,
/// `[dispatcher]`, `[reconciler]`, `[results]`, `[gauges]`, `[notify]`,
/// `[ingress]` and `[topics."…"]`. Durations carry their unit in the name so
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

/// `[mysql]`: mySQL, the source of truth: where it is, the pool, and how `tickler migrate` installs the schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MysqlSettings {
    /// `mysql://user:password@host:port/database` — the source of truth.
    pub url: String,
    /// Connections in the MySQL pool.
    pub pool_size: u32,
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
}

/// `[redis]`: redis, the near-term index: where it is, the key prefix, TLS.
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
    /// when `redis_url` lists several comma-separated seed URLs).
    pub cluster: bool,
    /// With `rediss://`: PEM file of the CA that signed Redis's
    /// certificate (the system's roots otherwise)...
    pub tls_ca: Option<String>,
    /// ...and the client certificate and key, when Redis asks for one.
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

/// `[kafka]`: kafka: the brokers, client options, the producer's timings, and the topic checks.
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
}

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

/// `[cluster]`: many instances: the shards a new deployment starts with, and when a silent instance is dead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterSettings {
    /// Number of logical shards (one Redis ZSET each) a new deployment
    /// starts with. After the first start the count is the deployment's,
    /// kept in MySQL (`shard_leases`); raise it with `tickler shards resize`.
    pub shards: u32,
    /// An instance whose heartbeat (on the database's clock) is older than
    /// this is dead for everyone: its shards are taken over and the jobs its
    /// dispatcher held are produced again by the others. It beats every
    /// fifth of this.
    pub instance_ttl_ms: u64,
}

/// `[loader]`: the loader: the window of jobs kept in Redis, and its passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderSettings {
    /// Jobs due within this much of now are kept in Redis; later ones only
    /// in MySQL.
    pub window_ms: u64,
    /// How often the loader looks for jobs entering the window.
    pub interval_ms: u64,
    /// Rows the loader reads per query.
    pub batch: u32,
}

/// `[schedules]`: recurring schedules: how far ahead their occurrences are created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesSettings {
    /// Occurrences of a schedule are created as jobs this far ahead (and
    /// always the next one, however far).
    pub lookahead_ms: u64,
    /// How often the loader looks for schedules that need their next
    /// occurrences created.
    pub interval_ms: u64,
}

/// `[dispatcher]`: the dispatcher: batches, the claim lease, and its timings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DispatcherSettings {
    /// Most jobs one dispatcher claims per shard per pass.
    pub batch: u32,
    /// A claim (in Redis and in MySQL) expires after this long. Its records
    /// are handed to the producer only while they can land or be given up
    /// before it ends, so past it the claim is read back and, if nothing of
    /// it landed, produced again: a dispatcher that died or paused
    /// mid-batch costs its jobs this much, a pass and the read back.
    pub claim_lease_ms: u64,
    /// Longest the dispatcher sleeps when nothing is due, so that jobs
    /// indexed by another instance are noticed.
    pub idle_ms: u64,
    /// A dispatcher busy this long without finishing a pass (a call to
    /// MySQL, Redis or Kafka that never returns: a connection a failover
    /// left half-open) gives up: the instance stops in order, so the others
    /// take its shards instead of waiting on a process that beats its
    /// heart and sends nothing.
    pub stall_ms: u64,
    /// How long the dispatcher waits for the broker's acknowledgements of
    /// records sent together before it leaves those of a topic the broker
    /// stopped answering for to settle in the background, so one bad topic
    /// never holds up the others; past it, a broker slow for every topic
    /// holds claiming back.
    pub ack_wait_ms: u64,
    /// The dispatcher claims jobs due within this many milliseconds (in
    /// Redis and in MySQL, by the database's clock) and holds each until its
    /// time, so that claiming costs no lateness. A cancel in this last
    /// stretch answers `in_flight`. 0 claims only what is due.
    pub lookahead_ms: u64,
}

/// `[reconciler]`: the reconciler's passes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcilerSettings {
    /// Time between reconciler passes (expired claims, overdue probe).
    pub interval_ms: u64,
    /// How overdue a pending job must be before the reconciler checks that
    /// Redis holds it.
    pub grace_ms: u64,
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

/// `[gauges]`: the gauges computed from the stores (`tickler_jobs`, overdue, drift, lags).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GaugesSettings {
    /// How often one instance (the lowest live id running the reconciler)
    /// computes the gauges from MySQL: jobs by status and topic, overdue,
    /// drift, results lag.
    pub interval_ms: u64,
    /// How often the jobs are counted by status and topic, the one gauge
    /// whose cost grows with the table (seconds at ten million live jobs);
    /// at least `truth_interval_ms`.
    pub counts_interval_ms: u64,
    /// Most topics the `tickler_jobs` gauge names; the rest are summed
    /// under `topic="_other"`.
    pub topics_max: usize,
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
            dispatcher: DispatcherSettings::default(),
            reconciler: ReconcilerSettings::default(),
            results: ResultsSettings::default(),
            gauges: GaugesSettings::default(),
            notify: NotifySettings::default(),
            ingress: IngressSettings::default(),
            topics: BTreeMap::new(),
            renamed: Vec::new(),
        }
    }
}

impl Default for MysqlSettings {
    fn default() -> Self {
        MysqlSettings {
            url: "mysql://tickler:tickler@127.0.0.1:3306/tickler".to_owned(),
            pool_size: 16,
            history_hand_edits: HandEdits::Keep,
            schema_baseline: SchemaBaseline::Auto,
        }
    }
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

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            addr: "127.0.0.1:8080".to_owned(),
            metrics_addr: None,
            auth: AuthMode::Tokens,
            allow_anonymous: false,
            token_refresh_ms: 5_000,
            rate_requests: 1_000,
            rate_jobs: 50_000,
            tls_cert: None,
            tls_key: None,
            max_connections: 1_024,
            header_timeout_ms: 5_000,
            idle_timeout_ms: 75_000,
            body_timeout_ms: 30_000,
        }
    }
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

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            shards: 16,
            instance_ttl_ms: 5_000,
        }
    }
}

impl Default for LoaderSettings {
    fn default() -> Self {
        LoaderSettings {
            window_ms: 600_000,
            interval_ms: 1_000,
            batch: 5_000,
        }
    }
}

impl Default for SchedulesSettings {
    fn default() -> Self {
        SchedulesSettings {
            lookahead_ms: 10_000,
            interval_ms: 1_000,
        }
    }
}

impl Default for DispatcherSettings {
    fn default() -> Self {
        DispatcherSettings {
            batch: 500,
            claim_lease_ms: 5_600,
            idle_ms: 1_000,
            stall_ms: 60_000,
            ack_wait_ms: 200,
            lookahead_ms: 20,
        }
    }
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        ReconcilerSettings {
            interval_ms: 1_000,
            grace_ms: 1_000,
        }
    }
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

impl Default for GaugesSettings {
    fn default() -> Self {
        GaugesSettings {
            interval_ms: 15_000,
            counts_interval_ms: 60_000,
            topics_max: 50,
        }
    }
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
    "dispatcher",
    "reconciler",
    "results",
    "gauges",
    "notify",
];

/// The variable that sets the setting at `path`: `TICKLER_` and the path in
/// capitals, its dot an underscore (`loader.window_ms` is
/// `TICKLER_LOADER_WINDOW_MS`).
pub fn env_name(path: &str) -> String {
    format!("TICKLER_{}", path.replace('.', "_").to_ascii_uppercase())
}

/// The key path a variable names (without `TICKLER_`), and whether it is a
/// flat name of before the sections; None for a variable that is not a
/// setting.
fn env_path(name: &str) -> Option<(String, bool)> {
    let name = name.to_ascii_lowercase();
    if let Some(path) = Config::keys()
        .into_iter()
        .find(|path| path.replace('.', "_") == name)
    {
        return Some((path, false));
    }
    RENAMED
        .iter()
        .find(|(old, _)| *old == name)
        .map(|(_, new)| ((*new).to_owned(), true))
}

/// `figment` with the variable `var`, which sets `path`, merged in its
/// form: a list, a map, a table, or a value.
fn env_merge(figment: Figment, var: &str, path: &str) -> Result<Figment, ConfigError> {
    let Ok(text) = std::env::var(var) else {
        return Ok(figment);
    };
    if ENV_LISTS.contains(&path) {
        let list = env_list(&text);
        // Checked here, so that a mistake names the variable.
        if path == "roles" {
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
        return Ok(figment.merge(Serialized::default(path, list)));
    }
    if ENV_MAPS.contains(&path) {
        let map = env_map(&text).map_err(|problem| ConfigError::Invalid {
            field: path.to_owned().into(),
            problem: format!("{var}: {problem}"),
        })?;
        return Ok(figment.merge(Serialized::default(path, map)));
    }
    if ENV_TABLES.contains(&path) {
        let table = format!("{path} = {}", text.trim());
        // Checked on its own first, so a mistake names the variable.
        Figment::from(Toml::string(&table))
            .extract_inner::<figment::value::Value>(path)
            .map_err(|_| ConfigError::Invalid {
                field: path.to_owned().into(),
                problem: format!(
                    "{var}: not an inline TOML table such as {{topics={{\"tickler.requests\"={{targets=[\"orders.*\"]}}}}}}"
                ),
            })?;
        return Ok(figment.merge(Toml::string(&table)));
    }
    Ok(figment.merge(EnvVar {
        var: var.to_owned(),
        path: path.to_owned(),
        text,
    }))
}

/// One variable's value (read as the environment's values are: a number, a
/// boolean, or else a string) at its setting's key path, named by the
/// variable in errors.
struct EnvVar {
    var: String,
    path: String,
    text: String,
}

impl Provider for EnvVar {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named(format!("environment variable {}", self.var))
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        let value: figment::value::Value = match self.text.parse() {
            Ok(value) => value,
            Err(never) => match never {},
        };
        let dict = figment::util::nest(&self.path, value)
            .into_dict()
            .unwrap_or_default();
        Ok(figment::Profile::Default.collect(dict))
    }
}

/// A configuration file whose settings may still be given by their flat
/// names of before the sections: each is moved to its section's key (where
/// the file does not give that key too).
struct FlatNamesMoved(figment::providers::Data<Toml>);

impl Provider for FlatNamesMoved {
    fn metadata(&self) -> figment::Metadata {
        self.0.metadata()
    }

    fn data(
        &self,
    ) -> Result<figment::value::Map<figment::Profile, figment::value::Dict>, figment::Error> {
        use figment::value::{Dict, Value};
        let mut data = self.0.data()?;
        for dict in data.values_mut() {
            for (old, new) in RENAMED {
                let Some(value) = dict.remove(*old) else {
                    continue;
                };
                let Some((section, key)) = new.split_once('.') else {
                    continue;
                };
                let entry = dict
                    .entry(section.to_owned())
                    .or_insert_with(|| Value::from(Dict::new()));
                if let Value::Dict(_, section) = entry {
                    section.entry(key.to_owned()).or_insert(value);
                }
            }
        }
        Ok(data)
    }
}

/// List settings, given in the environment as `a,b,c` (or `[a, b]`).
const ENV_LISTS: &[&str] = &["roles", "jobs.topics_allowed"];
/// Map settings of strings, given in the environment as an inline TOML
/// table whose keys may be dotted without quotes, as librdkafka's are:
/// `{security.protocol="SSL", ssl.ca.location="/etc/ca.pem"}`.
const ENV_MAPS: &[&str] = &["kafka.options"];

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
    /// variables; validated. The flat names of before the sections are
    /// read as their new ones, and listed in [`Config::renamed`] (a name
    /// given both ways takes the new one's value).
    ///
    /// Long because it is the one reader of the environment: scalars,
    /// lists, maps and tables each have their form there.
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
        // deployment that raised `kafka_message_timeout_ms` or
        // `doubt_margin_ms` (or the lookahead) gets the least lease that
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
        if !(1..=10_000).contains(&self.gauges.topics_max) {
            return Err(invalid("gauges.topics_max", "must be between 1 and 10000"));
        }
        if let Err(problem) = self.policy_default().validate() {
            return Err(ConfigError::Invalid {
                field: "jobs (expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms)".into(),
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
    /// in URLs, and `kafka_options` whose name says password or secret.
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
        shown.notify.webhook_url = shown.notify.webhook_url.as_deref().map(url_masked);
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

    /// The result policy of jobs that set none themselves.
    pub fn policy_default(&self) -> Policy {
        Policy {
            expects_result: self.jobs.expects_result,
            max_attempts: self.jobs.max_attempts,
            backoff_base_ms: self.jobs.backoff_base_ms,
            backoff_cap_ms: self.jobs.backoff_cap_ms,
            ack_timeout_ms: self.jobs.ack_timeout_ms,
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
            None => self.jobs.dead_letter_topic.as_deref(),
        };
        chosen.filter(|t| !t.is_empty())
    }

    /// Why jobs may not be created for `topic`, if they may not: tickler's
    /// own topics (results, dead letters), Kafka's internal ones (`__*`),
    /// and anything outside `topics_allowed`. A job on the results topic
    /// would be read as a report about someone else's job.
    pub fn topic_reserved(&self, topic: &str) -> Option<String> {
        if topic == self.results.topic {
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
        if self.ingress.topics.contains_key(topic) {
            return Some(format!(
                "topic {topic:?} is a request topic of tickler's ingress"
            ));
        }
        if self.ingress.reply_topic.as_deref() == Some(topic) {
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
                "topic {topic:?} is outside topics_allowed ({})",
                self.jobs.topics_allowed.join(", ")
            ));
        }
        None
    }

    /// The shortest `claim_lease_ms` that leaves a claim time to be held
    /// until its job is due (`dispatch_lookahead_ms`), then half a second
    /// to be handed to the producer, whose record then lands or is given up
    /// (`kafka_message_timeout_ms`) `doubt_margin_ms` before the lease ends.
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
mod tests {
    use super::*;

    #[test]
    fn the_doubts_timing_is_tickler_s_own_and_leaves_time_to_send() {
        let mut config = Config::default();
        config
            .kafka
            .options
            .insert("message.timeout.ms".to_owned(), "60000".to_owned());
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("kafka.message_timeout_ms"), "{err}");
        let mut config = Config::default();
        config.kafka.doubt_margin_ms = 30_000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("claim_lease_ms"), "{err}");
        let mut config = Config::default();
        config.kafka.doubt_margin_ms = 30_000;
        config.dispatcher.claim_lease_ms = 41_000;
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
            config.kafka.options.insert(key.to_owned(), "1".to_owned());
            let err = config.validate().unwrap_err().to_string();
            assert!(
                err.contains("kafka.options") && err.contains(&format!("may not set {key}:")),
                "{key}: {err}"
            );
        }
        let mut config = Config::default();
        config
            .kafka
            .options
            .insert("security.protocol".to_owned(), "SSL".to_owned());
        config
            .kafka
            .options
            .insert("compression.type".to_owned(), "zstd".to_owned());
        assert!(config.validate().is_ok(), "others pass through");
    }

    #[test]
    fn the_printed_configuration_masks_every_secret() {
        let mut config = Config::default();
        config.mysql.url = "mysql://tickler:hunter2@db:3306/tickler?ssl-mode=required".to_owned();
        config.redis.url = "redis://:pw@r1:6379,redis://r2:6379".to_owned();
        config.notify.webhook_url = Some("https://hooks.example/x?token=abc&x=1".to_owned());
        config
            .kafka
            .options
            .insert("sasl.password".to_owned(), "s3cret".to_owned());
        config
            .kafka
            .options
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

        let mut sentinel = Config::default();
        sentinel.redis.url =
            "redis+sentinel://app:pw1@s1:26379,s2:26379/m?sentinel_password=pw2".to_owned();
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
            assert_eq!(config.dispatcher.claim_lease_ms, 20 + 10_000 + 2_000 + 500);
            jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "6000");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("claim_lease_ms"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn a_sentinel_redis_url_is_taken_and_tls_files_need_a_tls_scheme() {
        let sentinel = |url: &str| {
            let mut config = Config::default();
            config.redis.url = url.to_owned();
            config
        };
        sentinel("redis+sentinel://s1:26379,s2:26379/m")
            .validate()
            .unwrap();
        let mut tls = sentinel("rediss+sentinel://s1/m");
        tls.redis.tls_ca = Some("/ca.pem".to_owned());
        tls.validate().unwrap();
        let mut plain = sentinel("redis+sentinel://s1/m");
        plain.redis.tls_ca = Some("/ca.pem".to_owned());
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
        assert!(config.mysql.url.contains("127.0.0.1:3306"));
        assert_eq!(config.kafka.brokers, "127.0.0.1:9092");
        assert_eq!(config.cluster.shards, 16);
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
            assert_eq!(config.cluster.shards, 8);
            assert_eq!(config.redis.prefix, "from-env");
            assert_eq!(config.roles, vec![Role::Api]);
            Ok(())
        });
    }

    #[test]
    fn flat_names_of_before_the_sections_are_read_as_their_new_ones_and_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "tickler.toml",
                "window_ms = 300000\nclaim_lease_ms = 9000\n[loader]\nbatch = 700\n[kafka]\nbrokers = \"k:9092\"\n",
            )?;
            jail.set_env("TICKLER_SHARDS", "8");
            jail.set_env("TICKLER_DISPATCH_BATCH", "100");
            // Both names: the new one wins.
            jail.set_env("TICKLER_DISPATCHER_BATCH", "200");
            jail.set_env("TICKLER_LOADER_INTERVAL_MS", "500");
            // Kept for good (the contract names it): read, no warning.
            jail.set_env("TICKLER_HTTP_ADDR", "127.0.0.1:9999");
            let config = Config::load(Some(Path::new("tickler.toml"))).unwrap();
            assert_eq!(config.api.addr, "127.0.0.1:9999");
            assert_eq!(config.loader.window_ms, 300_000);
            assert_eq!(config.dispatcher.claim_lease_ms, 9_000);
            assert_eq!(config.loader.batch, 700);
            assert_eq!(config.kafka.brokers, "k:9092");
            assert_eq!(config.cluster.shards, 8);
            assert_eq!(config.dispatcher.batch, 200);
            assert_eq!(config.loader.interval_ms, 500);
            let renamed: Vec<(&str, &str)> = config
                .renamed
                .iter()
                .map(|(old, new)| (old.as_str(), new.as_str()))
                .collect();
            for pair in [
                ("window_ms", "loader.window_ms"),
                ("claim_lease_ms", "dispatcher.claim_lease_ms"),
                ("TICKLER_SHARDS", "TICKLER_CLUSTER_SHARDS"),
                ("TICKLER_DISPATCH_BATCH", "TICKLER_DISPATCHER_BATCH"),
            ] {
                assert!(renamed.contains(&pair), "{pair:?} in {renamed:?}");
            }
            // A name already new, and one that is the same either way, are
            // no renaming.
            assert_eq!(renamed.len(), 4, "{renamed:?}");
            // What `tickler config` prints is the new form.
            let shown = config.masked();
            assert_eq!(shown["loader"]["window_ms"], 300_000);
            assert!(shown.get("window_ms").is_none(), "{shown}");
            Ok(())
        });
        // Every flat name maps to a setting that exists, and no two share one.
        let keys = Config::keys();
        let mut seen = std::collections::HashSet::new();
        for (old, new) in RENAMED {
            assert!(keys.iter().any(|k| k == new), "{old} -> {new}");
            assert!(seen.insert(*new), "{new} twice");
            assert!(!keys.iter().any(|k| k == old), "{old} is still a key");
        }
    }

    #[test]
    fn bad_values_are_named_in_the_error() {
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_CLUSTER_SHARDS", "0");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("shards"), "{err}");
            jail.set_env("TICKLER_CLUSTER_SHARDS", "many");
            let err = Config::load(None).unwrap_err().to_string();
            assert!(
                err.contains("cluster.shards") && err.contains("TICKLER_CLUSTER_SHARDS"),
                "{err}"
            );
            jail.set_env("TICKLER_CLUSTER_SHARDS", "8");
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
        let mut config = Config::default();
        config.jobs.retention_days = 40_000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("retention_days"), "{err}");
        let mut config = Config::default();
        config.dispatcher.lookahead_ms = 5_000;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("dispatcher.lookahead_ms"), "{err}");
        // Absurd durations are refused at start-up, not met as an overflow
        // in a role (a lease added to an instant, a window to a time).
        figment::Jail::expect_with(|jail| {
            jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", u64::MAX.to_string());
            let err = Config::load(None).unwrap_err().to_string();
            assert!(
                err.contains("claim_lease_ms must be at most 315360000000"),
                "{err}"
            );
            jail.set_env("TICKLER_DISPATCHER_CLAIM_LEASE_MS", "30000");
            jail.set_env(
                "TICKLER_LOADER_WINDOW_MS",
                (DURATION_MAX_MS + 1).to_string(),
            );
            let err = Config::load(None).unwrap_err().to_string();
            assert!(err.contains("window_ms must be at most"), "{err}");
            jail.set_env("TICKLER_LOADER_WINDOW_MS", DURATION_MAX_MS.to_string());
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
        let mut config = Config::default();
        config.jobs.dead_letter_topic = Some("dead".to_owned());
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
        config.jobs.topics_allowed = vec!["orders*".to_owned()];
        assert!(config.topic_reserved("orders.eu").is_none());
        assert!(config.topic_reserved("payments").is_some());
        config.jobs.topics_allowed = vec!["bad pattern".to_owned()];
        assert!(config.validate().is_err());
    }

    #[test]
    fn anonymous_access_stays_on_loopback_unless_allowed_on_purpose() {
        let mut config = Config::default();
        config.api.auth = AuthMode::None;
        config.api.addr = "0.0.0.0:8080".to_owned();
        let err = config.validate().unwrap_err().to_string();
        assert!(
            err.contains("auth") && err.contains("allow_anonymous"),
            "{err}"
        );
        config.api.allow_anonymous = true;
        config.validate().unwrap();
        config.api.allow_anonymous = false;
        config.api.addr = "127.0.0.1:8080".to_owned();
        config.validate().unwrap();
        config.api.addr = "[::1]:8080".to_owned();
        config.validate().unwrap();
        config.api.addr = "0.0.0.0:8080".to_owned();
        config.api.auth = AuthMode::Tokens;
        config.validate().unwrap();
        config.roles = vec![Role::Dispatcher];
        config.api.auth = AuthMode::None;
        config.validate().unwrap();
    }

    #[test]
    fn tls_settings_come_in_working_sets() {
        let mut config = Config::default();
        config.api.tls_cert = Some("cert.pem".to_owned());
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("api.tls_key"));
        let mut config = Config::default();
        config.redis.tls_ca = Some("ca.pem".to_owned());
        assert!(config
            .validate()
            .unwrap_err()
            .to_string()
            .contains("rediss://"));
        let mut config = Config::default();
        config.redis.url = "rediss://127.0.0.1:6380".to_owned();
        config.redis.tls_ca = Some("ca.pem".to_owned());
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
            &|c| c.ingress.group = c.results.group.clone(),
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

//! The sections of the configuration, one struct each, with their defaults
//! beside them; `[ingress]` and `[topics."…"]`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{HandEdits, SchemaBaseline, TopicCheck};
use crate::domain::policy::{Policy, PolicyOverrides};

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
    /// A deployment-wide pace, in jobs per second, that jobs with a
    /// flexible window (`window_ms`) are smoothed under: every produced job
    /// counts against it, and a windowed job that would exceed it waits, in
    /// order of its window's end, at most until that end. Jobs without a
    /// window are never held by it. None (the default) smooths nothing.
    pub smooth_per_second: Option<u32>,
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
    /// Time between raises of the topics' due-time watermarks.
    pub watermark_interval_ms: u64,
    /// How far behind the database's clock a topic with nothing
    /// outstanding puts its watermark: room for a create whose `delay_ms`
    /// was counted and that is still committing.
    pub watermark_settle_ms: u64,
    /// When set, each topic's watermark is also produced to this Kafka
    /// topic whenever it rises: the target topic, the instant, and each of
    /// its partitions' end offset.
    pub watermark_topic: Option<String>,
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
    /// How often the bursts ahead are found again (a range read of the
    /// next `burst_horizon_ms`' jobs); at least `interval_ms`.
    pub counts_interval_ms: u64,
    /// How long each computation of the gauges goes on with the count of
    /// jobs by status and topic (`tickler_jobs`), which reads every live
    /// job's index entry: a table larger than that reads takes several
    /// passes, each bounded (`tickler_jobs_count_age_seconds`).
    pub counts_budget_ms: u64,
    /// Most topics the `tickler_jobs` gauge names; the rest are summed
    /// under `topic="_other"`.
    pub topics_max: usize,
    /// How far ahead the busiest minute of each topic is looked for
    /// (`tickler_burst_ahead_*`, the TicklerBurstAhead alert).
    pub burst_horizon_ms: u64,
    /// What a topic without a pace can take, in jobs a second: what your
    /// deployment drains a burst at (`tickler bench`'s burst stage measures
    /// it).
    pub burst_drain_per_second: u32,
}

/// `[tracing]`: OpenTelemetry traces over OTLP (off unless an endpoint is
/// set).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracingSettings {
    /// The OTLP/HTTP endpoint (`http://otel-collector:4318`): spans go to
    /// its `/v1/traces`, as JSON. None: no traces.
    pub otlp_endpoint: Option<String>,
    /// The spans' `service.name`.
    pub service_name: String,
    /// How often the spans gathered are sent.
    pub export_interval_ms: u64,
}

impl Default for TracingSettings {
    fn default() -> Self {
        TracingSettings {
            otlp_endpoint: None,
            service_name: "tickler".to_owned(),
            export_interval_ms: 2_000,
        }
    }
}

/// `[encryption]`: jobs' payloads and headers encrypted at rest
/// (docs/security.md#encryption-at-rest).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EncryptionSettings {
    /// The key new rows are sealed under; unset: encryption is off (rows
    /// sealed before still open with their key, if it is in `keys`).
    pub active_key: Option<String>,
    /// Every key a row may be sealed under, by id: where to read it,
    /// `file:PATH` or `env:VARIABLE` (32 bytes, or their base64). The key
    /// itself is never a setting.
    pub keys: BTreeMap<String, String>,
}

/// `[compression]`: jobs' payloads compressed at rest
/// (docs/data.md#payload-compression).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionSettings {
    /// `zstd`: new payloads are stored compressed when that is smaller,
    /// with the newest dictionary (`tickler compression train`) once it is
    /// ripe; `off`: as given. Compressed rows are read either way.
    pub payloads: PayloadCompression,
    /// zstd's level, 1 (fastest) to 19.
    pub level: i32,
    /// How long after an instance learns of a new dictionary it writes
    /// with it: long enough for every other instance to have loaded it.
    pub dict_delay_ms: u64,
}

impl Default for CompressionSettings {
    fn default() -> Self {
        CompressionSettings {
            payloads: PayloadCompression::Off,
            level: 3,
            dict_delay_ms: 20_000,
        }
    }
}

impl CompressionSettings {
    /// The payload codec these settings describe.
    pub fn codec(&self) -> crate::domain::compression::Codec {
        crate::domain::compression::Codec::new(
            self.payloads == PayloadCompression::Zstd,
            self.level,
            std::time::Duration::from_millis(self.dict_delay_ms),
        )
    }
}

/// The `compression.payloads` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadCompression {
    Off,
    Zstd,
}

/// `[audit]`: the audit log of control-plane changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Rows of the audit log older than this many days are purged (by the
    /// reconciler role); 0 keeps them.
    pub retention_days: u32,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            retention_days: 400,
        }
    }
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
    /// What this topic's jobs are grouped by for fair dispatch: `key:SEP`
    /// (the key up to the first SEP) or `header:NAME` (that header's value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
    /// Most jobs of one group dispatched per second, across every
    /// instance; without it the groups only share `max_per_second` fairly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_max_per_second: Option<u32>,
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
            smooth_per_second: None,
        }
    }
}

impl Default for ReconcilerSettings {
    fn default() -> Self {
        ReconcilerSettings {
            interval_ms: 1_000,
            grace_ms: 1_000,
            watermark_interval_ms: 1_000,
            watermark_settle_ms: 2_000,
            watermark_topic: None,
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
            counts_budget_ms: 500,
            topics_max: 50,
            burst_horizon_ms: 6 * 3_600_000,
            burst_drain_per_second: 10_000,
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

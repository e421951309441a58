//! Kafka, in one room: the only code that speaks to it through librdkafka
//! (`rdkafka`). Client settings, topic administration, the cached list of
//! the broker's topics; the one producer ([`Producer`]) and record builder
//! ([`Record`]) every record is sent with; the group consumer
//! ([`GroupConsumer`]) of the results role and the ingress; reading topics
//! back ([`readback`]), reading produced records back at their position
//! ([`verify`]), where the consumer groups reading tickler's topics stand
//! ([`groups`]) and the tests' and demo's readers ([`tail`]).

mod consumer;
pub mod groups;
mod producer;
pub mod readback;
mod record;
pub mod tail;
pub mod verify;

pub use consumer::{GroupConsumer, Received};
pub use producer::{fault_of, Delivery, Fault, Landed, Producer, Tallied};
pub use rdkafka::error::KafkaError;
pub use record::Record;

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::Producer as _;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

/// The settings every tickler Kafka client shares.
pub fn client_config(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("client.id", "tickler")
        // Quiet librdkafka's own logging; errors reach us through results.
        .set("log_level", "3");
    config
}

/// `session.timeout.ms` of tickler's consumer groups: a member that died
/// is replaced within seconds, not the default 45 (its partitions wait for
/// it until then).
pub const GROUP_SESSION_TIMEOUT_MS: u32 = 6_000;

/// The settings of a consumer in `group` that commits by hand (after what
/// it read is in MySQL) and, on a group's first reading, starts from the
/// earliest record; `options` (the `kafka.options` setting) are applied
/// last.
fn group_config(
    brokers: &str,
    options: &BTreeMap<String, String>,
    group: &str,
    fetch_wait_ms: u32,
) -> ClientConfig {
    let mut client = client_config(brokers);
    client
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.wait.max.ms", fetch_wait_ms.to_string())
        .set("session.timeout.ms", GROUP_SESSION_TIMEOUT_MS.to_string())
        .set("heartbeat.interval.ms", "1000");
    for (key, value) in options {
        client.set(key, value);
    }
    client
}

/// The settings of tickler's one [`Producer`]: idempotent, `acks=all`;
/// `options` (the `kafka.options` setting) are applied last.
fn producer_config(
    brokers: &str,
    options: &BTreeMap<String, String>,
    linger_ms: u64,
    message_timeout_ms: u64,
) -> ClientConfig {
    let mut client = client_config(brokers);
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger_ms.to_string())
        .set("message.timeout.ms", message_timeout_ms.to_string());
    for (key, value) in options {
        client.set(key, value);
    }
    client
}

/// Creates `topic` with `partitions` partitions unless it exists already.
/// Brokers such as tansu do not create topics on first use.
pub async fn topic_ensure(brokers: &str, topic: &str, partitions: i32) -> Result<(), KafkaError> {
    topic_ensure_with(brokers, &BTreeMap::new(), topic, partitions).await
}

/// `topic_ensure` through a client with `options` (`kafka.options`: TLS,
/// SASL...).
pub async fn topic_ensure_with(
    brokers: &str,
    options: &BTreeMap<String, String>,
    topic: &str,
    partitions: i32,
) -> Result<(), KafkaError> {
    let mut config = client_config(brokers);
    for (key, value) in options {
        config.set(key, value);
    }
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let new_topic = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = admin.create_topics([&new_topic], &options).await?;
    for result in results {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => return Err(KafkaError::AdminOp(code)),
        }
    }
    Ok(())
}

/// The broker refused tickler's credentials or certificates: start-up
/// stops, naming what to check.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {brokers}: {reason} (check kafka.options: security.protocol, ssl.ca.location, ssl.certificate.location, ssl.key.location, sasl.*)")]
pub struct ProbeError {
    pub brokers: String,
    pub reason: String,
}

/// Remembers what librdkafka reports of its connections.
#[derive(Default)]
struct ProbeContext {
    errors: std::sync::Mutex<Vec<String>>,
}

impl rdkafka::ClientContext for ProbeContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Ok(mut errors) = self.errors.lock() {
            errors.push(format!("{error}: {reason}"));
        }
    }
}

impl rdkafka::producer::ProducerContext for ProbeContext {
    type DeliveryOpaque = ();

    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

/// Asks the brokers for metadata once, through a client with `options`,
/// and returns the ids of the brokers it names (none when they did not
/// answer). A TLS or authentication failure is an error; a broker that
/// does not answer only a warning — tickler starts, and keeps jobs,
/// without Kafka.
pub async fn probe(
    brokers: &str,
    options: &BTreeMap<String, String>,
) -> Result<Vec<i32>, ProbeError> {
    let mut config = client_config(brokers);
    for (key, value) in options {
        config.set(key, value);
    }
    let failed = |reason: String| ProbeError {
        brokers: brokers.to_owned(),
        reason,
    };
    let client: rdkafka::producer::BaseProducer<ProbeContext> = config
        .create_with_context(ProbeContext::default())
        .map_err(|err| failed(err.to_string()))?;
    let fetched = tokio::task::spawn_blocking(move || {
        let fetched = client
            .client()
            .fetch_metadata(None, Duration::from_secs(5))
            .map(|metadata| {
                metadata
                    .brokers()
                    .iter()
                    .map(|b| b.id())
                    .collect::<Vec<i32>>()
            });
        // Serves the queued error callbacks into the context.
        client.poll(Duration::from_millis(200));
        let errors = client
            .context()
            .errors
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        (fetched, errors)
    })
    .await;
    let Ok((fetched, errors)) = fetched else {
        return Ok(Vec::new());
    };
    let err = match fetched {
        Ok(ids) => return Ok(ids),
        Err(err) => err,
    };
    let refused = errors.iter().find(|e| {
        let e = e.to_ascii_lowercase();
        ["ssl", "tls", "certificate", "sasl", "authenticat"]
            .iter()
            .any(|word| e.contains(word))
    });
    if let Some(reason) = refused {
        return Err(failed(reason.clone()));
    }
    tracing::warn!(brokers, error = %err, "kafka does not answer yet; starting all the same");
    Ok(Vec::new())
}

/// The settings of a client that reads partitions it assigns itself,
/// without joining a group or committing: `options` applied, and a group id
/// of its own starting `group_prefix` (librdkafka wants one).
pub fn reader_config(
    brokers: &str,
    options: &BTreeMap<String, String>,
    group_prefix: &str,
) -> rdkafka::ClientConfig {
    let mut client = client_config(brokers);
    for (key, value) in options {
        client.set(key, value);
    }
    client
        .set(
            "group.id",
            format!("{group_prefix}-{}", rand::random::<u64>()),
        )
        .set("enable.auto.commit", "false");
    client
}

/// Whether a topic exists, as far as the cached metadata knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicState {
    Exists,
    /// Absent from metadata fetched within the last refresh period.
    Missing,
    /// No recent metadata (broker unreachable, or not fetched yet).
    Unknown,
}

/// The topics the broker has, from cached metadata, shared by the API's
/// pre-flight check at create time and the dispatcher (which must not wait
/// ten seconds on a record for a topic that does not exist). Refreshed every
/// `refresh` by [`Topics::run`], and on demand when asked about a topic it
/// has not seen (at most once per [`TOPICS_REFRESH_MIN`]).
#[derive(Clone)]
pub struct Topics {
    inner: std::sync::Arc<TopicsInner>,
}

struct TopicsInner {
    brokers: String,
    options: BTreeMap<String, String>,
    refresh: Duration,
    known: std::sync::RwLock<Known>,
    /// One fetch at a time (waiters reuse its result), through one client
    /// made on first use.
    fetching: tokio::sync::Mutex<Option<std::sync::Arc<rdkafka::producer::BaseProducer>>>,
}

#[derive(Default)]
struct Known {
    topics: std::collections::HashSet<String>,
    /// When the last fetch that succeeded was asked.
    fetched_at: Option<std::time::Instant>,
    /// When the last fetch was tried.
    tried_at: Option<std::time::Instant>,
}

/// Least time between two fetches of metadata.
pub const TOPICS_REFRESH_MIN: Duration = Duration::from_secs(1);
/// How long one metadata fetch may take.
const TOPICS_FETCH_TIMEOUT: Duration = Duration::from_secs(5);

impl Topics {
    pub fn new(brokers: &str, options: &BTreeMap<String, String>, refresh: Duration) -> Topics {
        Topics {
            inner: std::sync::Arc::new(TopicsInner {
                brokers: brokers.to_owned(),
                options: options.clone(),
                refresh,
                known: std::sync::RwLock::new(Known::default()),
                fetching: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// How often its metadata is refreshed (`kafka.topic_refresh_ms`).
    pub fn refresh_every(&self) -> Duration {
        self.inner.refresh
    }

    fn known(&self) -> std::sync::RwLockReadGuard<'_, Known> {
        self.inner
            .known
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn known_mut(&self) -> std::sync::RwLockWriteGuard<'_, Known> {
        self.inner
            .known
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the cache says now, without IO.
    pub fn state(&self, topic: &str) -> TopicState {
        let known = self.known();
        if known.topics.contains(topic) {
            return TopicState::Exists;
        }
        match known.fetched_at {
            Some(at) if at.elapsed() <= self.inner.refresh * 2 => TopicState::Missing,
            _ => TopicState::Unknown,
        }
    }

    /// Whether the last successful fetch is younger than `age`.
    pub fn fetched_within(&self, age: Duration) -> bool {
        self.known().fetched_at.is_some_and(|at| at.elapsed() < age)
    }

    /// Whether the last successful fetch was made after `instant`: its
    /// answer can speak of a topic created before then.
    pub fn fetched_after(&self, instant: std::time::Instant) -> bool {
        self.known().fetched_at.is_some_and(|at| at > instant)
    }

    /// What the broker says, refreshing the cache first when it does not
    /// know `topic` and was not refreshed within [`TOPICS_REFRESH_MIN`] (so
    /// a topic created a moment ago is found).
    pub async fn check(&self, topic: &str) -> TopicState {
        match self.state(topic) {
            TopicState::Exists => TopicState::Exists,
            _ => {
                self.refresh_if_older(TOPICS_REFRESH_MIN).await;
                self.state(topic)
            }
        }
    }

    /// The pre-flight check of the `kafka.topic_check` setting on a job's topic,
    /// months before the job is due rather than when it is: false when the
    /// broker says it has no such topic and `check` is `reject`; with `warn`
    /// the job is let through, logged and counted. When the broker cannot be
    /// asked, the job is let through: creating never depends on the broker
    /// being up, and the dispatcher deals with a topic that turns out
    /// missing.
    pub async fn preflight(&self, check: crate::config::TopicCheck, topic: &str) -> bool {
        use crate::config::TopicCheck;
        if check == TopicCheck::Off {
            return true;
        }
        match self.check(topic).await {
            TopicState::Exists => true,
            TopicState::Unknown => {
                tracing::debug!(topic, "topic not checked: no recent kafka metadata");
                true
            }
            TopicState::Missing if check == TopicCheck::Reject => false,
            TopicState::Missing => {
                crate::metrics::job_unknown_topic(topic);
                true
            }
        }
    }

    /// Forgets `topic` after the broker refused a record for not having it.
    pub fn forget(&self, topic: &str) {
        self.known_mut().topics.remove(topic);
    }

    /// Fetches metadata unless a fetch was tried less than `age` ago.
    pub async fn refresh_if_older(&self, age: Duration) {
        let fresh = |known: &Known| known.tried_at.is_some_and(|at| at.elapsed() < age);
        if fresh(&self.known()) {
            return;
        }
        let mut client = self.inner.fetching.lock().await;
        if fresh(&self.known()) {
            return; // fetched while this one waited
        }
        if client.is_none() {
            let mut config = client_config(&self.inner.brokers);
            for (key, value) in &self.inner.options {
                config.set(key, value);
            }
            match config.create() {
                Ok(created) => *client = Some(std::sync::Arc::new(created)),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot create a kafka metadata client");
                    self.known_mut().tried_at = Some(std::time::Instant::now());
                    return;
                }
            }
        }
        let Some(metadata_client) = client.clone() else {
            return;
        };
        // The answer is at least as new as the request: `fetched_at` is when
        // it was asked, so "fetched after" never credits a fetch that began
        // before the instant in question.
        let asked = std::time::Instant::now();
        let fetched = tokio::task::spawn_blocking(move || topics_fetch(&metadata_client)).await;
        let mut known = self.known_mut();
        known.tried_at = Some(std::time::Instant::now());
        match fetched {
            Ok(Ok(topics)) => {
                known.topics = topics;
                known.fetched_at = Some(asked);
            }
            Ok(Err(err)) => tracing::warn!(error = %err, "cannot fetch kafka topic metadata"),
            Err(err) => tracing::warn!(error = %err, "kafka metadata task failed"),
        }
    }
}

/// Every topic the broker reports without an error (blocking).
fn topics_fetch(
    client: &rdkafka::producer::BaseProducer,
) -> Result<std::collections::HashSet<String>, KafkaError> {
    let metadata = client.client().fetch_metadata(None, TOPICS_FETCH_TIMEOUT)?;
    Ok(metadata
        .topics()
        .iter()
        .filter(|t| t.error().is_none())
        .map(|t| t.name().to_owned())
        .collect())
}

/// Each partition of each of `topics` with its end (high watermark): the
/// offset the next record will take. Every record the broker acknowledged
/// before the call lies before it. A topic the broker lacks has none.
/// One client for them all.
pub async fn partition_ends(
    brokers: &str,
    options: &BTreeMap<String, String>,
    topics: Vec<String>,
) -> Result<BTreeMap<String, Vec<(i32, i64)>>, KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};

    let mut client = client_config(brokers);
    for (key, value) in options {
        client.set(key, value);
    }
    let consumer: BaseConsumer = client.create()?;
    tokio::task::spawn_blocking(move || {
        let timeout = Duration::from_secs(3);
        let mut ends = BTreeMap::new();
        for topic in topics {
            let metadata = consumer.fetch_metadata(Some(&topic), timeout)?;
            let mut partitions = Vec::new();
            for found in metadata.topics().iter().filter(|t| t.error().is_none()) {
                for partition in found.partitions() {
                    let (_, high) = consumer.fetch_watermarks(&topic, partition.id(), timeout)?;
                    partitions.push((partition.id(), high));
                }
            }
            partitions.sort_unstable();
            ends.insert(topic, partitions);
        }
        Ok(ends)
    })
    .await
    .map_err(|_| KafkaError::Canceled)?
}

/// How far a consumer group is behind on a topic: the sum, over the
/// topic's partitions, of the high watermark minus the group's committed
/// offset (the whole partition when it has committed nothing). Reads the
/// group's offsets without joining it.
pub async fn group_lag(
    brokers: &str,
    options: &BTreeMap<String, String>,
    group: &str,
    topic: &str,
) -> Result<i64, KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};

    let mut client = client_config(brokers);
    for (key, value) in options {
        client.set(key, value);
    }
    client
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    let consumer: BaseConsumer = client.create()?;
    let topic = topic.to_owned();
    // One deadline for the whole reading, however many partitions.
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let timeout = move || {
        deadline
            .saturating_duration_since(std::time::Instant::now())
            .max(Duration::from_millis(1))
    };
    tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(Some(&topic), timeout())?;
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut wanted = TopicPartitionList::new();
        for partition in &partitions {
            wanted.add_partition(&topic, *partition);
        }
        let committed = consumer.committed_offsets(wanted, timeout())?;
        let mut lag = 0;
        for partition in partitions {
            let (low, high) = consumer.fetch_watermarks(&topic, partition, timeout())?;
            let at = match committed
                .find_partition(&topic, partition)
                .map(|p| p.offset())
            {
                Some(Offset::Offset(at)) => at,
                _ => low,
            };
            lag += (high - at).max(0);
        }
        Ok(lag)
    })
    .await
    .map_err(|_| KafkaError::Canceled)?
}

/// What the doctor found at a recorded Kafka position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordAt {
    /// A record is there, with this `tickler-job-id` header (None: none).
    Found(Option<String>),
    /// The offset is at or past the partition's end: no record was ever
    /// acknowledged there.
    PastEnd { high: i64 },
    /// The offset is below the partition's start: retention deleted it.
    Expired { low: i64 },
    /// The next record is past it: compaction removed it.
    Compacted,
    /// The partition does not exist.
    NoPartition,
    /// Nothing could be read in time (some brokers answer a fetch that
    /// starts inside a batch with nothing).
    Unverified,
}

/// Reads the record at `offset` of `topic`/`partition`, without a group.
pub async fn record_at(
    brokers: &str,
    options: &BTreeMap<String, String>,
    topic: &str,
    partition: i32,
    offset: i64,
    wait: Duration,
) -> Result<RecordAt, KafkaError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{Offset, TopicPartitionList};

    let consumer: BaseConsumer = reader_config(brokers, options, "tickler-doctor")
        .set("fetch.wait.max.ms", "50")
        .create()?;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(5))?;
        let exists = metadata
            .topics()
            .iter()
            .any(|t| t.partitions().iter().any(|p| p.id() == partition));
        if !exists {
            return Ok(RecordAt::NoPartition);
        }
        let (low, high) = consumer.fetch_watermarks(&topic, partition, Duration::from_secs(5))?;
        if offset >= high {
            return Ok(RecordAt::PastEnd { high });
        }
        if offset < low {
            return Ok(RecordAt::Expired { low });
        }
        let mut assignment = TopicPartitionList::new();
        assignment.add_partition_offset(&topic, partition, Offset::Offset(offset))?;
        consumer.assign(&assignment)?;
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) if message.offset() == offset => {
                    let job_id = header_value(&message, crate::domain::job::HEADER_JOB_ID)
                        .map(|v| String::from_utf8_lossy(v).into_owned());
                    return Ok(RecordAt::Found(job_id));
                }
                Some(Ok(message)) if message.offset() > offset => {
                    return Ok(RecordAt::Compacted);
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => return Err(err),
                None => {}
            }
        }
        Ok(RecordAt::Unverified)
    })
    .await
    .map_err(|_| KafkaError::Canceled)?
}

/// The headers of a record, name and value as bytes, in order. rdkafka's
/// own `Headers::iter` panics on a name that is not UTF-8 (0.39 unwraps
/// it), and Kafka takes any bytes: a producer using another client may
/// write such a name onto a request topic or a job's topic, and reading it
/// must not stop a role.
pub fn headers_of<'a>(
    message: &'a BorrowedMessage<'_>,
) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
    use rdkafka::bindings as rd;
    let mut headers: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is the live message `message` borrows; the
    // headers it returns belong to the message and live as long as it.
    let found = unsafe { rd::rd_kafka_message_headers(message.ptr(), &mut headers) };
    let count =
        if found == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && !headers.is_null() {
            // SAFETY: `headers` is the message's, checked non-null above.
            unsafe { rd::rd_kafka_header_cnt(headers) }
        } else {
            0
        };
    (0..count).filter_map(move |idx| {
        let mut name = std::ptr::null();
        let mut value = std::ptr::null();
        let mut size = 0;
        // SAFETY: `idx` is below the count; librdkafka points `name` at a
        // NUL-terminated copy and `value` at `size` bytes (or null), both
        // owned by the headers, which `message` (borrowed for 'a) owns.
        unsafe {
            let got = rd::rd_kafka_header_get_all(headers, idx, &mut name, &mut value, &mut size);
            if got != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
                return None;
            }
            let name = std::ffi::CStr::from_ptr(name).to_bytes();
            let value =
                (!value.is_null()).then(|| std::slice::from_raw_parts(value.cast::<u8>(), size));
            Some((name, value))
        }
    })
}

/// The value of header `name` of a record (the first, if it repeats);
/// None when absent or null. Never panics, whatever the other headers'
/// names are ([`headers_of`]).
pub fn header_value<'a>(message: &'a BorrowedMessage<'_>, name: &str) -> Option<&'a [u8]> {
    headers_of(message)
        .find(|(n, _)| *n == name.as_bytes())
        .and_then(|(_, value)| value)
}

/// What the brokers say of `replica.lag.time.max.ms`: how long a follower
/// may lag and stay in sync, and so how long after its producer gave it up
/// a record held at the leader may still become visible (when the lagging
/// follower is dropped from the in-sync replicas and the high watermark
/// moves on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaLag {
    /// The longest value any broker answered.
    Answered { brokers: usize, lag_ms: u64 },
    /// One broker: no follower can lag, and nothing needs checking.
    SingleBroker,
    /// The brokers did not answer (not every Kafka-API broker implements
    /// DescribeConfigs), with why.
    Unanswered(String),
}

/// Asks the brokers `ids` (as [`probe`] found them) for their
/// `replica.lag.time.max.ms` (DescribeConfigs), within a few seconds.
pub async fn replica_lag(
    brokers: &str,
    options: &BTreeMap<String, String>,
    ids: &[i32],
) -> ReplicaLag {
    match ids.len() {
        0 => return ReplicaLag::Unanswered("kafka did not answer at start-up".to_owned()),
        1 => return ReplicaLag::SingleBroker,
        _ => {}
    }
    let mut config = client_config(brokers);
    for (key, value) in options {
        config.set(key, value);
    }
    let admin: AdminClient<DefaultClientContext> = match config.create() {
        Ok(admin) => admin,
        Err(err) => return ReplicaLag::Unanswered(err.to_string()),
    };
    let specifiers: Vec<ResourceSpecifier<'_>> = ids
        .iter()
        .map(|id| ResourceSpecifier::Broker(*id))
        .collect();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(5)));
    let answers = match admin.describe_configs(&specifiers, &options).await {
        Ok(answers) => answers,
        Err(err) => return ReplicaLag::Unanswered(err.to_string()),
    };
    let mut lag_ms: Option<u64> = None;
    for answer in answers {
        let resource = match answer {
            Ok(resource) => resource,
            Err(code) => return ReplicaLag::Unanswered(code.to_string()),
        };
        let value = resource
            .get("replica.lag.time.max.ms")
            .and_then(|entry| entry.value.as_deref())
            .and_then(|value| value.parse::<u64>().ok());
        match value {
            Some(value) => lag_ms = Some(lag_ms.unwrap_or(0).max(value)),
            None => {
                return ReplicaLag::Unanswered(
                    "a broker did not name replica.lag.time.max.ms".to_owned(),
                )
            }
        }
    }
    match lag_ms {
        Some(lag_ms) => ReplicaLag::Answered {
            brokers: ids.len(),
            lag_ms,
        },
        None => ReplicaLag::Unanswered("no broker answered".to_owned()),
    }
}

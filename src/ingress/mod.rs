//! Kafka ingress: jobs scheduled by producing to a request topic, with the
//! API's rules and guarantees behind them (docs/api.md, "Scheduling through
//! Kafka").
//!
//! Each pass takes the records waiting on the request topics (up to
//! `batch`), writes what they ask for to MySQL — the creates of each
//! partition in one multi-row insert, the partitions side by side — makes
//! Redis follow, answers each on the reply topic, and only then commits the
//! offsets. Crash anywhere before the
//! commit: the records are read again, and their (topic, key) finds the
//! jobs they made: answered `existing` (or `cancelled` again), never made
//! twice. A request that cannot be written is answered with its error and
//! its offset committed: a bad record never stalls its partition.
//!
//! Touches MySQL through the store, Redis through the index, and Kafka
//! with its own consumer (the request topics) and producer (the replies).

mod request;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, TopicCheck};
use crate::index::{self, Index};
use crate::job::{self, Job, NewJob, Status};
use crate::kafka::{self, Topics};
use crate::metrics;
use crate::store::{BatchRow, Cancelled, JobChanges, Modified, Store, StoreError};

pub use request::{
    request_parse, target_allowed, Limits, Request, RequestError, RequestRecord,
    HEADER_ACK_TIMEOUT_MS, HEADER_BACKOFF_BASE_MS, HEADER_BACKOFF_CAP_MS, HEADER_CORRELATION_ID,
    HEADER_DELAY_MS, HEADER_EXPECTS_RESULT, HEADER_MAX_ATTEMPTS, HEADER_RUN_AT, HEADER_TARGET_KEY,
    HEADER_TARGET_TOPIC,
};

/// On a reply: what became of the request.
pub const HEADER_OUTCOME: &str = "tickler-outcome";
/// On a reply: where the request was read.
pub const HEADER_REQUEST_TOPIC: &str = "tickler-request-topic";
pub const HEADER_REQUEST_PARTITION: &str = "tickler-request-partition";
pub const HEADER_REQUEST_OFFSET: &str = "tickler-request-offset";

/// How long a pass waits for more records already on their way.
pub const INGRESS_LINGER: Duration = Duration::from_millis(5);
/// librdkafka `fetch.wait.max.ms`: tansu answers a fetch only then, so it
/// bounds how soon a request is taken.
pub const INGRESS_FETCH_WAIT_MS: u32 = 50;
/// Failures other than "database unavailable" before a request is
/// answered `internal` and skipped.
const WRITE_FAILURES_MAX: u32 = 3;
/// A run of creates is written as at most this many transactions at once
/// (the ingress's pool has as many connections): two of 1,000 rows drained
/// fastest on two cores; four of 500 cost MySQL more per row, eight more
/// again (docs/benchmarks.md, "Scheduling through Kafka")…
pub const WRITES_AT_ONCE: usize = 2;
/// …of at least this many rows each: a smaller insert costs more per row
/// than waiting does.
const WRITE_ROWS_MIN: usize = 100;

/// Settings of the ingress.
#[derive(Debug, Clone)]
pub struct IngressConfig {
    pub brokers: String,
    /// Extra librdkafka properties, applied last.
    pub kafka_options: BTreeMap<String, String>,
    /// Request topics and the target-topic patterns each may schedule onto.
    pub topics: BTreeMap<String, Vec<String>>,
    pub reply_topic: Option<String>,
    pub group: String,
    /// Most records taken in one pass.
    pub batch: usize,
    pub linger: Duration,
    /// Partitions of a request or reply topic tickler has to create.
    pub partitions: i32,
    pub limits: Limits,
    pub topic_check: TopicCheck,
    pub window: Duration,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
}

impl IngressConfig {
    pub fn from_config(config: &Config) -> Self {
        let ingress = &config.ingress;
        IngressConfig {
            brokers: config.kafka_brokers.clone(),
            kafka_options: config.kafka_options.clone(),
            topics: ingress
                .topics
                .iter()
                .map(|(topic, settings)| (topic.clone(), settings.targets.clone()))
                .collect(),
            reply_topic: ingress.reply_topic.clone(),
            group: ingress.group.clone(),
            batch: ingress.batch,
            linger: INGRESS_LINGER,
            partitions: ingress.topic_partitions,
            limits: Limits {
                payload_max_bytes: config.payload_max_bytes,
                max_schedule_ahead_days: config.max_schedule_ahead_days,
            },
            topic_check: config.topic_check,
            window: config.window(),
            linger_ms: config.kafka_linger_ms,
            message_timeout_ms: config.kafka_message_timeout_ms,
        }
    }
}

/// A request record as taken from the broker.
#[derive(Debug, Clone)]
pub struct Taken {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp_ms: Option<i64>,
}

impl Taken {
    fn of(message: &BorrowedMessage<'_>) -> Taken {
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        Taken {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
            timestamp_ms: message.timestamp().to_millis(),
        }
    }

    fn as_request(&self) -> RequestRecord<'_> {
        RequestRecord {
            key: self.key.as_deref(),
            value: self.value.as_deref(),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_deref()))
                .collect(),
            timestamp_ms: self.timestamp_ms,
        }
    }

    /// Where it was read, as `jobs.ingress_position` keeps it.
    pub fn position(&self) -> String {
        format!("{}/{}/{}", self.partition, self.offset, self.topic)
    }

    /// Whether a job last created or moved by the request at `stored` has
    /// seen this one already: the same partition of the same topic, at or
    /// after this offset. Such a request is being read again (a crash came
    /// before its offset was committed): applying it again could send the
    /// job back to an earlier request's time.
    pub fn seen_at(&self, stored: &str) -> bool {
        let mut parts = stored.splitn(3, '/');
        let (Some(partition), Some(offset), Some(topic)) =
            (parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        topic == self.topic
            && partition.parse() == Ok(self.partition)
            && offset
                .parse::<i64>()
                .is_ok_and(|offset| offset >= self.offset)
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

/// The records of one pass, in the order they were read.
#[derive(Debug, Default)]
pub struct Batch {
    pub records: Vec<Taken>,
}

/// What became of one request.
#[derive(Debug, Clone)]
pub enum Outcome {
    Created(Job),
    /// The job this (topic, key) holds is what the request asks for: a
    /// request sent or read again.
    Existing(Job),
    /// A pending job's time, payload or headers changed to the request's.
    Moved(Job),
    /// It will never be produced.
    Cancelled(Job),
    /// Produced already: its partition and offset say where.
    TooLate(Job),
    /// A dispatcher holds it this instant; send the request again.
    InFlight(Job),
    Refused(RequestError),
}

impl Outcome {
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Created(_) => "created",
            Outcome::Existing(_) => "existing",
            Outcome::Moved(_) => "moved",
            Outcome::Cancelled(_) => "cancelled",
            Outcome::TooLate(_) => "too_late",
            Outcome::InFlight(_) => "in_flight",
            Outcome::Refused(_) => "error",
        }
    }

    pub fn job(&self) -> Option<&Job> {
        match self {
            Outcome::Created(job)
            | Outcome::Existing(job)
            | Outcome::Moved(job)
            | Outcome::Cancelled(job)
            | Outcome::TooLate(job)
            | Outcome::InFlight(job) => Some(job),
            Outcome::Refused(_) => None,
        }
    }

    /// What a job no longer pending says to a create, move or cancel.
    fn of_settled(job: Job) -> Outcome {
        match job.status {
            Status::Dispatched | Status::Succeeded | Status::Dead => Outcome::TooLate(job),
            Status::Cancelled => Outcome::Refused(RequestError::NotPending(format!(
                "job {} is cancelled: its key cannot schedule again",
                job.id
            ))),
            // Pending again a moment after it was not: a claim released.
            Status::Dispatching | Status::Pending => Outcome::InFlight(job),
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IngressReport {
    /// Records taken.
    pub records: usize,
    /// Requests by outcome (`created`, `existing`, …, `error`).
    pub outcomes: BTreeMap<&'static str, usize>,
    /// How the pass before this one was answered (None: there was none).
    pub answered: Option<Answered>,
    /// Where the pass's time went: waiting for and reading records,
    /// writing to MySQL (and Redis), waiting for the pass before to be
    /// answered.
    pub took_take: Duration,
    pub took_write: Duration,
    pub took_reply: Duration,
}

/// Consumes the request topics until cancelled.
pub struct Ingress {
    store: Store,
    index: Index,
    wake: Arc<Notify>,
    topics: Topics,
    /// The policies of target topics, and the topics nobody may target.
    app: Arc<Config>,
    config: IngressConfig,
    /// Made by [`Ingress::subscribe`], after the topics exist.
    consumer: OnceLock<Arc<StreamConsumer>>,
    replies: Option<FutureProducer>,
    /// The last pass, being answered (its replies acknowledged, then its
    /// offsets committed) while the next one is read and written.
    answering: tokio::sync::Mutex<Option<JoinHandle<Answered>>>,
}

impl Ingress {
    /// Fails on producer settings librdkafka refuses.
    pub fn new(
        store: Store,
        index: Index,
        wake: Arc<Notify>,
        topics: Topics,
        app: Arc<Config>,
        config: IngressConfig,
    ) -> Result<Self, KafkaError> {
        let replies = match &config.reply_topic {
            Some(_) => Some(kafka::producer_create(
                &config.brokers,
                &config.kafka_options,
                config.linger_ms,
                config.message_timeout_ms,
            )?),
            None => None,
        };
        Ok(Ingress {
            store,
            index,
            wake,
            topics,
            app,
            config,
            consumer: OnceLock::new(),
            replies,
            answering: tokio::sync::Mutex::new(None),
        })
    }

    pub async fn run(self, cancel: CancellationToken) {
        let topics: Vec<&str> = self.config.topics.keys().map(String::as_str).collect();
        tracing::info!(topics = %topics.join(","), group = %self.config.group, "ingress started");
        if let Err(err) = self.subscribe().await {
            tracing::error!(error = %err, "cannot consume the request topics");
            return;
        }
        while self.run_once(&cancel).await.is_some() {}
        // The last pass's offsets, once its replies are out.
        self.settle().await;
        tracing::info!("ingress stopped");
    }

    /// Creates the request and reply topics unless they exist (tansu and
    /// locked-down clusters do not create topics on use; one that cannot be
    /// created is logged and used all the same), then the consumer, and
    /// subscribes it. Fails on settings librdkafka refuses.
    pub async fn subscribe(&self) -> Result<(), KafkaError> {
        let ensure = self.config.topics.keys().chain(&self.config.reply_topic);
        for topic in ensure {
            if let Err(err) = kafka::topic_ensure_with(
                &self.config.brokers,
                &self.config.kafka_options,
                topic,
                self.config.partitions,
            )
            .await
            {
                tracing::warn!(topic = %topic, error = %err, "cannot create an ingress topic");
            }
        }
        // Offsets are committed by hand, after MySQL has the requests.
        let consumer = kafka::group_consumer(
            &self.config.brokers,
            &self.config.kafka_options,
            &self.config.group,
            INGRESS_FETCH_WAIT_MS,
        )?;
        let topics: Vec<&str> = self.config.topics.keys().map(String::as_str).collect();
        consumer.subscribe(&topics)?;
        // A second call keeps the first consumer.
        let _ = self.consumer.set(Arc::new(consumer));
        Ok(())
    }

    /// One pass: take and write; then its replies are sent and, once they
    /// are acknowledged, its offsets committed, while the next pass is
    /// taken and written (one pass answering at a time, in order: a
    /// pass's offsets are never committed before the pass before it).
    /// The report says how the pass before this one was answered. None
    /// when cancelled before the pass's writes were done: nothing of it is
    /// committed, and its requests are read again by whoever consumes next.
    pub async fn run_once(&self, cancel: &CancellationToken) -> Option<IngressReport> {
        let started = std::time::Instant::now();
        let batch = self.take(cancel).await?;
        let mut report = IngressReport {
            records: batch.records.len(),
            took_take: started.elapsed(),
            ..IngressReport::default()
        };
        if batch.records.is_empty() {
            return Some(report);
        }
        let started = std::time::Instant::now();
        let outcomes = self.apply(&batch, cancel).await?;
        report.took_write = started.elapsed();
        for (record, outcome) in batch.records.iter().zip(&outcomes) {
            *report.outcomes.entry(outcome.name()).or_default() += 1;
            metrics::ingress_request(&record.topic, outcome.name());
            if let Outcome::Refused(err) = outcome {
                metrics::ingress_refused(&record.topic, err.code());
                tracing::info!(
                    topic = %record.topic,
                    partition = record.partition,
                    offset = record.offset,
                    code = err.code(),
                    error = %err,
                    "ingress request refused"
                );
            }
        }
        // Crash here: MySQL has every request; read again, they change
        // nothing and are answered again.
        let started = std::time::Instant::now();
        let mut answering = self.answering.lock().await;
        if let Some(before) = answering.take() {
            report.answered = before.await.ok();
        }
        let records = batch.records.len();
        let offsets = offsets_of(&batch);
        let consumer = self.consumer.get().cloned();
        let replies = self.replies.clone().zip(self.config.reply_topic.clone());
        // The replies are made in the task too: building them is work the
        // next pass's writes need not wait for.
        *answering = Some(tokio::spawn(async move {
            let to = replies
                .as_ref()
                .map(|(producer, topic)| (producer, topic.as_str()));
            let (pending, failed) = replies_send(to, &batch, &outcomes);
            let (replied, replies_failed) = deliveries_await(pending, failed).await;
            let committed = consumer.is_some_and(|consumer| offsets_commit(&consumer, &offsets));
            Answered {
                records,
                replied,
                replies_failed,
                committed,
            }
        }));
        report.took_reply = started.elapsed();
        Some(report)
    }

    /// Waits for the next records and takes them with what else has
    /// arrived, up to `batch`. None when cancelled first.
    pub async fn take(&self, cancel: &CancellationToken) -> Option<Batch> {
        let Some(consumer) = self.consumer.get() else {
            tracing::error!("ingress used before subscribe");
            return None;
        };
        let mut batch = Batch::default();
        let first = tokio::select! {
            _ = cancel.cancelled() => return None,
            message = consumer.recv() => message,
        };
        match first {
            Ok(message) => batch.records.push(Taken::of(&message)),
            Err(err) => {
                tracing::warn!(error = %err, "ingress consumer error");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Some(batch);
            }
        }
        while batch.records.len() < self.config.batch {
            match tokio::time::timeout(self.config.linger, consumer.recv()).await {
                Ok(Ok(message)) => batch.records.push(Taken::of(&message)),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "ingress consumer error");
                    break;
                }
                Err(_) => break,
            }
        }
        Some(batch)
    }

    /// Writes what the batch's requests ask for; one outcome per record,
    /// in the batch's order. Waits while MySQL is unavailable; None when
    /// cancelled meanwhile (what was written stays written: read again, it
    /// is found).
    pub async fn apply(&self, batch: &Batch, cancel: &CancellationToken) -> Option<Vec<Outcome>> {
        let now = Utc::now();
        let mut requests: Vec<Result<Request, RequestError>> = batch
            .records
            .iter()
            .map(|record| self.check(record, now))
            .collect();
        self.preflight(&mut requests).await;

        // Each partition's requests in their order; the partitions side by
        // side, as many writes at once as MySQL's CPUs take (requests of
        // different partitions have no order to keep).
        let mut partitions: BTreeMap<(&str, i32), Vec<usize>> = BTreeMap::new();
        for (at, record) in batch.records.iter().enumerate() {
            partitions
                .entry((record.topic.as_str(), record.partition))
                .or_default()
                .push(at);
        }
        let applied = futures::future::join_all(
            partitions
                .values()
                .map(|ats| self.apply_in_order(batch, &requests, ats, cancel)),
        )
        .await;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; requests.len()];
        for partition in applied {
            for (at, outcome) in partition? {
                outcomes[at] = Some(outcome);
            }
        }
        Some(
            outcomes
                .into_iter()
                .map(|outcome| outcome.unwrap_or(Outcome::Refused(RequestError::Internal)))
                .collect(),
        )
    }

    /// The requests at `ats` (of one partition), in order: consecutive
    /// creates in one multi-row insert; a cancel, or a second request for
    /// the same (topic, key), ends the run, so that every request sees the
    /// ones before it applied.
    async fn apply_in_order(
        &self,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        ats: &[usize],
        cancel: &CancellationToken,
    ) -> Option<Vec<(usize, Outcome)>> {
        let mut outcomes = Vec::with_capacity(ats.len());
        let mut run: Vec<usize> = Vec::new();
        let mut run_targets: HashSet<(&str, &str)> = HashSet::new();
        for &at in ats {
            let request = match &requests[at] {
                Err(err) => {
                    outcomes.push((at, Outcome::Refused(err.clone())));
                    continue;
                }
                Ok(request) => request,
            };
            let target = request.target();
            let ends_run =
                matches!(request, Request::Cancel { .. }) || run_targets.contains(&target);
            if ends_run && !run.is_empty() {
                self.run_apply(batch, requests, &run, &mut outcomes, cancel)
                    .await?;
                run.clear();
                run_targets.clear();
            }
            match request {
                Request::Put(_) => {
                    run.push(at);
                    run_targets.insert(target);
                }
                Request::Cancel { topic, key } => {
                    let request_topic = &batch.records[at].topic;
                    let outcome = self.cancel_apply(request_topic, topic, key, cancel).await?;
                    outcomes.push((at, outcome));
                }
            }
        }
        if !run.is_empty() {
            self.run_apply(batch, requests, &run, &mut outcomes, cancel)
                .await?;
        }
        Some(outcomes)
    }

    /// A record read and checked against its request topic's targets and
    /// the reserved topics, as the API checks a token's topics.
    fn check(&self, record: &Taken, now: DateTime<Utc>) -> Result<Request, RequestError> {
        let request = request_parse(&record.as_request(), self.config.limits, now, |topic| {
            self.app.policy_for(topic)
        })?;
        let (topic, _) = request.target();
        let targets = self
            .config
            .topics
            .get(&record.topic)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !target_allowed(targets, topic) {
            return Err(RequestError::Forbidden(format!(
                "request topic {:?} may not schedule onto topic {topic:?} (its targets: {})",
                record.topic,
                targets.join(", ")
            )));
        }
        if let Some(why) = self.app.topic_reserved(topic) {
            return Err(RequestError::Reserved(why));
        }
        Ok(request)
    }

    /// The `topic_check` pre-flight, once per distinct target topic of the
    /// creates (a cancel needs no topic on the broker).
    async fn preflight(&self, requests: &mut [Result<Request, RequestError>]) {
        let mut verdicts: HashMap<String, bool> = HashMap::new();
        for request in requests.iter_mut() {
            let Ok(Request::Put(job)) = request else {
                continue;
            };
            let admitted = match verdicts.get(&job.topic) {
                Some(admitted) => *admitted,
                None => {
                    let admitted = self
                        .topics
                        .preflight(self.config.topic_check, &job.topic)
                        .await;
                    verdicts.insert(job.topic.clone(), admitted);
                    admitted
                }
            };
            if !admitted {
                *request = Err(RequestError::UnknownTopic(job.topic.clone()));
            }
        }
    }

    /// The store, writing as `ingress:<request topic>` in the history.
    fn store_for(&self, request_topic: &str) -> Store {
        self.store.with_actor(&format!("ingress:{request_topic}"))
    }

    /// A run of creates from one partition: one multi-row insert, then the
    /// taken (topic, key)s settled one by one.
    async fn run_apply(
        &self,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        run: &[usize],
        outcomes: &mut Vec<(usize, Outcome)>,
        cancel: &CancellationToken,
    ) -> Option<()> {
        let store = self.store_for(&batch.records[run[0]].topic);
        // A run's (topic, key)s are distinct, so its creates do not depend
        // on each other: a long run is written as two transactions at once,
        // as the API's concurrent batches are, to use more than one of
        // MySQL's CPUs.
        let size = run.len().div_ceil(WRITES_AT_ONCE).max(WRITE_ROWS_MIN);
        let written = futures::future::join_all(
            run.chunks(size)
                .map(|chunk| self.creates_apply(&store, batch, requests, chunk, cancel)),
        )
        .await;
        for part in written {
            outcomes.extend(part?);
        }
        Some(())
    }

    /// Creates in one multi-row insert; for a (topic, key) a job holds
    /// already, what [`Ingress::put_taken`] says.
    async fn creates_apply(
        &self,
        store: &Store,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        run: &[usize],
        cancel: &CancellationToken,
    ) -> Option<Vec<(usize, Outcome)>> {
        let mut outcomes = Vec::with_capacity(run.len());
        let (jobs, records): (Vec<NewJob>, Vec<&Taken>) = run
            .iter()
            .filter_map(|at| match &requests[*at] {
                Ok(Request::Put(job)) => Some((job.clone(), &batch.records[*at])),
                _ => None,
            })
            .unzip();
        let positions: Vec<String> = records.iter().map(|record| record.position()).collect();
        match write_retrying(cancel, || store.job_insert_many_at(&jobs, &positions)).await? {
            Ok((rows, db_now)) => {
                let created: Vec<&Job> = rows.iter().filter_map(BatchRow::created).collect();
                metrics::jobs_created(created.len());
                // Only those due within the window go to Redis; a new job
                // is in Redis nowhere else, so the rest need no removal.
                let horizon = db_now + self.config.window;
                let near: Vec<&Job> = created
                    .into_iter()
                    .filter(|job| job.schedule_time < horizon)
                    .collect();
                // Crash here: the jobs are in MySQL; the loader or the
                // overdue probe indexes them.
                if !near.is_empty() {
                    index::follow(&self.index, self.config.window, &self.wake, &near, db_now).await;
                }
                for (((at, job), record), row) in run.iter().zip(&jobs).zip(&records).zip(rows) {
                    let outcome = match row {
                        BatchRow::Created(created) => Outcome::Created(created),
                        BatchRow::Duplicate => self.put_taken(store, job, record, cancel).await?,
                    };
                    outcomes.push((*at, outcome));
                }
            }
            Err(err) => {
                // Each on its own, so one that cannot be written does not
                // hold up the others.
                tracing::warn!(error = %err, num_jobs = jobs.len(), "ingress insert failed; writing the requests one by one");
                for ((at, job), record) in run.iter().zip(&jobs).zip(&records) {
                    outcomes.push((*at, self.put_one(store, job, record, cancel).await?));
                }
            }
        }
        Some(outcomes)
    }

    /// One create, alone.
    async fn put_one(
        &self,
        store: &Store,
        job: &NewJob,
        record: &Taken,
        cancel: &CancellationToken,
    ) -> Option<Outcome> {
        let jobs = std::slice::from_ref(job);
        let positions = [record.position()];
        match write_retrying(cancel, || store.job_insert_many_at(jobs, &positions)).await? {
            Ok((mut rows, db_now)) => match rows.pop() {
                Some(BatchRow::Created(created)) => {
                    metrics::job_created();
                    index::follow(
                        &self.index,
                        self.config.window,
                        &self.wake,
                        &[&created],
                        db_now,
                    )
                    .await;
                    Some(Outcome::Created(created))
                }
                _ => self.put_taken(store, job, record, cancel).await,
            },
            Err(err) => Some(internal(&err)),
        }
    }

    /// A create whose (topic, key) a job holds: the same request again
    /// (`existing`), a move of the pending job, or what the job's state
    /// says.
    async fn put_taken(
        &self,
        store: &Store,
        job: &NewJob,
        record: &Taken,
        cancel: &CancellationToken,
    ) -> Option<Outcome> {
        let key = job.key.as_deref().unwrap_or_default();
        // A job changed between reading and moving it is read again.
        for _ in 0..WRITE_FAILURES_MAX {
            let (existing, position) =
                match write_retrying(cancel, || store.job_find_by_key_at(&job.topic, key)).await? {
                    Ok(Some(found)) => found,
                    // Purged (or deleted by hand) since the insert found it.
                    Ok(None) => return Box::pin(self.put_one(store, job, record, cancel)).await,
                    Err(err) => return Some(internal(&err)),
                };
            // Read again after a crash: applied already (or a later request
            // of its partition was), so it changes nothing.
            let seen = position.as_deref().is_some_and(|at| record.seen_at(at));
            if seen || job.asks_for_same(&existing) {
                return Some(Outcome::Existing(existing));
            }
            if existing.status != Status::Pending {
                return Some(Outcome::of_settled(existing));
            }
            let position_now = record.position();
            let changes = JobChanges {
                schedule: Some(job.schedule),
                payload: Some((job.payload.clone(), job.payload_kind)),
                headers: Some(job.headers.clone()),
            };
            match write_retrying(cancel, || {
                store.job_modify_at(existing.id, existing.version, &changes, &position_now)
            })
            .await?
            {
                Ok(Modified::Applied(moved, db_now)) => {
                    // Crash here: the row has its new time; an earlier one
                    // is found by the loader's scan of edited rows.
                    index::follow(
                        &self.index,
                        self.config.window,
                        &self.wake,
                        &[&moved],
                        db_now,
                    )
                    .await;
                    return Some(Outcome::Moved(moved));
                }
                Ok(Modified::NotPending(settled)) => return Some(Outcome::of_settled(settled)),
                Ok(Modified::VersionMismatch(_)) => continue,
                Err(err) => return Some(internal(&err)),
            }
        }
        Some(Outcome::Refused(RequestError::Internal))
    }

    /// A tombstone: cancels the job holding (topic, key), with the same
    /// compare-and-set as the API's cancel — `cancelled` means never.
    async fn cancel_apply(
        &self,
        request_topic: &str,
        topic: &str,
        key: &str,
        cancel: &CancellationToken,
    ) -> Option<Outcome> {
        let store = self.store_for(request_topic);
        let not_found = || {
            Outcome::Refused(RequestError::NotFound {
                topic: topic.to_owned(),
                key: key.to_owned(),
            })
        };
        let job = match write_retrying(cancel, || store.job_find_by_key(topic, key)).await? {
            Ok(Some(job)) => job,
            Ok(None) => return Some(not_found()),
            Err(err) => return Some(internal(&err)),
        };
        Some(
            match write_retrying(cancel, || store.job_cancel(job.id)).await? {
                Ok(Cancelled::Applied(job)) => {
                    if let Err(err) = self.index.job_remove_many(&[job.id]).await {
                        // Harmless: the dispatcher's CAS refuses a cancelled job.
                        metrics::index_failed("drop a cancelled job", 1, &err);
                    }
                    Outcome::Cancelled(job)
                }
                Ok(Cancelled::Already(job)) => Outcome::Cancelled(job),
                Ok(Cancelled::InFlight(job)) => Outcome::InFlight(job),
                Ok(Cancelled::TooLate(job)) => Outcome::TooLate(job),
                Err(StoreError::NotFound(_)) => not_found(),
                Err(err) => internal(&err),
            },
        )
    }

    /// Answers every record on the reply topic, when there is one, and
    /// waits for the broker's acknowledgements. Returns (acknowledged,
    /// failed). A reply that fails is logged and counted, not retried: the
    /// requests are written, and holding their offsets back would only have
    /// them answered again.
    pub async fn reply(&self, batch: &Batch, outcomes: &[Outcome]) -> (usize, usize) {
        let to = self
            .replies
            .as_ref()
            .zip(self.config.reply_topic.as_deref());
        let (pending, failed) = replies_send(to, batch, outcomes);
        deliveries_await(pending, failed).await
    }

    /// Commits the batch's offsets (the next record of each partition).
    pub fn commit(&self, batch: &Batch) -> bool {
        match self.consumer.get() {
            Some(consumer) => offsets_commit(consumer, &offsets_of(batch)),
            None => false,
        }
    }

    /// Waits until the last pass is answered and its offsets committed.
    pub async fn settle(&self) -> Option<Answered> {
        let pending = self.answering.lock().await.take()?;
        pending.await.ok()
    }
}

/// What answering a pass came to.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    pub records: usize,
    /// Replies the reply topic acknowledged, and those it did not.
    pub replied: usize,
    pub replies_failed: usize,
    /// Whether the pass's offsets were committed.
    pub committed: bool,
}

/// Hands the replies of `batch` to `to` (the producer and the reply topic;
/// None: no reply topic); returns their deliveries and how many could not
/// even be queued.
fn replies_send(
    to: Option<(&FutureProducer, &str)>,
    batch: &Batch,
    outcomes: &[Outcome],
) -> (Vec<DeliveryFuture>, usize) {
    let Some((producer, topic)) = to else {
        return (Vec::new(), 0);
    };
    let mut pending = Vec::with_capacity(outcomes.len());
    let mut failed = 0;
    for (record, outcome) in batch.records.iter().zip(outcomes) {
        let body = reply_body(record, outcome);
        let partition = record.partition.to_string();
        let offset = record.offset.to_string();
        let job_id = outcome.job().map(|job| job.id.to_string());
        let mut headers = OwnedHeaders::new_with_capacity(6)
            .insert(Header {
                key: HEADER_OUTCOME,
                value: Some(outcome.name()),
            })
            .insert(Header {
                key: HEADER_REQUEST_TOPIC,
                value: Some(record.topic.as_str()),
            })
            .insert(Header {
                key: HEADER_REQUEST_PARTITION,
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: HEADER_REQUEST_OFFSET,
                value: Some(offset.as_str()),
            });
        if let Some(correlation) = record.header(HEADER_CORRELATION_ID) {
            headers = headers.insert(Header {
                key: HEADER_CORRELATION_ID,
                value: Some(correlation),
            });
        }
        if let Some(id) = &job_id {
            headers = headers.insert(Header {
                key: job::HEADER_JOB_ID,
                value: Some(id.as_str()),
            });
        }
        let mut reply = FutureRecord::to(topic).payload(&body).headers(headers);
        if let Some(key) = &record.key {
            reply = reply.key(key.as_slice());
        }
        match producer.send_result(reply) {
            Ok(delivery) => pending.push(delivery),
            Err((err, _)) => {
                failed += 1;
                tracing::warn!(error = %err, "cannot queue an ingress reply");
            }
        }
    }
    (pending, failed)
}

/// Waits for the replies' acknowledgements; returns (acknowledged,
/// failed), with `failed` already failed before.
async fn deliveries_await(pending: Vec<DeliveryFuture>, mut failed: usize) -> (usize, usize) {
    let mut acknowledged = 0;
    for delivery in pending {
        match delivery.await {
            Ok(Ok(_)) => acknowledged += 1,
            Ok(Err((err, _))) => {
                failed += 1;
                tracing::warn!(error = %err, "an ingress reply was not delivered");
            }
            Err(_) => failed += 1,
        }
    }
    if failed > 0 {
        metrics::ingress_replies_failed(failed);
    }
    (acknowledged, failed)
}

/// The offsets that commit a batch: the next record of each partition.
fn offsets_of(batch: &Batch) -> TopicPartitionList {
    let mut positions: HashMap<(&str, i32), i64> = HashMap::new();
    for record in &batch.records {
        let last = positions
            .entry((record.topic.as_str(), record.partition))
            .or_insert(record.offset);
        *last = (*last).max(record.offset);
    }
    let mut offsets = TopicPartitionList::new();
    for ((topic, partition), offset) in &positions {
        if let Err(err) =
            offsets.add_partition_offset(topic, *partition, Offset::Offset(offset + 1))
        {
            tracing::warn!(error = %err, "cannot build the offsets to commit");
        }
    }
    offsets
}

/// Async: a lost commit only means reading requests again, which changes
/// nothing the second time.
fn offsets_commit(consumer: &StreamConsumer, offsets: &TopicPartitionList) -> bool {
    match consumer.commit(offsets, CommitMode::Async) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(error = %err, "cannot commit ingress offsets");
            false
        }
    }
}

/// Runs `write` until it is done, waiting while MySQL is unavailable or
/// rolls it back for contention; gives up after `WRITE_FAILURES_MAX` other
/// failures. None when cancelled while waiting.
async fn write_retrying<T, F, Fut>(
    cancel: &CancellationToken,
    mut write: F,
) -> Option<Result<T, StoreError>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut delay = Duration::from_millis(100);
    let mut failures = 0;
    loop {
        match write().await {
            Ok(done) => return Some(Ok(done)),
            // Answers, not failures.
            Err(err @ (StoreError::DuplicateKey | StoreError::NotFound(_))) => {
                return Some(Err(err))
            }
            Err(err) => {
                if !matches!(err, StoreError::Unavailable(_) | StoreError::Contention(_)) {
                    failures += 1;
                    if failures >= WRITE_FAILURES_MAX {
                        return Some(Err(err));
                    }
                }
                tracing::warn!(error = %err, "ingress cannot write to mysql; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// A request the database keeps refusing: logged, answered `internal`.
fn internal(err: &StoreError) -> Outcome {
    metrics::store_failed("ingress request", err);
    tracing::error!(error = %err, "cannot write an ingress request; skipping it");
    Outcome::Refused(RequestError::Internal)
}

/// The value of a reply record.
#[derive(Debug, Serialize)]
struct ReplyBody<'a> {
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<ReplyJob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ReplyError>,
    request: ReplyRequest<'a>,
}

#[derive(Debug, Serialize)]
struct ReplyJob<'a> {
    id: u64,
    topic: &'a str,
    key: Option<&'a str>,
    status: Status,
    run_at: String,
    version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    kafka: Option<ReplyPosition>,
}

#[derive(Debug, Serialize)]
struct ReplyPosition {
    partition: i32,
    offset: i64,
}

#[derive(Debug, Serialize)]
struct ReplyError {
    code: &'static str,
    message: String,
}

#[derive(Debug, Serialize)]
struct ReplyRequest<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
}

fn reply_body(record: &Taken, outcome: &Outcome) -> Vec<u8> {
    let body = ReplyBody {
        outcome: outcome.name(),
        job: outcome.job().map(|job| ReplyJob {
            id: job.id,
            topic: &job.topic,
            key: job.key.as_deref(),
            status: job.status,
            run_at: job::time_format(job.schedule_time),
            version: job.version,
            kafka: match (job.kafka_partition, job.kafka_offset) {
                (Some(partition), Some(offset)) => Some(ReplyPosition { partition, offset }),
                _ => None,
            },
        }),
        error: match outcome {
            Outcome::Refused(err) => Some(ReplyError {
                code: err.code(),
                message: err.to_string(),
            }),
            _ => None,
        },
        request: ReplyRequest {
            topic: &record.topic,
            partition: record.partition,
            offset: record.offset,
        },
    };
    // Serialising plain strings and numbers cannot fail.
    serde_json::to_vec(&body).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(topic: &str, partition: i32, offset: i64) -> Taken {
        Taken {
            topic: topic.to_owned(),
            partition,
            offset,
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp_ms: None,
        }
    }

    #[test]
    fn a_request_at_or_before_the_jobs_last_position_of_its_partition_was_seen() {
        let stored = taken("req.a", 2, 40).position();
        assert_eq!(stored, "2/40/req.a");
        assert!(taken("req.a", 2, 40).seen_at(&stored));
        assert!(taken("req.a", 2, 39).seen_at(&stored));
        assert!(!taken("req.a", 2, 41).seen_at(&stored), "a later request");
        assert!(
            !taken("req.a", 3, 10).seen_at(&stored),
            "another partition: no order"
        );
        assert!(!taken("req.b", 2, 10).seen_at(&stored), "another topic");
        assert!(!taken("req.a", 2, 10).seen_at("garbage"));
    }

    #[test]
    fn a_reply_says_the_outcome_the_job_and_where_the_request_was_read() {
        let refused = Outcome::Refused(RequestError::NotFound {
            topic: "orders".to_owned(),
            key: "k".to_owned(),
        });
        let body: serde_json::Value =
            serde_json::from_slice(&reply_body(&taken("req.a", 1, 7), &refused)).unwrap();
        assert_eq!(body["outcome"], "error");
        assert_eq!(body["error"]["code"], "not_found");
        assert_eq!(body["request"]["partition"], 1);
        assert_eq!(body["request"]["offset"], 7);
        assert!(body.get("job").is_none());
    }
}

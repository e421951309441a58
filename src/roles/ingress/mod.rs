//! Kafka ingress: jobs scheduled by producing to a request topic, with the
//! API's rules and guarantees behind them (docs/api.md, "Scheduling through
//! Kafka").
//!
//! Each pass takes the records waiting on the request topics (up to
//! `batch`), writes what they ask for to MySQL — the creates of each
//! partition in one multi-row insert, the partitions side by side — makes
//! Redis follow, answers each on the reply topic, and only then commits the
//! offsets. Passes overlap: one is read while the one before is written and
//! the one before that answered (two passes asking about the same job do
//! not). Crash anywhere before the
//! commit: the records are read again, and their (topic, key) finds the
//! jobs they made: answered `existing` (or `cancelled` again), never made
//! twice. A request that cannot be written is answered with its error and
//! its offset committed: a bad record never stalls its partition.
//!
//! Touches MySQL through the store, Redis through the index, and Kafka
//! with its own consumer (the request topics) and producer (the replies).

mod pass;
mod reply;
mod request;
mod share;
mod write;

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::Index;
use crate::kafka::{self, GroupConsumer, KafkaError, Producer, Received, Topics};
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::membership::Ownership;
use crate::roles::topic_controls::TopicControls;
use crate::store::Store;

pub use pass::{Batch, IngressConfig, RequestOutcome, Taken, INGRESS_LINGER};
use write::Writer;
pub use write::WRITES_AT_ONCE;
/// Connections the ingress writes with: two passes at once (one being
/// written while the next is checked and started), each of
/// [`WRITES_AT_ONCE`] transactions.
pub const CONNECTIONS: u32 = 2 * WRITES_AT_ONCE as u32;

pub use request::{
    request_parse, target_allowed, Request, RequestError, RequestRecord, HEADER_ACK_TIMEOUT_MS,
    HEADER_BACKOFF_BASE_MS, HEADER_BACKOFF_CAP_MS, HEADER_CORRELATION_ID, HEADER_DELAY_MS,
    HEADER_EXPECTS_RESULT, HEADER_EXPIRES_AT, HEADER_MAX_ATTEMPTS, HEADER_RUN_AT, HEADER_RUN_LOCAL,
    HEADER_TARGET_KEY, HEADER_TARGET_TOPIC, HEADER_TIME_ZONE, HEADER_WINDOW_MS,
};

use reply::Replies;
pub use reply::{
    HEADER_OUTCOME, HEADER_REQUEST_OFFSET, HEADER_REQUEST_PARTITION, HEADER_REQUEST_TOPIC,
};
pub use share::{partitions_mine, PARTITIONS_REFRESH};

/// librdkafka `fetch.wait.max.ms`: tansu answers a fetch only then, so it
/// bounds how soon a request is taken.
pub const INGRESS_FETCH_WAIT_MS: u32 = 50;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IngressReport {
    /// Records taken.
    pub records: usize,
    /// Requests by outcome (`created`, `existing`, …, `error`).
    pub outcomes: BTreeMap<&'static str, usize>,
    /// How the pass before this one was answered (None: there was none).
    pub answered: Option<Answered>,
    /// Where the pass's time went: waiting for and reading records;
    /// writing to MySQL (and Redis), from its hand-over to its writing
    /// task until a turn found it done (passes overlap, so these add up to
    /// more than the time spent); waiting for the pass before to be
    /// answered.
    pub took_take: Duration,
    pub took_write: Duration,
    pub took_reply: Duration,
}

/// Consumes the request topics until cancelled.
pub struct Ingress {
    writer: Writer,
    config: Arc<IngressConfig>,
    /// Made by [`Ingress::connect`], after the topics exist.
    consumer: OnceLock<Arc<GroupConsumer>>,
    replies: Option<Arc<Replies>>,
    /// The pass being written while the next one is read and checked.
    writing: tokio::sync::Mutex<Option<Writing>>,
    /// The last pass, being answered (its replies acknowledged, then its
    /// offsets committed) while the next one is written.
    answering: tokio::sync::Mutex<Option<JoinHandle<Answered>>>,
    /// A pass was given up (cancelled while MySQL was unavailable, or its
    /// task failed): no later pass may commit past its records.
    stopped: AtomicBool,
    /// Hashes the (topic, key)s of a pass, the same way for every pass.
    targets: RandomState,
}

/// A pass handed to its writing task.
struct Writing {
    /// The (topic, key)s its requests ask about, hashed by
    /// [`Ingress::targets`]: two that hash alike only make a pass wait.
    targets: HashSet<u64>,
    took_take: Duration,
    started: Instant,
    task: JoinHandle<(Batch, Option<Vec<RequestOutcome>>)>,
}

/// What a pass's turn comes to while another is being written.
enum Next<'a> {
    Record(Result<Received<'a>, KafkaError>),
    Written(Result<(Batch, Option<Vec<RequestOutcome>>), tokio::task::JoinError>),
    Cancelled,
}

impl Ingress {
    /// Fails on producer settings librdkafka refuses.
    pub fn new(
        store: Store,
        index: Index,
        wake: Arc<Notify>,
        topics: Topics,
        app: &Config,
        config: IngressConfig,
    ) -> Result<Self, KafkaError> {
        let replies = match &config.reply_topic {
            Some(topic) => Some(Arc::new(Replies::new(
                Producer::create(
                    &config.brokers,
                    &config.kafka_options,
                    config.linger_ms,
                    config.message_timeout_ms,
                )?,
                topic.clone(),
            ))),
            None => None,
        };
        let config = Arc::new(config);
        Ok(Ingress {
            writer: Writer {
                jobs: Jobs::new(store, index, config.window, wake),
                topics,
                rules: Arc::new(app.topic_rules()),
                config: config.clone(),
                controls: None,
            },
            config,
            consumer: OnceLock::new(),
            replies,
            writing: tokio::sync::Mutex::new(None),
            answering: tokio::sync::Mutex::new(None),
            stopped: AtomicBool::new(false),
            targets: RandomState::new(),
        })
    }

    /// Checks each create's payload against its target topic's payload
    /// schema (this instance's copy of the topic controls).
    pub fn with_controls(mut self, controls: TopicControls) -> Self {
        self.writer.controls = Some(controls);
        self
    }

    /// Reads the request partitions that are this instance's by
    /// `ownership` (membership's view of who reads them, kept current by a
    /// [`share::Sharer`]) until cancelled.
    pub async fn run(self, cancel: CancellationToken, ownership: watch::Receiver<Ownership>) {
        let topics: Vec<String> = self.config.topics.keys().cloned().collect();
        tracing::info!(topics = %topics.join(","), group = %self.config.group, "ingress started");
        let consumer = match self.connect().await {
            Ok(consumer) => consumer,
            Err(err) => {
                tracing::error!(error = %err, "cannot consume the request topics");
                return;
            }
        };
        let sharing =
            tokio::spawn(share::Sharer::new(consumer, topics, ownership).run(cancel.child_token()));
        while self.run_once(&cancel).await.is_some() {}
        // The pass being written, and the last offsets once their replies
        // are out.
        self.settle().await;
        sharing.abort();
        tracing::info!("ingress stopped");
    }

    /// Creates the request and reply topics unless they exist (tansu and
    /// locked-down clusters do not create topics on use; one that cannot be
    /// created is logged and used all the same), then the consumer, which
    /// reads nothing until it is given partitions. Fails on settings
    /// librdkafka refuses.
    pub async fn connect(&self) -> Result<Arc<GroupConsumer>, KafkaError> {
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
        let consumer = GroupConsumer::by_hand(
            &self.config.brokers,
            &self.config.kafka_options,
            &self.config.group,
            INGRESS_FETCH_WAIT_MS,
        )?;
        // A second call keeps the first consumer.
        Ok(self.consumer.get_or_init(|| Arc::new(consumer)).clone())
    }

    /// [`Ingress::connect`], then reads every partition of the request
    /// topics: an ingress that shares them with nobody (tests, tools).
    pub async fn connect_alone(&self) -> Result<(), KafkaError> {
        let consumer = self.connect().await?;
        let topics: Vec<String> = self.config.topics.keys().cloned().collect();
        let partitions = {
            let consumer = consumer.clone();
            tokio::task::spawn_blocking(move || {
                consumer.partitions_of(&topics, Duration::from_secs(5))
            })
            .await
            .map_err(|_| KafkaError::Canceled)??
        };
        consumer.partitions_add(&partitions)
    }

    /// One turn of a three-stage pipeline: the next records are taken and
    /// checked while the pass before is written to MySQL, and the pass
    /// before that is answered (its replies acknowledged, then its offsets
    /// committed — in order: a pass's offsets are never committed before
    /// the pass before it). The new pass is handed to a writing task, and
    /// the one before it, once written, to answering. A pass asking about
    /// a (topic, key) the pass being written asks about waits for it, so
    /// that each job's requests apply in their order.
    ///
    /// The report is of the pass whose writes this turn saw done (empty
    /// when none was). None when cancelled, or once a pass was given up:
    /// nothing of it or after it is committed, and its requests are read
    /// again by whoever consumes next. Stop it through `cancel`, not by
    /// dropping it half-way: a pass it was finishing would then never be
    /// answered, and the next one's commit would pass over it.
    pub async fn run_once(&self, cancel: &CancellationToken) -> Option<IngressReport> {
        if self.stopped.load(Ordering::Acquire) {
            return None;
        }
        let consumer = self.consumer()?;
        let mut writing = self.writing.lock().await;
        let started = Instant::now();
        // The next record, unless the pass being written is done first.
        let next = match writing.as_mut() {
            None => tokio::select! {
                _ = cancel.cancelled() => Next::Cancelled,
                message = consumer.recv() => Next::Record(message),
            },
            Some(pass) => tokio::select! {
                _ = cancel.cancelled() => Next::Cancelled,
                message = consumer.recv() => Next::Record(message),
                written = &mut pass.task => Next::Written(written),
            },
        };
        let first = match next {
            Next::Cancelled => return None,
            Next::Written(written) => {
                let pass = writing.take()?;
                return self.written(pass, written).await;
            }
            Next::Record(first) => first,
        };
        let batch = self.take_rest(consumer, first).await;
        let took_take = started.elapsed();
        if batch.records.is_empty() {
            return Some(IngressReport::default());
        }
        let requests = self.writer.requests(&batch).await;
        let targets: HashSet<u64> = requests
            .iter()
            .flatten()
            .map(|request| self.targets.hash_one(request.target()))
            .collect();
        // A job asked about by both passes: the one before goes first.
        let mut report = None;
        if writing
            .as_ref()
            .is_some_and(|pass| !pass.targets.is_disjoint(&targets))
        {
            let mut pass = writing.take()?;
            let written = (&mut pass.task).await;
            report = Some(self.written(pass, written).await?);
        }
        let writer = self.writer.clone();
        let cancel_write = cancel.clone();
        let before = writing.replace(Writing {
            targets,
            took_take,
            started: Instant::now(),
            task: tokio::spawn(async move {
                let outcomes = writer.apply(&batch, &requests, &cancel_write).await;
                (batch, outcomes)
            }),
        });
        if let Some(report) = report {
            return Some(report);
        }
        match before {
            Some(mut pass) => {
                let written = (&mut pass.task).await;
                self.written(pass, written).await
            }
            None => Some(IngressReport::default()),
        }
    }

    /// A pass whose writes are done: counted, then handed to answering
    /// once the pass before it is answered.
    ///
    /// Long because a pass's end is read in order: given up or not, its
    /// outcomes counted, then handed to answering after the pass before.
    async fn written(
        &self,
        pass: Writing,
        written: Result<(Batch, Option<Vec<RequestOutcome>>), tokio::task::JoinError>,
    ) -> Option<IngressReport> {
        // A pass before this one was given up: its records are to be read
        // again, and committing this one's offsets would skip them.
        if self.stopped.load(Ordering::Acquire) {
            return None;
        }
        let (batch, outcomes) = match written {
            Ok((batch, Some(outcomes))) => (batch, outcomes),
            Ok((_, None)) => {
                self.stopped.store(true, Ordering::Release);
                return None;
            }
            Err(err) => {
                tracing::error!(error = %err, "an ingress pass failed; its requests will be read again");
                self.stopped.store(true, Ordering::Release);
                return None;
            }
        };
        let mut report = IngressReport {
            records: batch.records.len(),
            took_take: pass.took_take,
            took_write: pass.started.elapsed(),
            ..IngressReport::default()
        };
        // Counted once a pass, by request topic and outcome: a few of each,
        // so a list is quicker than hashing every record's topic.
        let mut counts: Vec<((&str, &'static str), usize)> = Vec::new();
        for (record, outcome) in batch.records.iter().zip(&outcomes) {
            let counted = (&*record.topic, outcome.name());
            match counts.iter_mut().find(|(seen, _)| *seen == counted) {
                Some((_, n)) => *n += 1,
                None => counts.push((counted, 1)),
            }
            if let RequestOutcome::Refused(err) = outcome {
                let (partition, offset) = (record.partition, record.offset);
                metrics::ingress_refused(&record.topic, partition, offset, err.code(), err);
            }
        }
        for ((topic, outcome), n) in counts {
            *report.outcomes.entry(outcome).or_default() += n;
            metrics::ingress_requests(topic, outcome, n);
        }
        // Crash here: MySQL has every request; read again, they change
        // nothing and are answered again.
        let started = Instant::now();
        let mut answering = self.answering.lock().await;
        if let Some(before) = answering.take() {
            match before.await {
                Ok(answered) => report.answered = Some(answered),
                Err(err) => {
                    // A bug. Committing this pass's offsets would skip the
                    // replies of that one's: stop here (the role's end stops
                    // the instance), and both passes are read again.
                    tracing::error!(error = %err, "an ingress pass's answering failed; its requests will be read again");
                    self.stopped.store(true, Ordering::Release);
                    return None;
                }
            }
        }
        let records = batch.records.len();
        let offsets = offsets_of(&batch);
        let consumer = self.consumer.get().cloned();
        let replies = self.replies.clone();
        // The replies are made in the task too: building them is work the
        // next pass's writes need not wait for.
        *answering = Some(tokio::spawn(async move {
            let (replied, replies_failed) = match &replies {
                Some(replies) => replies.send(&batch, &outcomes).await,
                None => (0, 0),
            };
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

    fn consumer(&self) -> Option<&GroupConsumer> {
        let consumer = self.consumer.get();
        if consumer.is_none() {
            tracing::error!("ingress used before connect");
        }
        consumer.map(|consumer| &**consumer)
    }

    /// Waits for the next records and takes them with what else has
    /// arrived, up to `batch`. None when cancelled first.
    pub async fn take(&self, cancel: &CancellationToken) -> Option<Batch> {
        let consumer = self.consumer()?;
        let first = tokio::select! {
            _ = cancel.cancelled() => return None,
            message = consumer.recv() => message,
        };
        Some(self.take_rest(consumer, first).await)
    }

    /// The batch that starts with `first`: what else has arrived, up to
    /// `batch`. Empty after a consumer error.
    async fn take_rest(
        &self,
        consumer: &GroupConsumer,
        first: Result<Received<'_>, KafkaError>,
    ) -> Batch {
        let mut batch = Batch::default();
        match first {
            Ok(message) => batch.records.push(Taken::of(&message, None)),
            Err(err) => {
                tracing::warn!(error = %err, "ingress consumer error");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return batch;
            }
        }
        while batch.records.len() < self.config.batch {
            // A record already queued is taken without arming a timer.
            let next = match consumer.recv().now_or_never() {
                Some(next) => Ok(next),
                None => tokio::time::timeout(self.config.linger, consumer.recv()).await,
            };
            match next {
                Ok(Ok(message)) => {
                    let topic = batch.records.last().map(|last| &last.topic);
                    let taken = Taken::of(&message, topic);
                    batch.records.push(taken);
                }
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "ingress consumer error");
                    break;
                }
                Err(_) => break,
            }
        }
        batch
    }

    /// Checks and writes the batch's requests, as a pass does; one outcome
    /// per record, in the batch's order. None when cancelled while MySQL
    /// was unavailable.
    pub async fn apply(
        &self,
        batch: &Batch,
        cancel: &CancellationToken,
    ) -> Option<Vec<RequestOutcome>> {
        let requests = self.writer.requests(batch).await;
        self.writer.apply(batch, &requests, cancel).await
    }

    /// Answers every record on the reply topic, when there is one, and
    /// waits for the broker's acknowledgements. Returns (acknowledged,
    /// failed). A reply that fails is logged and counted, not retried: the
    /// requests are written, and holding their offsets back would only have
    /// them answered again.
    pub async fn reply(&self, batch: &Batch, outcomes: &[RequestOutcome]) -> (usize, usize) {
        match &self.replies {
            Some(replies) => replies.send(batch, outcomes).await,
            None => (0, 0),
        }
    }

    /// Commits the batch's offsets (the next record of each partition).
    pub fn commit(&self, batch: &Batch) -> bool {
        match self.consumer.get() {
            Some(consumer) => offsets_commit(consumer, &offsets_of(batch)),
            None => false,
        }
    }

    /// Waits until the pass being written is written and answered, and
    /// the last offsets committed.
    pub async fn settle(&self) -> Option<Answered> {
        let pass = self.writing.lock().await.take();
        if let Some(mut pass) = pass {
            let written = (&mut pass.task).await;
            self.written(pass, written).await;
        }
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

/// The last offset of each partition a batch read.
fn offsets_of(batch: &Batch) -> Vec<((Arc<str>, i32), i64)> {
    // A few partitions a pass: a list is quicker than hashing each record.
    let mut positions: Vec<((Arc<str>, i32), i64)> = Vec::new();
    for record in &batch.records {
        match positions.iter_mut().find(|((topic, partition), _)| {
            *partition == record.partition && *topic == record.topic
        }) {
            Some((_, last)) => *last = (*last).max(record.offset),
            None => positions.push(((record.topic.clone(), record.partition), record.offset)),
        }
    }
    positions
}

/// Commits the record after each last offset read. Async: a lost commit
/// only means reading requests again, which changes nothing the second
/// time.
fn offsets_commit(consumer: &GroupConsumer, offsets: &[((Arc<str>, i32), i64)]) -> bool {
    let last = offsets
        .iter()
        .map(|((topic, partition), offset)| ((&**topic, *partition), *offset));
    match consumer.commit(last) {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(error = %err, "cannot commit ingress offsets");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_at_or_before_the_jobs_last_position_of_its_partition_was_seen() {
        let stored = Taken::at("req.a", 2, 40).position();
        assert_eq!(stored, "2/40/req.a");
        assert!(Taken::at("req.a", 2, 40).seen_at(&stored));
        assert!(Taken::at("req.a", 2, 39).seen_at(&stored));
        assert!(
            !Taken::at("req.a", 2, 41).seen_at(&stored),
            "a later request"
        );
        assert!(
            !Taken::at("req.a", 3, 10).seen_at(&stored),
            "another partition: no order"
        );
        assert!(!Taken::at("req.b", 2, 10).seen_at(&stored), "another topic");
        assert!(!Taken::at("req.a", 2, 10).seen_at("garbage"));
    }
}

//! The results role: reads consumers' reports from the results topic with a
//! consumer group and applies them; produces the dead-letter records owed.
//! The API's `POST /v1/jobs/{id}/result` and the reconciler's ack deadlines
//! go through the same [`Resolver`], so every channel has one semantics.
//!
//! Offsets are committed only after MySQL has the outcomes. Crash after the
//! commit of the outcomes and before the offset commit: the reports are read
//! again and are then ignored (the jobs moved on), so nothing is applied
//! twice and nothing is lost.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::Index;
use crate::job::{self, JobId};
use crate::kafka;
use crate::metrics;
use crate::retry::{self, Report};
use crate::store::{DeadLetter, Disposition, Settled, Store, StoreError};

/// `channel` label of the results metrics.
pub const CHANNEL_TOPIC: &str = "topic";
pub const CHANNEL_HTTP: &str = "http";
pub const CHANNEL_ACK_TIMEOUT: &str = "ack_timeout";

/// Headers of a dead-letter record, besides the job's own.
pub const HEADER_TOPIC: &str = "tickler-topic";
pub const HEADER_ERROR: &str = "tickler-error";

/// How long an instance holds the dead-letter records it is producing; a
/// record that failed is tried again after it.
const DEAD_LETTER_LEASE: Duration = Duration::from_secs(60);

/// Applies reports and missed ack deadlines, then makes Redis follow: a job
/// sent back to `pending` inside the window is indexed at once (the loader's
/// scan of edited rows is the safety net if this fails).
#[derive(Clone)]
pub struct Resolver {
    store: Store,
    index: Index,
    config: Arc<Config>,
    /// Wakes the local dispatcher when a retry enters the window.
    wake: Arc<Notify>,
    /// Wakes the dead-letter producer when a job died.
    dead_letters: Arc<Notify>,
}

impl Resolver {
    pub fn new(
        store: Store,
        index: Index,
        config: Arc<Config>,
        wake: Arc<Notify>,
        dead_letters: Arc<Notify>,
    ) -> Resolver {
        Resolver {
            store,
            index,
            config,
            wake,
            dead_letters,
        }
    }

    /// Applies `reports` (from `channel`) in one transaction.
    pub async fn reports_apply(
        &self,
        reports: &[Report],
        channel: &'static str,
    ) -> Result<Settled, StoreError> {
        let config = self.config.clone();
        let dead_letter = move |topic: &str| config.dead_letter_for(topic).is_some();
        let settled = self.store.job_report_many(reports, &dead_letter).await?;
        for (report, disposition) in reports.iter().zip(&settled.dispositions) {
            match disposition {
                Disposition::Applied(_) => {
                    metrics::result_applied(channel, report.outcome.as_str());
                }
                Disposition::Ignored(why) => {
                    tracing::debug!(
                        job_id = report.job_id,
                        attempt = report.attempt,
                        reason = why.as_str(),
                        channel,
                        "result report ignored"
                    );
                    metrics::result_ignored(channel, why.as_str());
                }
            }
        }
        self.follow(&settled).await;
        Ok(settled)
    }

    /// Retries (or buries) dispatched jobs whose ack deadline passed.
    pub async fn acks_expire(&self, limit: u32) -> Result<Settled, StoreError> {
        let config = self.config.clone();
        let dead_letter = move |topic: &str| config.dead_letter_for(topic).is_some();
        let settled = self.store.job_ack_expire(limit, &dead_letter).await?;
        metrics::ack_timeouts(settled.retried.len() + settled.dead);
        self.follow(&settled).await;
        Ok(settled)
    }

    /// Counts failed attempts for records of claim `token` the broker
    /// refused for the jobs' own sake (`(job id, why)`). Redis is left to
    /// the dispatcher, which holds these jobs' claims there.
    pub async fn refusals_apply(
        &self,
        token: u64,
        refused: &[(JobId, String)],
    ) -> Result<Settled, StoreError> {
        let config = self.config.clone();
        let dead_letter = move |topic: &str| config.dead_letter_for(topic).is_some();
        let settled = self
            .store
            .job_refuse_many(token, refused, &dead_letter)
            .await?;
        self.count(&settled);
        Ok(settled)
    }

    fn count(&self, settled: &Settled) {
        metrics::jobs_retried(settled.retried.len());
        metrics::jobs_dead(settled.dead);
        if settled.dead_lettered > 0 {
            self.dead_letters.notify_one();
        }
    }

    async fn follow(&self, settled: &Settled) {
        self.count(settled);
        let Some(db_now) = settled.db_now else {
            return;
        };
        let horizon = db_now + self.config.window();
        let add: Vec<(JobId, chrono::DateTime<Utc>)> = settled
            .retried
            .iter()
            .filter(|entry| entry.schedule_time < horizon)
            .map(|entry| (entry.id, entry.schedule_time))
            .collect();
        if add.is_empty() {
            return;
        }
        match self.index.job_add_many(&add).await {
            Ok(_) => self.wake.notify_one(),
            Err(err) => {
                metrics::index_error();
                tracing::warn!(num_jobs = add.len(), error = %err, "cannot index retried jobs");
            }
        }
    }
}

/// Consumes the results topic until cancelled.
pub struct ResultsConsumer {
    resolver: Resolver,
    config: Arc<Config>,
}

impl ResultsConsumer {
    pub fn new(resolver: Resolver, config: Arc<Config>) -> ResultsConsumer {
        ResultsConsumer { resolver, config }
    }

    pub async fn run(self, cancel: CancellationToken) {
        tracing::info!(topic = %self.config.results_topic, group = %self.config.results_group, "results consumer started");
        // tansu and locked-down clusters do not create topics on use; make
        // sure ours exists (harmless when it does, logged when not allowed).
        if let Err(err) = kafka::topic_ensure(
            &self.config.kafka_brokers,
            &self.config.results_topic,
            self.config.results_topic_partitions,
        )
        .await
        {
            tracing::warn!(topic = %self.config.results_topic, error = %err, "cannot create the results topic");
        }
        loop {
            let consumer = match self.consumer_create() {
                Ok(consumer) => consumer,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot create the results consumer");
                    tokio::select! {
                        _ = cancel.cancelled() => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
                }
            };
            self.consume(&consumer, &cancel).await;
            break;
        }
        tracing::info!("results consumer stopped");
    }

    fn consumer_create(&self) -> Result<StreamConsumer, rdkafka::error::KafkaError> {
        let mut client = kafka::client_config(&self.config.kafka_brokers);
        client
            .set("group.id", &self.config.results_group)
            // Offsets are committed by hand, after MySQL has the outcomes.
            .set("enable.auto.commit", "false")
            // A group reading the topic for the first time misses nothing.
            .set("auto.offset.reset", "earliest")
            .set("fetch.wait.max.ms", "50")
            // A member that died is replaced within seconds, not the
            // default 45: its partitions wait for it until then.
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "1000");
        for (key, value) in &self.config.kafka_options {
            client.set(key, value);
        }
        let consumer: StreamConsumer = client.create()?;
        consumer.subscribe(&[&self.config.results_topic])?;
        Ok(consumer)
    }

    async fn consume(&self, consumer: &StreamConsumer, cancel: &CancellationToken) {
        let batch_max = self.config.results_batch;
        loop {
            let first = tokio::select! {
                _ = cancel.cancelled() => return,
                message = consumer.recv() => message,
            };
            let mut reports = Vec::new();
            let mut positions: HashMap<(String, i32), i64> = HashMap::new();
            match first {
                Ok(message) => record_take(&message, &mut reports, &mut positions),
                Err(err) => {
                    tracing::warn!(error = %err, "results consumer error");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
            // Whatever else is already here joins the batch.
            for _ in 1..batch_max {
                match tokio::time::timeout(Duration::from_millis(2), consumer.recv()).await {
                    Ok(Ok(message)) => record_take(&message, &mut reports, &mut positions),
                    Ok(Err(err)) => {
                        tracing::warn!(error = %err, "results consumer error");
                        break;
                    }
                    Err(_) => break,
                }
            }
            if !self.apply(&reports, cancel).await {
                return;
            }
            let mut commit = TopicPartitionList::new();
            for ((topic, partition), offset) in &positions {
                if let Err(err) =
                    commit.add_partition_offset(topic, *partition, Offset::Offset(offset + 1))
                {
                    tracing::warn!(error = %err, "cannot build the offsets to commit");
                }
            }
            // Async: a lost commit only means reading reports again, which
            // changes nothing the second time.
            if let Err(err) = consumer.commit(&commit, CommitMode::Async) {
                tracing::warn!(error = %err, "cannot commit results offsets");
            }
        }
    }

    /// Applies the batch, retrying while MySQL is unavailable. A batch that
    /// fails otherwise three times (a deadlock would have passed by then) is
    /// applied report by report, so one report that cannot be applied does
    /// not hold up the others. False when cancelled first: nothing is
    /// committed, and the reports are read again.
    async fn apply(&self, reports: &[Report], cancel: &CancellationToken) -> bool {
        if reports.is_empty() {
            return true;
        }
        match self.apply_retrying(reports, cancel).await {
            Applied::Yes => true,
            Applied::Cancelled => false,
            Applied::Failed(_) if reports.len() > 1 => {
                for report in reports {
                    match self
                        .apply_retrying(std::slice::from_ref(report), cancel)
                        .await
                    {
                        Applied::Yes => {}
                        Applied::Cancelled => return false,
                        Applied::Failed(err) => report_skip(report, &err),
                    }
                }
                true
            }
            Applied::Failed(err) => {
                report_skip(&reports[0], &err);
                true
            }
        }
    }

    /// Retries while MySQL is unavailable; gives up after three other
    /// failures.
    async fn apply_retrying(&self, reports: &[Report], cancel: &CancellationToken) -> Applied {
        let mut delay = Duration::from_millis(100);
        let mut failures = 0;
        loop {
            match self.resolver.reports_apply(reports, CHANNEL_TOPIC).await {
                Ok(_) => return Applied::Yes,
                Err(err) => {
                    if !matches!(err, StoreError::Unavailable(_)) {
                        failures += 1;
                        if failures >= 3 {
                            return Applied::Failed(err);
                        }
                    }
                    tracing::warn!(error = %err, num_reports = reports.len(), "cannot apply results; retrying");
                    tokio::select! {
                        _ = cancel.cancelled() => return Applied::Cancelled,
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

enum Applied {
    Yes,
    Cancelled,
    Failed(StoreError),
}

/// A report the database keeps refusing (not for being unavailable): logged
/// whole and counted, so the ones behind it go on. Its job is not changed;
/// if it expects a result, its ack deadline retries it.
fn report_skip(report: &Report, err: &StoreError) {
    metrics::result_failed();
    tracing::error!(
        job_id = report.job_id,
        attempt = report.attempt,
        outcome = report.outcome.as_str(),
        error = %err,
        "cannot apply a result report; skipping it"
    );
}

/// Adds a record of the results topic to the batch: its report, or a count
/// and a log line when it is malformed; and its position, to commit.
fn record_take(
    message: &rdkafka::message::BorrowedMessage<'_>,
    reports: &mut Vec<Report>,
    positions: &mut HashMap<(String, i32), i64>,
) {
    let position = (message.topic().to_owned(), message.partition());
    let last = positions.entry(position).or_insert(message.offset());
    *last = (*last).max(message.offset());
    match retry::report_parse(message.payload().unwrap_or_default()) {
        Ok(report) => reports.push(report),
        Err(err) => {
            metrics::result_malformed();
            tracing::warn!(
                partition = message.partition(),
                offset = message.offset(),
                error = %err,
                "skipping a malformed record on the results topic"
            );
        }
    }
}

/// Produces the dead-letter records owed (the `dead_letters` outbox), then
/// forgets them. At least once: a crash between the two produces a record
/// again, with the same job id and attempt.
pub struct DeadLetterProducer {
    store: Store,
    config: Arc<Config>,
    notify: Arc<Notify>,
}

impl DeadLetterProducer {
    pub fn new(store: Store, config: Arc<Config>, notify: Arc<Notify>) -> DeadLetterProducer {
        DeadLetterProducer {
            store,
            config,
            notify,
        }
    }

    pub async fn run(self, cancel: CancellationToken) {
        let mut topics: Vec<&str> = self
            .config
            .topics
            .values()
            .filter_map(|t| t.dead_letter_topic.as_deref())
            .chain(self.config.dead_letter_topic.as_deref())
            .filter(|t| !t.is_empty())
            .collect();
        topics.sort_unstable();
        topics.dedup();
        for topic in topics {
            if let Err(err) = kafka::topic_ensure(&self.config.kafka_brokers, topic, 1).await {
                tracing::warn!(topic, error = %err, "cannot create the dead-letter topic");
            }
        }
        let interval = Duration::from_millis(self.config.reconcile_interval_ms);
        let mut producer: Option<FutureProducer> = None;
        loop {
            match self.drain(&mut producer).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(num_records = n, "dead-letter records produced"),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot produce dead-letter records");
                    // A fresh producer next time: an idempotent producer can
                    // stay wedged after a broker outage.
                    producer = None;
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.notify.notified() => {}
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// Produces everything owed and not claimed by another instance;
    /// returns how many records. A record that fails stays claimed for
    /// `DEAD_LETTER_LEASE` and is tried again after it; the others go on.
    async fn drain(&self, producer: &mut Option<FutureProducer>) -> Result<usize, anyhow::Error> {
        let claim: u64 = rand::random();
        let mut produced = 0;
        loop {
            let letters = self
                .store
                .dead_letter_claim(claim, DEAD_LETTER_LEASE, 200)
                .await?;
            if letters.is_empty() {
                return Ok(produced);
            }
            let producer = match producer {
                Some(producer) => producer.clone(),
                None => {
                    let fresh = kafka::producer_create(
                        &self.config.kafka_brokers,
                        &self.config.kafka_options,
                        self.config.kafka_linger_ms,
                        self.config.kafka_message_timeout_ms,
                    )?;
                    *producer = Some(fresh.clone());
                    fresh
                }
            };
            let sends = letters.iter().map(|letter| {
                let producer = &producer;
                async move {
                    // None: dead letters were turned off for this topic since.
                    let result = match self.config.dead_letter_for(&letter.job.topic) {
                        Some(topic) => dead_letter_send(producer, topic, letter).await.map(Some),
                        None => Ok(None),
                    };
                    (letter, result)
                }
            });
            let mut done = Vec::with_capacity(letters.len());
            let mut failed = 0;
            for (letter, result) in futures::future::join_all(sends).await {
                match result {
                    Ok(sent) => {
                        produced += usize::from(sent.is_some());
                        metrics::dead_letters_produced(usize::from(sent.is_some()));
                        done.push((letter.job.id, letter.attempt));
                    }
                    Err(err) => {
                        failed += 1;
                        tracing::warn!(
                            job_id = letter.job.id,
                            attempt = letter.attempt,
                            tries = letter.tries,
                            error = %err,
                            "cannot produce a dead-letter record; it is tried again later"
                        );
                    }
                }
            }
            self.store.dead_letter_delete(&done).await?;
            if failed > 0 {
                anyhow::bail!("{failed} dead-letter records not produced");
            }
        }
    }
}

/// One dead-letter record: the job's key and payload, its own headers, and
/// tickler's: job id, the attempt it died at, its topic, schedule time and
/// the error it died of.
async fn dead_letter_send(
    producer: &FutureProducer,
    topic: &str,
    letter: &DeadLetter,
) -> Result<(), String> {
    let job = &letter.job;
    let mut fields: BTreeMap<&str, String> = BTreeMap::new();
    fields.insert(job::HEADER_JOB_ID, job.id.to_string());
    fields.insert(job::HEADER_ATTEMPT, letter.attempt.to_string());
    fields.insert(HEADER_TOPIC, job.topic.clone());
    fields.insert(
        job::HEADER_SCHEDULED_AT,
        job.schedule_time.timestamp_millis().to_string(),
    );
    fields.insert(HEADER_ERROR, letter.error.clone().unwrap_or_default());
    let mut headers = OwnedHeaders::new_with_capacity(job.headers.len() + fields.len());
    for (name, value) in job
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v))
        .chain(fields.iter().map(|(n, v)| (*n, v)))
    {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    let key = job.record_key();
    let record = FutureRecord::to(topic)
        .key(&key)
        .payload(&job.payload)
        .headers(headers);
    producer
        .send(record, Duration::from_secs(0))
        .await
        .map(|_| ())
        .map_err(|(err, _)| err.to_string())
}

//! Consumes the results topic with a consumer group and applies each batch
//! of reports through the [`Resolver`].
//!
//! Offsets are committed only after MySQL has the outcomes. Crash after the
//! commit of the outcomes and before the offset commit: the reports are read
//! again and are then ignored (the jobs moved on), so nothing is applied
//! twice and nothing is lost.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::outcome::{self, ResultReport};
use crate::kafka::{self, GroupConsumer, KafkaError, Received};
use crate::metrics;
use crate::roles::resolver::{Resolver, CHANNEL_TOPIC};
use crate::store::StoreError;

/// How long a batch waits for more records already on their way.
pub const RESULTS_LINGER: Duration = Duration::from_millis(2);
/// librdkafka `fetch.wait.max.ms`: tansu answers a fetch only then, so it
/// bounds how soon a report applies.
pub const RESULTS_FETCH_WAIT_MS: u32 = 50;
/// librdkafka `session.timeout.ms` of the results group.
pub const RESULTS_SESSION_TIMEOUT_MS: u32 = kafka::GROUP_SESSION_TIMEOUT_MS;
/// Failures other than "database unavailable" before a batch is applied
/// report by report.
const APPLY_FAILURES_MAX: u32 = 3;

/// Settings of the results consumer.
#[derive(Debug, Clone)]
pub struct ResultsConsumerConfig {
    pub brokers: String,
    /// Extra librdkafka properties, applied last.
    pub kafka_options: BTreeMap<String, String>,
    pub topic: String,
    pub group: String,
    /// Partitions when tickler has to create the topic.
    pub partitions: i32,
    /// Most reports applied in one transaction.
    pub batch: usize,
    pub linger: Duration,
}

impl ResultsConsumerConfig {
    pub fn from_config(config: &Config) -> Self {
        ResultsConsumerConfig {
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            topic: config.results.topic.clone(),
            group: config.results.group.clone(),
            partitions: config.results.topic_partitions,
            batch: config.results.batch,
            linger: RESULTS_LINGER,
        }
    }
}

/// What one batch did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ResultsReport {
    /// Records read.
    pub records: usize,
    /// Records that are not a report: counted, logged and skipped.
    pub malformed: usize,
    /// Reports the database refused for a reason other than being down:
    /// logged whole and skipped.
    pub skipped: usize,
    /// Whether the batch's offsets were committed.
    pub committed: bool,
}

/// Consumes the results topic until cancelled.
pub struct ResultsConsumer {
    resolver: Resolver,
    /// Made by [`ResultsConsumer::subscribe`], after the topic exists (as
    /// the consumer of the first release was, which restarts were proven
    /// with).
    consumer: std::sync::OnceLock<GroupConsumer>,
    config: ResultsConsumerConfig,
}

impl ResultsConsumer {
    pub fn new(resolver: Resolver, config: ResultsConsumerConfig) -> Self {
        ResultsConsumer {
            resolver,
            consumer: std::sync::OnceLock::new(),
            config,
        }
    }

    pub async fn run(self, cancel: CancellationToken) {
        tracing::info!(topic = %self.config.topic, group = %self.config.group, "results consumer started");
        if let Err(err) = self.subscribe().await {
            tracing::error!(topic = %self.config.topic, error = %err, "cannot consume the results topic");
            return;
        }
        while self.run_once(&cancel).await.is_some() {}
        tracing::info!("results consumer stopped");
    }

    /// Creates the results topic unless it exists, then the consumer, and
    /// subscribes it (it joins its group on the first poll). In that order:
    /// a consumer subscribed to a topic that does not exist yet may not see
    /// it until a later metadata refresh, a minute or more on. tansu and
    /// locked-down clusters do not create topics on use; a topic that cannot
    /// be created is logged and subscribed to all the same. Fails on
    /// settings librdkafka refuses.
    pub async fn subscribe(&self) -> Result<(), KafkaError> {
        if let Err(err) = kafka::topic_ensure_with(
            &self.config.brokers,
            &self.config.kafka_options,
            &self.config.topic,
            self.config.partitions,
        )
        .await
        {
            tracing::warn!(topic = %self.config.topic, error = %err, "cannot create the results topic");
        }
        // Offsets are committed by hand, after MySQL has the outcomes.
        let consumer = GroupConsumer::subscribe(
            &self.config.brokers,
            &self.config.kafka_options,
            &self.config.group,
            RESULTS_FETCH_WAIT_MS,
            &[&self.config.topic],
        )?;
        // A second call keeps the first consumer.
        let _ = self.consumer.set(consumer);
        Ok(())
    }

    /// Waits for the next records, applies them in one batch (with what
    /// else has arrived, up to `batch`) and commits their offsets. None when
    /// cancelled first: nothing of the batch is committed, and its reports
    /// are read again by whoever consumes next.
    pub async fn run_once(&self, cancel: &CancellationToken) -> Option<ResultsReport> {
        let mut report = ResultsReport::default();
        let Some(consumer) = self.consumer.get() else {
            tracing::error!("results consumer used before subscribe");
            return None;
        };
        let first = tokio::select! {
            _ = cancel.cancelled() => return None,
            message = consumer.recv() => message,
        };
        let mut reports = Vec::new();
        let mut positions: HashMap<(String, i32), i64> = HashMap::new();
        match first {
            Ok(message) => record_take(&message, &mut reports, &mut positions, &mut report),
            Err(err) => {
                tracing::warn!(error = %err, "results consumer error");
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Some(report);
            }
        }
        // Whatever else is already here joins the batch.
        for _ in 1..self.config.batch {
            match tokio::time::timeout(self.config.linger, consumer.recv()).await {
                Ok(Ok(message)) => record_take(&message, &mut reports, &mut positions, &mut report),
                Ok(Err(err)) => {
                    tracing::warn!(error = %err, "results consumer error");
                    break;
                }
                Err(_) => break,
            }
        }
        report.skipped = self.apply(&reports, cancel).await?;
        // Async: a lost commit only means reading reports again, which
        // changes nothing the second time.
        let last = positions
            .iter()
            .map(|((topic, partition), offset)| ((topic.as_str(), *partition), *offset));
        match consumer.commit(last) {
            Ok(()) => report.committed = true,
            Err(err) => tracing::warn!(error = %err, "cannot commit results offsets"),
        }
        Some(report)
    }

    /// Applies the batch, retrying while MySQL is unavailable. A batch that
    /// fails otherwise `APPLY_FAILURES_MAX` times (a deadlock would have
    /// passed by then) is applied report by report, so one report that
    /// cannot be applied does not hold up the others. Returns how many were
    /// skipped; None when cancelled first.
    async fn apply(&self, reports: &[ResultReport], cancel: &CancellationToken) -> Option<usize> {
        if reports.is_empty() {
            return Some(0);
        }
        match self.apply_retrying(reports, cancel).await {
            Applied::Yes => Some(0),
            Applied::Cancelled => None,
            Applied::Failed(_) if reports.len() > 1 => {
                let mut skipped = 0;
                for report in reports {
                    match self
                        .apply_retrying(std::slice::from_ref(report), cancel)
                        .await
                    {
                        Applied::Yes => {}
                        Applied::Cancelled => return None,
                        Applied::Failed(err) => {
                            report_skip(report, &err);
                            skipped += 1;
                        }
                    }
                }
                Some(skipped)
            }
            Applied::Failed(err) => {
                report_skip(&reports[0], &err);
                Some(1)
            }
        }
    }

    /// Retries while MySQL is unavailable; gives up after
    /// `APPLY_FAILURES_MAX` other failures.
    async fn apply_retrying(
        &self,
        reports: &[ResultReport],
        cancel: &CancellationToken,
    ) -> Applied {
        let mut delay = Duration::from_millis(100);
        let mut failures = 0;
        loop {
            match self.resolver.reports_apply(reports, CHANNEL_TOPIC).await {
                Ok(_) => return Applied::Yes,
                Err(err) => {
                    if !err.is_transient() {
                        failures += 1;
                        if failures >= APPLY_FAILURES_MAX {
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
fn report_skip(report: &ResultReport, err: &StoreError) {
    metrics::result_failed(report.job_id, report.attempt, report.outcome.as_str(), err);
}

/// Adds a record of the results topic to the batch: its report, or a count
/// and a log line when it is malformed; and its position, to commit.
fn record_take(
    message: &Received<'_>,
    reports: &mut Vec<ResultReport>,
    positions: &mut HashMap<(String, i32), i64>,
    report: &mut ResultsReport,
) {
    report.records += 1;
    let position = (message.topic().to_owned(), message.partition());
    let last = positions.entry(position).or_insert(message.offset());
    *last = (*last).max(message.offset());
    match outcome::report_parse(message.payload().unwrap_or_default()) {
        Ok(parsed) => reports.push(parsed),
        Err(err) => {
            report.malformed += 1;
            metrics::result_malformed(message.partition(), message.offset(), &err);
        }
    }
}

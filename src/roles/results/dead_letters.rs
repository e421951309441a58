//! Produces the dead-letter records owed (the `dead_letters` outbox), then
//! forgets them. At least once: a crash between the two produces a record
//! again, with the same job id and attempt.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::config::{Config, KafkaSettings, TopicRules};
use crate::kafka::{self, KafkaError, Producer, Record};
use crate::metrics;
use crate::roles::service::{PassError, Service};
use crate::store::{DeadLetter, Store, StoreError};

/// Headers of a dead-letter record, besides the job's own.
pub const HEADER_TOPIC: &str = "tickler-topic";
pub const HEADER_ERROR: &str = "tickler-error";

/// How long an instance holds the dead-letter records it is producing; a
/// record that failed is tried again after it.
pub const DEAD_LETTER_LEASE: Duration = Duration::from_secs(60);
/// Outbox rows claimed at a time.
pub const DEAD_LETTER_BATCH: u32 = 200;

/// Settings of the dead-letter producer.
#[derive(Debug, Clone)]
pub struct DeadLetterConfig {
    /// The brokers, and the producer's settings.
    pub kafka: KafkaSettings,
    /// Each job's dead-letter topic follows its topic's.
    pub rules: Arc<TopicRules>,
    /// Time between passes when nothing wakes the producer.
    pub interval: Duration,
    pub lease: Duration,
    pub batch: u32,
}

impl Default for DeadLetterConfig {
    fn default() -> Self {
        DeadLetterConfig::from_config(&Config::default())
    }
}

impl DeadLetterConfig {
    pub fn from_config(config: &Config) -> Self {
        DeadLetterConfig {
            interval: Duration::from_millis(config.reconciler.interval_ms),
            lease: DEAD_LETTER_LEASE,
            batch: DEAD_LETTER_BATCH,
            kafka: config.kafka.clone(),
            rules: Arc::new(config.topic_rules()),
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeadLettersReport {
    /// Records produced and forgotten.
    pub produced: usize,
    /// Rows forgotten without a record: dead letters were turned off for
    /// their topic since.
    pub dropped: usize,
    /// Records the broker did not take: tried again after their claim.
    pub failed: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    #[error("dead-letter outbox: {0}")]
    Store(#[from] StoreError),
    #[error("cannot create the dead-letter producer: {0}")]
    Producer(#[from] KafkaError),
}

pub struct DeadLetterProducer {
    store: Store,
    config: DeadLetterConfig,
    /// Woken when a job dies.
    notify: Arc<Notify>,
    /// Made on first use; dropped after a failed pass, since an idempotent
    /// producer can stay wedged after a broker outage.
    producer: Mutex<Option<Producer>>,
}

impl DeadLetterProducer {
    pub fn new(store: Store, config: DeadLetterConfig, notify: Arc<Notify>) -> DeadLetterProducer {
        DeadLetterProducer {
            store,
            config,
            notify,
            producer: Mutex::new(None),
        }
    }
}

impl Service for DeadLetterProducer {
    type Report = DeadLettersReport;
    type Error = DeadLetterError;
    const NAME: &'static str = "dead-letter producer";
    const PASS: &'static str = "dead letters";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    fn woken(&self) -> Option<Arc<Notify>> {
        Some(self.notify.clone())
    }

    /// Creates the dead-letter topics the settings name, where the broker
    /// lets it.
    async fn start(&mut self) {
        let kafka = &self.config.kafka;
        for topic in self.config.rules.dead_letter_topics() {
            if let Err(err) =
                kafka::topic_ensure_with(&kafka.brokers, &kafka.options, topic, 1).await
            {
                tracing::warn!(topic, error = %err, "cannot create the dead-letter topic");
            }
        }
    }

    /// Produces everything owed and not claimed by another instance. A
    /// record that fails stays claimed for `lease` and is tried again after
    /// it; the others go on.
    async fn run_once(
        &mut self,
        _now: DateTime<Utc>,
    ) -> Result<DeadLettersReport, DeadLetterError> {
        let mut report = DeadLettersReport::default();
        let claim: u64 = rand::random();
        loop {
            let letters = self
                .store
                .dead_letter_claim(claim, self.config.lease, self.config.batch)
                .await?;
            if letters.is_empty() {
                break;
            }
            let producer = self.producer()?;
            let rules = &self.config.rules;
            let sends = letters.iter().map(|letter| {
                let producer = &producer;
                async move {
                    // None: dead letters were turned off for this topic since.
                    let result = match rules.dead_letter_for(&letter.job.topic) {
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
                    Ok(Some(())) => {
                        report.produced += 1;
                        metrics::dead_letters_produced(1);
                        done.push((letter.job.id, letter.attempt));
                    }
                    Ok(None) => {
                        report.dropped += 1;
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
                // What failed stays claimed; stop here, with a fresh
                // producer next time.
                report.failed += failed;
                *self.producer.lock().unwrap_or_else(PoisonError::into_inner) = None;
                break;
            }
        }
        Ok(report)
    }

    fn passed(&self, report: &DeadLettersReport) -> bool {
        if report.produced > 0 {
            tracing::info!(
                num_records = report.produced,
                "dead-letter records produced"
            );
        }
        false
    }
}

impl PassError for DeadLetterError {
    fn record(&self, pass: &'static str) {
        match self {
            DeadLetterError::Store(err) => metrics::store_failed(pass, err),
            DeadLetterError::Producer(err) => metrics::pass_failed(pass, err),
        }
    }
}

impl DeadLetterProducer {
    fn producer(&self) -> Result<Producer, KafkaError> {
        let mut producer = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(producer) = producer.as_ref() {
            return Ok(producer.clone());
        }
        let settings = &self.config;
        let fresh = Producer::create(
            &settings.kafka.brokers,
            &settings.kafka.options,
            settings.kafka.linger_ms,
            settings.kafka.message_timeout_ms,
        )?;
        *producer = Some(fresh.clone());
        Ok(fresh)
    }
}

/// One dead-letter record: the job's key, payload and headers, and
/// tickler's: job id, the attempt it died at, its topic, schedule time and
/// the error it died of.
async fn dead_letter_send(
    producer: &Producer,
    topic: &str,
    letter: &DeadLetter,
) -> Result<(), String> {
    let job = &letter.job;
    let record = Record::of_job(topic, job, letter.attempt, 2)
        .header(HEADER_TOPIC, job.topic.as_bytes())
        .header(
            HEADER_ERROR,
            letter.error.as_deref().unwrap_or_default().as_bytes(),
        );
    match producer.send(record) {
        Ok(delivery) => delivery.await.map(|_| ()).map_err(|err| err.to_string()),
        Err(err) => Err(err.to_string()),
    }
}

//! Due-time watermarks (part of the reconciler's role): per target topic,
//! the instant T such that every job due at or before T is produced,
//! cancelled, expired or dead — what a stream processor needs to close its
//! event-time windows. Each pass reads the outstanding jobs already due
//! (`pending` or `dispatching`: a claim in doubt and a paused topic's held
//! jobs hold the watermark) and raises each topic's in `topic_watermarks`,
//! never lowering one, so it holds across instances and failovers.
//!
//! A topic with nothing outstanding goes to now less
//! `reconciler.watermark_settle_ms`:
//! a create whose `delay_ms` was counted a moment ago may still be
//! committing. A job created or moved to a time at or before its topic's
//! watermark arrives after it (late, in a stream processor's words).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::kafka::{self, KafkaError, Producer, Record};
use crate::metrics;
use crate::roles::service::{PassError, Service};
use crate::store::{Store, StoreError, Watermark};

/// Pending jobs looked at, after the instant a pass decides, for topics
/// that need a watermark row: a topic gets one as its jobs come near.
const UPCOMING: u32 = 1_000;

#[derive(Debug, Clone)]
pub struct WatermarksConfig {
    /// Time between passes.
    pub interval: Duration,
    /// How far behind now a topic with nothing outstanding stands.
    pub settle: Duration,
    /// Where the watermarks are produced, if anywhere.
    pub topic: Option<String>,
    pub brokers: String,
    pub kafka_options: BTreeMap<String, String>,
    pub linger_ms: u64,
    pub message_timeout_ms: u64,
}

impl WatermarksConfig {
    pub fn from_config(config: &Config) -> Self {
        WatermarksConfig {
            interval: Duration::from_millis(config.reconciler.watermark_interval_ms),
            settle: Duration::from_millis(config.reconciler.watermark_settle_ms),
            topic: config.reconciler.watermark_topic.clone(),
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            linger_ms: config.kafka.linger_ms,
            message_timeout_ms: config.kafka.message_timeout_ms,
        }
    }
}

/// A watermark record's value (its key is the target topic).
#[derive(Debug, Serialize)]
pub struct WatermarkRecord<'a> {
    /// The target topic.
    pub topic: &'a str,
    /// Every job of the topic due at or before this is done with.
    pub watermark: String,
    /// The same instant, in milliseconds since the epoch.
    pub watermark_ms: i64,
    /// Each partition of the topic with its end when the watermark was
    /// decided: every record of a job due at or before it lies before.
    pub partitions: Vec<PartitionEnd>,
}

#[derive(Debug, Serialize)]
pub struct PartitionEnd {
    pub partition: i32,
    pub end_offset: i64,
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum WatermarksError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("watermark record: {0}")]
    Kafka(#[from] KafkaError),
}

impl PassError for WatermarksError {
    fn record(&self, pass: &'static str) {
        match self {
            WatermarksError::Store(err) => err.record(pass),
            WatermarksError::Kafka(err) => metrics::pass_failed(pass, err),
        }
    }
}

impl Default for WatermarksConfig {
    fn default() -> Self {
        WatermarksConfig::from_config(&Config::default())
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct WatermarksReport {
    /// Topics held back by a job outstanding.
    pub held: usize,
    /// Watermark records produced.
    pub produced: usize,
}

pub struct Watermarks {
    store: Store,
    config: WatermarksConfig,
    /// Made at the first pass that has a watermark to produce.
    producer: Option<Producer>,
    /// The watermark last produced for each topic (a restart produces
    /// every topic's once more).
    produced: BTreeMap<String, DateTime<Utc>>,
}

impl Watermarks {
    pub fn new(store: Store, config: WatermarksConfig) -> Watermarks {
        Watermarks {
            store,
            config,
            producer: None,
            produced: BTreeMap::new(),
        }
    }

    /// Produces each watermark that rose since it was last produced, with
    /// its topic's partition ends read after it was decided; waits for the
    /// broker's acknowledgements. A topic the broker lacks is left out.
    async fn produce(&mut self, target: &str, marks: &[Watermark]) -> Result<usize, KafkaError> {
        let rose: Vec<&Watermark> = marks
            .iter()
            .filter(|mark| self.produced.get(&mark.topic) < Some(&mark.at))
            .collect();
        if rose.is_empty() {
            return Ok(0);
        }
        if self.producer.is_none() {
            if let Err(err) = kafka::topic_ensure_with(
                &self.config.brokers,
                &self.config.kafka_options,
                target,
                1,
            )
            .await
            {
                tracing::warn!(topic = %target, error = %err, "cannot create the watermark topic");
            }
            self.producer = Some(Producer::create(
                &self.config.brokers,
                &self.config.kafka_options,
                self.config.linger_ms,
                self.config.message_timeout_ms,
            )?);
        }
        let mut ends = kafka::partition_ends(
            &self.config.brokers,
            &self.config.kafka_options,
            rose.iter().map(|mark| mark.topic.clone()).collect(),
        )
        .await?;
        let mut sent = Vec::new();
        for mark in rose {
            let ends = ends.remove(&mark.topic).unwrap_or_default();
            if ends.is_empty() {
                continue;
            }
            let value = serde_json::to_vec(&WatermarkRecord {
                topic: &mark.topic,
                watermark: crate::domain::job::time_format(mark.at),
                watermark_ms: mark.at.timestamp_millis(),
                partitions: ends
                    .into_iter()
                    .map(|(partition, end_offset)| PartitionEnd {
                        partition,
                        end_offset,
                    })
                    .collect(),
            })
            .unwrap_or_default();
            let record = Record::to(target, 0)
                .key(mark.topic.as_bytes())
                .value(&value);
            let producer = self.producer.as_ref().ok_or(KafkaError::Canceled)?;
            sent.push((mark.topic.clone(), mark.at, producer.send(record)?));
        }
        let n = sent.len();
        for (topic, at, delivery) in sent {
            delivery.await?;
            self.produced.insert(topic, at);
        }
        Ok(n)
    }
}

/// The watermark a topic whose earliest outstanding job is due at
/// `earliest` may have at `free` (now less the settle time): just before
/// that job, and never past `free`.
pub fn held_at(earliest: DateTime<Utc>, free: DateTime<Utc>) -> DateTime<Utc> {
    (earliest - chrono::Duration::milliseconds(1)).min(free)
}

impl Service for Watermarks {
    type Report = WatermarksReport;
    type Error = WatermarksError;
    const NAME: &'static str = "watermarks";
    const PASS: &'static str = "watermarks";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn now(&self) -> Result<DateTime<Utc>, WatermarksError> {
        Ok(self.store.db_now().await?)
    }

    async fn run_once(&mut self, now: DateTime<Utc>) -> Result<WatermarksReport, WatermarksError> {
        let free = now - chrono::Duration::milliseconds(self.config.settle.as_millis() as i64);
        let held: Vec<(String, DateTime<Utc>)> = self
            .store
            .jobs_outstanding_earliest(free)
            .await?
            .into_iter()
            .map(|(topic, earliest)| (topic, held_at(earliest, free)))
            .collect();
        let upcoming = self.store.jobs_upcoming_topics(free, UPCOMING).await?;
        self.store.watermarks_raise(&held, &upcoming, free).await?;
        let marks = self.store.watermarks().await?;
        metrics::watermarks(
            &marks
                .iter()
                .map(|mark| {
                    (
                        mark.topic.clone(),
                        (now - mark.at).num_milliseconds().max(0) as f64 / 1000.0,
                    )
                })
                .collect::<Vec<_>>(),
        );
        let produced = match self.config.topic.clone() {
            Some(target) => self.produce(&target, &marks).await?,
            None => 0,
        };
        Ok(WatermarksReport {
            held: held.len(),
            produced,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watermark_stops_just_before_the_earliest_outstanding_job() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let free = at("2027-01-01T00:00:10Z");
        assert_eq!(
            held_at(at("2027-01-01T00:00:04Z"), free),
            at("2027-01-01T00:00:03.999Z")
        );
        assert_eq!(
            held_at(at("2027-01-01T00:00:30Z"), free),
            free,
            "never past now less the settle time"
        );
    }
}

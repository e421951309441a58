//! Consumption (#59, part of the reconciler's role): the consumer groups
//! that read tickler's topics — those `[topics.T] consumer_groups` names,
//! those found reading them (`consumption.discover`), and those followed
//! before — are followed every `consumption.interval_ms`:
//!
//! - a group's committed offset on a partition that moved on is recorded
//!   (`consumer_offsets`), so that a job's view says when each group read
//!   past its record (`consumed`);
//! - how far behind each group is, in records and in the age of the oldest
//!   record it has not read, is a gauge; past `alert_after_ms` (or the
//!   topic's `consumed_within_ms`) the group is stalled, and the oldest job
//!   it has not read is named in the log.
//!
//! The age is kept from when each partition's end was seen to pass the
//! group's offset: precise to a pass, no record is read. Several instances
//! may follow the same groups: a sample recorded twice is one row.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::kafka::groups::{GroupPosition, GroupReader};
use crate::kafka::KafkaError;
use crate::metrics;
use crate::roles::service::{PassError, Service};
use crate::store::{OffsetSample, Store, StoreError};

/// How long one group's reading may take.
const READ_WAIT: Duration = Duration::from_secs(3);
/// Time between looks for the groups reading tickler's topics.
const DISCOVER_EVERY: Duration = Duration::from_secs(60);
/// Time between purges of samples older than the jobs' retention.
const PURGE_EVERY: Duration = Duration::from_secs(3_600);

#[derive(Debug, Clone)]
pub struct ConsumptionConfig {
    pub interval: Duration,
    pub alert_after: Duration,
    pub discover: bool,
    pub brokers: String,
    pub kafka_options: BTreeMap<String, String>,
    /// The groups configured for each topic.
    pub groups: BTreeMap<String, Vec<String>>,
    /// Topics whose stall threshold is their own.
    pub within: BTreeMap<String, Duration>,
    /// Samples older than this are purged (`jobs.retention_days`; None:
    /// kept).
    pub retention: Option<Duration>,
}

impl ConsumptionConfig {
    pub fn from_config(config: &Config) -> Self {
        let mut groups = BTreeMap::new();
        let mut within = BTreeMap::new();
        for (topic, settings) in &config.topics {
            if let Some(named) = &settings.consumer_groups {
                groups.insert(topic.clone(), named.clone());
            }
            if let Some(ms) = settings.consumed_within_ms {
                within.insert(topic.clone(), Duration::from_millis(ms));
            }
        }
        ConsumptionConfig {
            interval: Duration::from_millis(config.consumption.interval_ms),
            alert_after: Duration::from_millis(config.consumption.alert_after_ms),
            discover: config.consumption.discover,
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            groups,
            within,
            retention: (config.jobs.retention_days > 0)
                .then(|| Duration::from_secs(u64::from(config.jobs.retention_days) * 86_400)),
        }
    }
}

/// Why a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsumptionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("consumer group reader: {0}")]
    Kafka(#[from] KafkaError),
}

impl PassError for ConsumptionError {
    fn record(&self, pass: &'static str) {
        match self {
            ConsumptionError::Store(err) => err.record(pass),
            ConsumptionError::Kafka(err) => metrics::pass_failed(pass, err),
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConsumptionReport {
    /// (topic, group) pairs read.
    pub followed: usize,
    /// Offsets that moved on, recorded.
    pub recorded: usize,
    /// Pairs stalled.
    pub stalled: usize,
}

/// How far behind a group is on one (topic, group).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Behind {
    pub records: i64,
    pub seconds: f64,
    /// The partition, offset and time of its oldest record not read.
    pub oldest: Option<(i32, i64, DateTime<Utc>)>,
}

/// One partition as followed for one group.
#[derive(Debug, Default)]
struct Followed {
    committed: Option<i64>,
    /// The partition's ends seen, each with when it was first seen, oldest
    /// first; those the group has read past are dropped.
    ends: VecDeque<(i64, DateTime<Utc>)>,
}

impl Followed {
    /// Takes a reading at `now`: whether the committed offset moved, and
    /// how far behind the group is on this partition.
    fn take(
        &mut self,
        position: GroupPosition,
        now: DateTime<Utc>,
    ) -> (bool, i64, Option<DateTime<Utc>>) {
        let moved = position.committed.is_some() && position.committed != self.committed;
        if position.committed.is_some() {
            self.committed = position.committed;
        }
        if self
            .ends
            .back()
            .is_none_or(|(high, _)| position.high > *high)
        {
            self.ends.push_back((position.high, now));
        }
        let at = self.committed.unwrap_or(0);
        // An end at or below the offset is read; the last one stays, to
        // know when the next record came.
        while self.ends.len() > 1 && self.ends.front().is_some_and(|(high, _)| *high <= at) {
            self.ends.pop_front();
        }
        let behind = (position.high - at).max(0);
        let since = (behind > 0)
            .then(|| {
                self.ends
                    .iter()
                    .find(|(high, _)| *high > at)
                    .map(|(_, seen)| *seen)
            })
            .flatten();
        (moved, behind, since)
    }
}

pub struct Consumption {
    store: Store,
    config: ConsumptionConfig,
    readers: HashMap<String, Arc<GroupReader>>,
    /// The groups followed, by topic.
    followed: BTreeMap<String, BTreeSet<String>>,
    partitions: HashMap<(String, String, i32), Followed>,
    stalled: BTreeSet<(String, String)>,
    recorded_loaded: bool,
    discovered_at: Option<Instant>,
    purged_at: Option<Instant>,
}

impl Consumption {
    pub fn new(store: Store, config: ConsumptionConfig) -> Self {
        Consumption {
            store,
            config,
            readers: HashMap::new(),
            followed: BTreeMap::new(),
            partitions: HashMap::new(),
            stalled: BTreeSet::new(),
            recorded_loaded: false,
            discovered_at: None,
            purged_at: None,
        }
    }

    fn reader(&mut self, group: &str) -> Result<Arc<GroupReader>, KafkaError> {
        if let Some(reader) = self.readers.get(group) {
            return Ok(reader.clone());
        }
        let reader = Arc::new(GroupReader::new(
            &self.config.brokers,
            &self.config.kafka_options,
            group,
        )?);
        self.readers.insert(group.to_owned(), reader.clone());
        Ok(reader)
    }

    /// The groups to follow: configured, recorded before (once), found
    /// reading tickler's topics (every minute).
    async fn follow(&mut self) -> Result<(), ConsumptionError> {
        for (topic, groups) in &self.config.groups {
            self.followed
                .entry(topic.clone())
                .or_default()
                .extend(groups.iter().cloned());
        }
        if !self.recorded_loaded {
            for (topic, groups) in self.store.consumer_groups_recorded().await? {
                self.followed.entry(topic).or_default().extend(groups);
            }
            self.recorded_loaded = true;
        }
        if self.config.discover
            && self
                .discovered_at
                .is_none_or(|at| at.elapsed() >= DISCOVER_EVERY)
        {
            self.discovered_at = Some(Instant::now());
            self.discover().await?;
        }
        Ok(())
    }

    /// Adds the groups whose members are assigned tickler's topics (those
    /// followed, and those of the jobs due within a day).
    async fn discover(&mut self) -> Result<(), ConsumptionError> {
        let mut topics: BTreeSet<String> = self.followed.keys().cloned().collect();
        topics.extend(
            self.store
                .job_topics_due_within(Duration::from_secs(86_400), 1_000)
                .await?
                .into_iter()
                .map(|(topic, _)| topic),
        );
        let reader = self.reader("tickler-discovery")?;
        let found = tokio::task::spawn_blocking(move || reader.groups_reading(&topics, READ_WAIT))
            .await
            .map_err(|_| KafkaError::Canceled)?;
        match found {
            Ok(found) => {
                for (topic, groups) in found {
                    self.followed.entry(topic).or_default().extend(groups);
                }
            }
            // Not every Kafka-API broker answers ListGroups: the groups
            // configured are followed all the same.
            Err(err) => tracing::debug!(error = %err, "consumer groups could not be listed"),
        }
        Ok(())
    }

    /// Reads where `group` stands on `topic` and records what moved.
    async fn read(
        &mut self,
        topic: &str,
        group: &str,
        now: DateTime<Utc>,
        samples: &mut Vec<OffsetSample>,
    ) -> Result<Behind, ConsumptionError> {
        let reader = self.reader(group)?;
        let owned = topic.to_owned();
        let positions = tokio::task::spawn_blocking(move || reader.positions(&owned, READ_WAIT))
            .await
            .map_err(|_| KafkaError::Canceled)??;
        let mut behind = Behind::default();
        for position in positions {
            let key = (topic.to_owned(), group.to_owned(), position.partition);
            let followed = self.partitions.entry(key).or_default();
            let (moved, records, since) = followed.take(position, now);
            if moved {
                samples.push(OffsetSample {
                    topic: topic.to_owned(),
                    partition: position.partition,
                    group: group.to_owned(),
                    committed: followed.committed.unwrap_or(0),
                });
            }
            behind.records += records;
            if let Some(since) = since {
                let seconds = (now - since).num_milliseconds().max(0) as f64 / 1000.0;
                if seconds >= behind.seconds {
                    behind.seconds = seconds;
                    behind.oldest =
                        Some((position.partition, followed.committed.unwrap_or(0), since));
                }
            }
        }
        Ok(behind)
    }

    /// Says a group stalled (once, until it reads again), naming the oldest
    /// job it has not read.
    async fn stall_note(&mut self, topic: &str, group: &str, behind: &Behind) {
        let key = (topic.to_owned(), group.to_owned());
        if !self.stalled.insert(key) {
            return;
        }
        let mut oldest_job = None;
        if let Some((partition, offset, since)) = behind.oldest {
            let slack = chrono::Duration::from_std(self.config.interval * 2).unwrap_or_default()
                + chrono::Duration::seconds(5);
            oldest_job = self
                .store
                .job_first_unconsumed(topic, partition, offset, since - slack, since + slack)
                .await
                .unwrap_or_else(|err| {
                    tracing::debug!(error = %err, "the oldest job not consumed could not be found");
                    None
                });
        }
        metrics::consumer_stalled(topic, group, behind.records, behind.seconds, oldest_job);
    }

    async fn purge(&mut self, now: DateTime<Utc>) -> Result<(), ConsumptionError> {
        let Some(retention) = self.config.retention else {
            return Ok(());
        };
        if self.purged_at.is_some_and(|at| at.elapsed() < PURGE_EVERY) {
            return Ok(());
        }
        self.purged_at = Some(Instant::now());
        let before = now - chrono::Duration::from_std(retention).unwrap_or_default();
        self.store.consumer_offsets_purge(before).await?;
        Ok(())
    }
}

impl Service for Consumption {
    type Report = ConsumptionReport;
    type Error = ConsumptionError;
    const NAME: &'static str = "consumption";
    const PASS: &'static str = "consumption";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    async fn now(&self) -> Result<DateTime<Utc>, ConsumptionError> {
        Ok(self.store.db_now().await?)
    }

    async fn run_once(
        &mut self,
        now: DateTime<Utc>,
    ) -> Result<ConsumptionReport, ConsumptionError> {
        self.follow().await?;
        let pairs: Vec<(String, String)> = self
            .followed
            .iter()
            .flat_map(|(topic, groups)| groups.iter().map(move |g| (topic.clone(), g.clone())))
            .collect();
        let mut samples = Vec::new();
        let mut report = ConsumptionReport {
            followed: pairs.len(),
            ..ConsumptionReport::default()
        };
        for (topic, group) in pairs {
            let behind = match self.read(&topic, &group, now, &mut samples).await {
                Ok(behind) => behind,
                Err(err) => {
                    tracing::debug!(topic, group, error = %err, "a consumer group's offsets could not be read");
                    continue;
                }
            };
            let within = self
                .config
                .within
                .get(&topic)
                .copied()
                .unwrap_or(self.config.alert_after);
            let stalled = behind.seconds > within.as_secs_f64();
            metrics::consumer_behind(&topic, &group, behind.records, behind.seconds, stalled);
            if stalled {
                report.stalled += 1;
                self.stall_note(&topic, &group, &behind).await;
            } else if self.stalled.remove(&(topic.clone(), group.clone())) {
                tracing::info!(topic, group, "a stalled consumer group reads again");
            }
        }
        report.recorded = samples.len();
        self.store.consumer_offsets_record(&samples).await?;
        self.purge(now).await?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn position(committed: Option<i64>, high: i64) -> GroupPosition {
        GroupPosition {
            partition: 0,
            committed,
            high,
        }
    }

    #[test]
    fn the_age_behind_is_from_when_the_end_first_passed_the_offset() {
        let mut followed = Followed::default();
        assert_eq!(
            followed.take(position(Some(10), 10), at(0)),
            (true, 0, None)
        );
        // Records arrive at 5 s and 8 s; the group reads nothing.
        assert_eq!(
            followed.take(position(Some(10), 12), at(5)),
            (false, 2, Some(at(5)))
        );
        assert_eq!(
            followed.take(position(Some(10), 15), at(8)),
            (false, 5, Some(at(5)))
        );
        // It reads the first two: what is left came at 8 s.
        assert_eq!(
            followed.take(position(Some(12), 15), at(9)),
            (true, 3, Some(at(8)))
        );
        // Caught up: nothing behind, nothing moved twice.
        assert_eq!(
            followed.take(position(Some(15), 15), at(10)),
            (true, 0, None)
        );
        assert_eq!(
            followed.take(position(Some(15), 15), at(11)),
            (false, 0, None)
        );
    }

    #[test]
    fn a_group_that_committed_nothing_is_behind_the_whole_partition() {
        let mut followed = Followed::default();
        assert_eq!(
            followed.take(position(None, 4), at(0)),
            (false, 4, Some(at(0)))
        );
        assert_eq!(
            followed.take(position(None, 4), at(3)),
            (false, 4, Some(at(0)))
        );
    }
}

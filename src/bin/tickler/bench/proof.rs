//! The proof stage (#59): a steady stream of jobs, every one's record read
//! back by the verifier; then a fresh reader from the beginning of the
//! topic. Prints how many records the broker lost after acknowledging them
//! (what verification found missing and produced again), whether every
//! job's record is on the topic now, and the duplicates, which may only be
//! one job's two attempts. The consumed stage: a group that commits every
//! second, then stops for a while: each job's `consumed` beside the commit
//! that passed it, and the stalled gauge raised and cleared.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use tickler::kafka;
use tickler::kafka::tail::header;
use tickler::store::Store;

use super::{percentiles, until, Bench};

/// How long the fresh reader waits for one more record before it takes
/// the topic as read (seconds; a smoke run's topic is small).
const READ_IDLE: (u64, u64) = (10, 3);

impl Bench {
    /// Long because the stage is one script: the stream created second by
    /// second, the wait for every job verified, the fresh reading, the
    /// figures.
    pub(super) async fn proof(&self, store: &Store) -> anyhow::Result<()> {
        let (n, rate) = (self.options.proof, self.options.rate.max(1));
        let topic = self.topic();
        let secs = n.div_ceil(rate);
        let start = Utc::now() + chrono::Duration::seconds(2);
        let step_us = 1_000_000 / rate as i64;
        let mut created = 0u64;
        for second in 0..secs {
            until(start + chrono::Duration::seconds(second as i64 - 2)).await;
            let count = rate.min(n - created);
            let jobs = (0..count)
                .map(|i| {
                    let due = start
                        + chrono::Duration::seconds(second as i64)
                        + chrono::Duration::microseconds(step_us * i as i64);
                    self.job(due, created + i)
                })
                .collect();
            self.batches_created(jobs).await?;
            created += count;
        }
        // Every job dispatched and read back (or a minute past the last
        // one's time: then the figures say what was not).
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut tally = store.job_verify_tally(&topic).await?;
        until(start + chrono::Duration::seconds(secs as i64)).await;
        while Instant::now() < deadline {
            tally = store.job_verify_tally(&topic).await?;
            if tally.verified == n {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        let reading = Instant::now();
        let idle = Duration::from_secs(if self.options.smoke {
            READ_IDLE.1
        } else {
            READ_IDLE.0
        });
        let on_topic = topic_read(&self.config.kafka.brokers, &topic, idle).await?;
        let read_secs = reading.elapsed().as_secs_f64();
        let found = tally
            .attempts
            .iter()
            .filter(|key| on_topic.contains_key(key))
            .count();
        let duplicates = on_topic.values().filter(|&&count| count > 1).count();
        let mut attempts_per_job: HashMap<u64, u32> = HashMap::new();
        for (id, _) in on_topic.keys() {
            *attempts_per_job.entry(*id).or_default() += 1;
        }
        let two_attempts = attempts_per_job.values().filter(|&&a| a > 1).count();
        let mut lag = tally.verify_lag_ms.clone();
        println!(
            "proof: {n} jobs at {rate}/s: {} verified, {} produced again because their acknowledged record was missing, {} not yet verified",
            tally.verified,
            tally.produced_again,
            tally.jobs - tally.verified
        );
        println!("proof: verified after dispatch {}", percentiles(&mut lag));
        println!(
            "proof: a fresh reader from the beginning ({read_secs:.1} s) finds {found} of {n} jobs' current records ({} missing); (job id, attempt) read twice: {duplicates}; jobs with records of two attempts: {two_attempts}",
            n as usize - found
        );
        if found as u64 != n || duplicates > 0 {
            bail!("proof: {found} of {n} jobs' records on the topic, {duplicates} duplicated");
        }
        Ok(())
    }
}

/// Every record of tickler's on `topic`, read from the beginning by a new
/// reader: how many times each (job id, attempt) is there.
async fn topic_read(
    brokers: &str,
    topic: &str,
    idle: Duration,
) -> anyhow::Result<HashMap<(u64, u32), u32>> {
    let consumer: BaseConsumer =
        kafka::tail::base_consumer_assigned(brokers, topic, Offset::Beginning)?;
    let read = tokio::task::spawn_blocking(move || {
        let mut seen: HashMap<(u64, u32), u32> = HashMap::new();
        let mut last = Instant::now();
        while last.elapsed() < idle {
            let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            last = Instant::now();
            let id =
                header(&message, tickler::domain::job::HEADER_JOB_ID).and_then(|v| v.parse().ok());
            let attempt =
                header(&message, tickler::domain::job::HEADER_ATTEMPT).and_then(|v| v.parse().ok());
            if let (Some(id), Some(attempt)) = (id, attempt) {
                *seen.entry((id, attempt)).or_default() += 1;
            }
        }
        seen
    })
    .await?;
    Ok(read)
}

/// The consumer group of the consumed stage's topic.
pub(super) fn readers_group(topic: &str) -> String {
    format!("{topic}-readers")
}

/// How soon a stalled group is said to be, in the consumed stage.
pub(super) const CONSUMED_WITHIN_MS: u64 = 30_000;

/// The consumed stage's group: reads every record as it arrives and
/// commits its positions every second, but not while `paused` says so;
/// says when it committed what.
struct Readers {
    commits: Arc<Mutex<Vec<(DateTime<Utc>, HashMap<i32, i64>)>>>,
    paused: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Readers {
    fn start(brokers: &str, topic: &str, group: &str) -> anyhow::Result<Readers> {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("fetch.wait.max.ms", "5")
            .create()?;
        let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10))?;
        let mut assignment = TopicPartitionList::new();
        for t in metadata.topics() {
            for p in t.partitions() {
                assignment.add_partition_offset(topic, p.id(), Offset::Beginning)?;
            }
        }
        consumer.assign(&assignment)?;
        let readers = Readers {
            commits: Arc::default(),
            paused: Arc::default(),
            stop: Arc::default(),
        };
        let (commits, paused, stop, topic) = (
            readers.commits.clone(),
            readers.paused.clone(),
            readers.stop.clone(),
            topic.to_owned(),
        );
        std::thread::spawn(move || {
            let mut next: HashMap<i32, i64> = HashMap::new();
            let mut committed_at = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if let Some(Ok(message)) = consumer.poll(Duration::from_millis(50)) {
                    next.insert(message.partition(), message.offset() + 1);
                }
                if committed_at.elapsed() < Duration::from_secs(1) || paused.load(Ordering::Relaxed)
                {
                    continue;
                }
                committed_at = Instant::now();
                let mut list = TopicPartitionList::new();
                for (partition, offset) in &next {
                    let _ = list.add_partition_offset(&topic, *partition, Offset::Offset(*offset));
                }
                if !next.is_empty() && consumer.commit(&list, CommitMode::Sync).is_ok() {
                    commits
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push((Utc::now(), next.clone()));
                }
            }
        });
        Ok(readers)
    }
}

impl Bench {
    /// Long because the stage is one script: a stream read by a group
    /// that commits every second and stops committing for a while; the
    /// stalled gauge watched meanwhile; then each job's `consumed` beside
    /// the commit that passed its record.
    pub(super) async fn consumed(&self, store: &Store) -> anyhow::Result<()> {
        let topic = self.topic();
        let group = readers_group(&topic);
        let (rate, secs, pause) = if self.options.smoke {
            (50, 6, (2, 4))
        } else {
            (500, 120, (20, 80))
        };
        let readers = Readers::start(&self.config.kafka.brokers, &topic, &group)?;
        let start = Utc::now() + chrono::Duration::seconds(2);
        let began = Instant::now() + Duration::from_secs(2);
        let metrics_url = format!("{}/metrics", self.base_url());
        let mut stalled_seen: Vec<(f64, bool)> = Vec::new();
        let mut ids = Vec::new();
        let step_us = 1_000_000 / rate as i64;
        for second in 0..secs + 20 {
            until(start + chrono::Duration::seconds(second as i64 - 1)).await;
            let elapsed = began.elapsed().as_secs_f64();
            readers.paused.store(
                (pause.0 as f64..pause.1 as f64).contains(&elapsed),
                Ordering::Relaxed,
            );
            if let Ok(text) = self.http.get(&metrics_url).send().await?.text().await {
                let series =
                    format!("tickler_consumer_stalled{{topic=\"{topic}\",group=\"{group}\"}} 1");
                stalled_seen.push((elapsed, text.lines().any(|l| l == series)));
            }
            if second >= secs {
                continue;
            }
            let jobs = (0..rate)
                .map(|i| {
                    let due = start
                        + chrono::Duration::seconds(second as i64)
                        + chrono::Duration::microseconds(step_us * i as i64);
                    self.job(due, second * rate + i)
                })
                .collect();
            ids.extend(self.batches_created(jobs).await?);
        }
        readers.stop.store(true, Ordering::Relaxed);
        let commits = readers
            .commits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Each job's consumed time beside the commit that first passed it.
        let mut after_commit: Vec<i64> = Vec::new();
        let mut unconsumed = 0;
        let sample: Vec<u64> = ids
            .iter()
            .step_by((ids.len() / 2_000).max(1))
            .copied()
            .collect();
        for id in &sample {
            let job = store.job_get(*id).await?;
            let (Some(partition), Some(offset)) = (job.kafka_partition, job.kafka_offset) else {
                unconsumed += 1;
                continue;
            };
            let committed = commits
                .iter()
                .find(|(_, next)| next.get(&partition).is_some_and(|n| *n > offset))
                .map(|(at, _)| *at);
            let consumed = store.job_consumed(&job, &[group.clone()]).await?;
            match (
                committed,
                consumed
                    .iter()
                    .find(|c| c.group == group)
                    .and_then(|c| c.at),
            ) {
                (Some(committed), Some(at)) => {
                    after_commit.push((at - committed).num_milliseconds())
                }
                _ => unconsumed += 1,
            }
        }
        let raised = stalled_seen
            .iter()
            .find(|(at, stalled)| *stalled && *at >= pause.0 as f64)
            .map(|(at, _)| at - pause.0 as f64);
        let cleared = stalled_seen
            .iter()
            .find(|(at, stalled)| !*stalled && *at >= pause.1 as f64)
            .map(|(at, _)| at - pause.1 as f64);
        println!(
            "consumed: {} jobs at {rate}/s read by a group committing every second; of {} sampled, consumed after the commit that passed them {} ({unconsumed} without a consumed time)",
            ids.len(),
            sample.len(),
            percentiles(&mut after_commit)
        );
        println!(
            "consumed: the group stopped committing for {} s (consumed_within_ms {CONSUMED_WITHIN_MS}): stalled raised {} s after it stopped, cleared {} s after it resumed",
            pause.1 - pause.0,
            raised.map_or("never".to_owned(), |s| format!("{s:.1}")),
            cleared.map_or("never".to_owned(), |s| format!("{s:.1}"))
        );
        if unconsumed > 0 {
            bail!("consumed: {unconsumed} sampled jobs without a consumed time");
        }
        Ok(())
    }
}

//! The proof stage (#59): a steady stream of jobs, every one's record read
//! back by the verifier; then a fresh reader from the beginning of the
//! topic. Prints how many records the broker lost after acknowledging them
//! (what verification found missing and produced again), whether every
//! job's record is on the topic now, and the duplicates, which may only be
//! one job's two attempts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::Utc;
use rdkafka::consumer::BaseConsumer;
use rdkafka::Offset;

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

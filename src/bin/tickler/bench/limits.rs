//! The limits stage (#60): a topic's limits under an outage. Each round
//! pauses its topic (the outage), creates `limits` jobs due over the last
//! ten minutes, resumes it, and measures what came out:
//!
//! - `default_ttl_ms` (5 min): the jobs late past it end `expired`, the
//!   rest go out, none later than its ttl;
//! - `max_overdue` (a tenth of the jobs, `expire`, counting jobs due more
//!   than 5 s ago): the newest cap go out,
//!   the older ones end `expired`;
//! - `max_in_flight` (a hundredth, jobs expecting a result): a responder
//!   reports each record `ok` as it arrives, and the jobs dispatched and
//!   awaiting their result are sampled every 50 ms: never above the limit.

use std::time::{Duration, Instant};

use anyhow::bail;
use chrono::Utc;
use serde_json::json;

use super::Bench;
use tickler::domain::job::Status;
use tickler::kafka;
use tickler::store::Store;

/// The topics' settings, by round (`run_in` configures them).
pub const TTL_MS: u64 = 300_000;
/// `overdue_after_ms` of the overdue round: jobs due 5 s ago count.
pub const OVERDUE_AFTER_MS: u64 = 5_000;
/// The outage the jobs were held back by.
const OUTAGE: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// `max_overdue` of the overdue round for `n` jobs.
pub fn overdue_cap(n: u64) -> u32 {
    (n / 10).max(1) as u32
}

/// `max_in_flight` of the in-flight round for `n` jobs.
pub fn in_flight_cap(n: u64) -> u32 {
    (n / 100).max(10) as u32
}

impl Bench {
    /// Pauses the stage's topic, creates `n` jobs due evenly over the ten
    /// minutes before now (`extra` on each). Returns their ids and the
    /// instant the `i`-th is due at, in milliseconds since the epoch:
    /// `first + step * i`.
    async fn limits_backlog(
        &self,
        n: u64,
        extra: serde_json::Value,
    ) -> anyhow::Result<(Vec<u64>, i64, i64)> {
        let topic = self.topic();
        let paused = self
            .http
            .post(format!("{}/v1/topics/{topic}/pause", self.base_url()))
            .json(&json!({}))
            .send()
            .await?;
        if !paused.status().is_success() {
            bail!("limits: pausing {topic}: {}", paused.text().await?);
        }
        let now = Utc::now();
        let step = OUTAGE.num_milliseconds() / n.max(1) as i64;
        let jobs = (0..n)
            .map(|i| {
                let due = now - OUTAGE + chrono::Duration::milliseconds(step * i as i64);
                let mut job = self.job(due, i);
                job.as_object_mut()
                    .expect("a job is an object")
                    .extend(extra.as_object().cloned().unwrap_or_default());
                job
            })
            .collect();
        let ids = self.batches_created(jobs).await?;
        Ok((ids, (now - OUTAGE).timestamp_millis(), step))
    }

    async fn limits_resume(&self) -> anyhow::Result<()> {
        let topic = self.topic();
        let resumed = self
            .http
            .post(format!("{}/v1/topics/{topic}/resume", self.base_url()))
            .json(&json!({}))
            .send()
            .await?;
        if !resumed.status().is_success() {
            bail!("limits: resuming {topic}: {}", resumed.text().await?);
        }
        Ok(())
    }

    /// Waits until every job of the stage's topic is finished (none
    /// pending, dispatching or dispatched awaiting a result), at most
    /// `wait`; returns (produced, expired).
    async fn limits_settled(&self, store: &Store, wait: Duration) -> anyhow::Result<(i64, i64)> {
        let topic = self.topic();
        let deadline = Instant::now() + wait;
        loop {
            let pending = store.job_count(&topic, Status::Pending).await?
                + store.job_count(&topic, Status::Dispatching).await?;
            if pending == 0 || Instant::now() >= deadline {
                let produced = store.job_count(&topic, Status::Dispatched).await?
                    + store.job_count(&topic, Status::Succeeded).await?;
                let expired = store.job_count(&topic, Status::Expired).await?;
                if pending > 0 {
                    bail!("limits: {pending} jobs of {topic} still pending after {wait:?}");
                }
                return Ok((produced, expired));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Long because it is three rounds read in order (a default ttl, an
    /// overdue cap, an in-flight cap), each created, released and counted.
    pub(super) async fn limits(&self, store: &Store) -> anyhow::Result<()> {
        let n = self.options.limits;
        let wait = Duration::from_secs(120 + n / 500);

        // default_ttl_ms.
        self.stage_topic("ttl").await?;
        let (ids, _, _) = self.limits_backlog(n, json!({})).await?;
        let started = Instant::now();
        self.limits_resume().await?;
        let (produced, expired) = self.limits_settled(store, wait).await?;
        let seen = self.await_records(&ids, Duration::from_secs(10)).await;
        let latest = seen
            .iter()
            .map(|s| s.dispatched_at_ms - s.scheduled_at_ms)
            .max()
            .unwrap_or(0);
        println!(
            "limits ttl: {n} jobs due over the 10 min of an outage, default_ttl_ms {TTL_MS}: {produced} produced (the latest {:.1} s after its time), {expired} expired, settled {:.1} s after the resume",
            latest as f64 / 1000.0,
            started.elapsed().as_secs_f64()
        );
        // A job claimed just before its expiry goes out a moment after it.
        if latest > TTL_MS as i64 + 10_000 || seen.len() as i64 != produced {
            bail!("limits ttl: a job went out past its ttl, or a produced job was not seen");
        }

        // max_overdue, expire.
        self.stage_topic("overdue").await?;
        let cap = overdue_cap(n);
        let (ids, first_ms, step_ms) = self.limits_backlog(n, json!({})).await?;
        // The reconciler role caps the backlog every 5 s.
        let capped = Instant::now();
        let deadline = capped + wait;
        while store.job_count(&self.topic(), Status::Expired).await? < (n - u64::from(cap)) as i64 {
            if Instant::now() >= deadline {
                bail!("limits overdue: the backlog was not capped within {wait:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let capped = capped.elapsed();
        let started = Instant::now();
        self.limits_resume().await?;
        let (produced, expired) = self.limits_settled(store, wait).await?;
        // The newest `cap` are due from here on; every record seen must be.
        let newest_from_ms = first_ms + step_ms * (n - u64::from(cap)) as i64;
        let seen = self.await_records(&ids, Duration::from_secs(10)).await;
        let older = seen
            .iter()
            .filter(|s| s.scheduled_at_ms < newest_from_ms)
            .count();
        println!(
            "limits overdue: {n} jobs overdue, max_overdue {cap} (expire): {expired} oldest expired within {:.1} s, {produced} produced ({} of the {cap} newest seen), settled {:.1} s after the resume",
            capped.as_secs_f64(),
            seen.len(),
            started.elapsed().as_secs_f64()
        );
        if produced != i64::from(cap) || seen.len() != cap as usize || older > 0 {
            bail!(
                "limits overdue: {produced} produced ({older} older than the {cap} newest), not the {cap} newest"
            );
        }

        // max_in_flight, a responder reporting each record as it arrives.
        self.stage_topic("inflight").await?;
        let limit = in_flight_cap(n);
        let (ids, _, _) = self
            .limits_backlog(n, json!({"expects_result": true}))
            .await?;
        let producer = kafka::Producer::create(
            &self.config.kafka.brokers,
            &self.config.kafka.options,
            5,
            30_000,
        )?;
        let started = Instant::now();
        self.limits_resume().await?;
        let (mut reported, mut most) = (std::collections::HashSet::new(), 0i64);
        let deadline = Instant::now() + wait;
        loop {
            let in_flight = store.job_count(&self.topic(), Status::Dispatched).await?
                + store.job_count(&self.topic(), Status::Dispatching).await?;
            most = most.max(in_flight);
            let seen: Vec<u64> = {
                let records = self.records.lock().unwrap_or_else(|p| p.into_inner());
                ids.iter()
                    .filter(|id| records.contains_key(id) && !reported.contains(*id))
                    .copied()
                    .collect()
            };
            for id in seen {
                let report = json!({"job_id": id, "attempt": 1, "outcome": "ok"}).to_string();
                let key = id.to_string();
                let record = kafka::Record::to(&self.config.results.topic, 0)
                    .key(key.as_bytes())
                    .value(report.as_bytes());
                if producer.send(record).is_ok() {
                    reported.insert(id);
                }
            }
            let done = store.job_count(&self.topic(), Status::Succeeded).await?;
            if done as u64 >= n {
                break;
            }
            if Instant::now() >= deadline {
                bail!("limits in flight: {done} of {n} succeeded within {wait:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let spent = started.elapsed().as_secs_f64();
        println!(
            "limits in flight: {n} jobs expecting a result, max_in_flight {limit}: at most {most} dispatched and awaiting their result at once (sampled every 50 ms), all {n} succeeded in {spent:.1} s ({:.0} jobs/s)",
            n as f64 / spent
        );
        if most > i64::from(limit) {
            bail!("limits in flight: {most} in flight, over the limit of {limit}");
        }
        Ok(())
    }
}

//! The dispatcher (the "event process"): claims due ids in Redis, wins the
//! MySQL compare-and-set `pending → dispatching`, produces each job to its
//! topic with the idempotent producer, marks it `dispatched` with where it
//! landed, and releases the Redis claim. No business logic.
//!
//! It sleeps until the earliest due time Redis reports (or until woken by
//! the API or the loader), never on a fixed poll, and claims in batches.
//!
//! What a crash leaves behind, step by step:
//! - after the Redis claim: ids sit in the in-flight set; when the lease
//!   expires the next claim returns them to the due set.
//! - after the MySQL claim: rows are `dispatching`; after the lease the
//!   reconciler returns them to `pending`.
//! - after producing, before marking: the same (job id, attempt) is produced
//!   again after the lease — the one duplicate the contract allows.
//! - after marking, before releasing Redis: stale in-flight entries, removed
//!   when their lease expires and the CAS finds the row not pending.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use futures::future::join_all;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::{Claim, Index};
use crate::job::{self, Job, JobId};
use crate::kafka;
use crate::metrics;
use crate::store::{Dispatched, Store};

#[derive(Debug, Clone)]
pub struct DispatcherConfig {
    /// Brokers to produce to.
    pub brokers: String,
    /// Extra librdkafka properties, applied last.
    pub kafka_options: BTreeMap<String, String>,
    /// Most ids claimed per shard per pass.
    pub batch: u32,
    /// Lease on a claim, in Redis and in MySQL.
    pub lease: Duration,
    /// Longest sleep when nothing is due (jobs indexed by other instances
    /// are noticed at least this often).
    pub idle: Duration,
    /// Shards this dispatcher serves.
    pub shards: Vec<u32>,
    /// librdkafka `linger.ms`.
    pub linger_ms: u64,
    /// librdkafka `message.timeout.ms`: a send not acknowledged by then fails
    /// and the job goes back to pending.
    pub message_timeout_ms: u64,
    /// Delay before a job whose send failed is tried again.
    pub retry_delay: Duration,
    /// The index window: an id found not yet due and later than this is
    /// dropped from Redis (the loader brings it back in time).
    pub window: Duration,
}

impl DispatcherConfig {
    pub fn from_config(config: &Config) -> Self {
        DispatcherConfig {
            brokers: config.kafka_brokers.clone(),
            kafka_options: config.kafka_options.clone(),
            batch: config.dispatch_batch,
            lease: config.claim_lease(),
            idle: Duration::from_millis(config.dispatch_idle_ms),
            shards: (0..config.shards).collect(),
            linger_ms: config.kafka_linger_ms,
            message_timeout_ms: config.kafka_message_timeout_ms,
            retry_delay: Duration::from_secs(1),
            window: config.window(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("cannot create the kafka producer: {0}")]
    Producer(#[from] rdkafka::error::KafkaError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    /// Ids taken from Redis.
    pub claimed: usize,
    /// Jobs that won the MySQL CAS and were produced and marked.
    pub dispatched: usize,
    /// Ids whose row was not pending any more (cancelled, done, gone).
    pub stale: usize,
    /// Ids still pending but not yet due by MySQL's clock.
    pub not_due: usize,
    /// Jobs the broker did not take; back to pending.
    pub failed: usize,
    /// Whether some shard had more due than one batch: run again at once.
    pub more: bool,
    /// How long until a shard next needs attention, by Redis's clock.
    pub next_in: Option<Duration>,
}

/// Consecutive passes in which every send failed before the producer is
/// replaced. An idempotent producer whose sequence state the broker no
/// longer accepts (seen after a broker restart) fails every send forever;
/// a fresh producer starts a new sequence.
const PRODUCER_FAILED_PASSES_BEFORE_RESTART: u32 = 3;

pub struct Dispatcher {
    store: Store,
    index: Index,
    /// Replaced (between passes, with nothing in flight) when it is wedged.
    producer: RwLock<FutureProducer>,
    /// Passes in a row in which every send failed.
    failed_passes: AtomicU32,
    config: DispatcherConfig,
    wake: Arc<Notify>,
}

fn producer_create(
    config: &DispatcherConfig,
) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    let mut client = kafka::client_config(&config.brokers);
    client
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", config.linger_ms.to_string())
        .set("message.timeout.ms", config.message_timeout_ms.to_string());
    for (key, value) in &config.kafka_options {
        client.set(key, value);
    }
    client.create()
}

impl Dispatcher {
    pub fn new(
        store: Store,
        index: Index,
        config: DispatcherConfig,
        wake: Arc<Notify>,
    ) -> Result<Self, DispatchError> {
        let producer = producer_create(&config)?;
        Ok(Dispatcher {
            store,
            index,
            producer: RwLock::new(producer),
            failed_passes: AtomicU32::new(0),
            config,
            wake,
        })
    }

    /// Dispatches until `cancel` fires; the batch in hand is finished first.
    pub async fn run(self, cancel: CancellationToken) {
        let mut failures = 0u32;
        tracing::info!(shards = self.config.shards.len(), "dispatcher started");
        while !cancel.is_cancelled() {
            let started = Instant::now();
            let report = self.run_once().await;
            let pause = if report.more {
                failures = 0;
                Duration::ZERO
            } else if report.claimed > 0 && report.dispatched == 0 && report.failed > 0 {
                // The broker or the database is failing: back off.
                failures = failures.saturating_add(1);
                Duration::from_millis(100u64 << failures.min(5))
            } else {
                failures = 0;
                let until_next = report.next_in.unwrap_or(self.config.idle);
                until_next
                    .min(self.config.idle)
                    .saturating_sub(started.elapsed())
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        self.producer_flush();
        tracing::info!("dispatcher stopped");
    }

    /// One pass over every shard: claim, CAS, produce, mark, release.
    /// Never fails: what could not be done is left for the lease to repair
    /// and counted in the report.
    pub async fn run_once(&self) -> DispatchReport {
        let mut report = DispatchReport::default();
        let claims = self.claim_all().await;
        let started = Instant::now();
        let Some(redis_now_ms) = claims.iter().map(|c| c.now_ms).max() else {
            return report;
        };
        report.more = claims
            .iter()
            .any(|c| c.ids.len() >= self.config.batch as usize);
        report.next_in = claims
            .iter()
            .filter_map(|c| c.next_ms)
            .min()
            .map(|next| Duration::from_millis(next.saturating_sub(redis_now_ms).max(0) as u64));
        let ids: Vec<JobId> = claims.into_iter().flat_map(|c| c.ids).collect();
        report.claimed = ids.len();
        if ids.is_empty() {
            return report;
        }

        let token: u64 = rand::random();
        let outcome = match self
            .store
            .job_claim_many(&ids, token, self.config.lease)
            .await
        {
            Ok(outcome) => outcome,
            Err(err) => {
                tracing::warn!(error = %err, num_jobs = ids.len(), "claim compare-and-set failed");
                let retry_ms = redis_now_ms + self.config.retry_delay.as_millis() as i64;
                let back: Vec<(JobId, i64)> = ids.iter().map(|id| (*id, retry_ms)).collect();
                self.index_requeue(&back).await;
                report.failed = ids.len();
                return report;
            }
        };
        report.stale = outcome.stale.len();
        report.not_due = outcome.not_due.len();
        metrics::dispatch_cas_lost(outcome.stale.len() + outcome.not_due.len());
        if !outcome.stale.is_empty() {
            if let Err(err) = self.index.job_remove_many(&outcome.stale).await {
                tracing::warn!(error = %err, "cannot drop stale index entries");
            }
        }
        if !outcome.not_due.is_empty() {
            // Moved later (by hand), or Redis's clock runs ahead of MySQL's:
            // back at the time MySQL will agree it is due — the schedule plus
            // how far Redis is ahead — if that is inside the window, else out
            // of Redis until the loader brings it back.
            let skew_ms = outcome.db_now.map_or(0, |db_now| {
                (redis_now_ms - db_now.timestamp_millis()).max(0)
            });
            let horizon_ms = redis_now_ms + self.config.window.as_millis() as i64;
            let (back, beyond): (Vec<(JobId, i64)>, Vec<(JobId, i64)>) = outcome
                .not_due
                .iter()
                .map(|e| (e.id, e.schedule_time.timestamp_millis() + skew_ms))
                .partition(|(_, ms)| *ms < horizon_ms);
            if skew_ms > 1_000 {
                tracing::warn!(skew_ms, "redis's clock runs ahead of mysql's");
            }
            self.index_requeue(&back).await;
            let beyond: Vec<JobId> = beyond.into_iter().map(|(id, _)| id).collect();
            if let Err(err) = self.index.job_remove_many(&beyond).await {
                tracing::warn!(error = %err, "cannot drop ids moved beyond the window");
            }
        }
        if outcome.won.is_empty() {
            return report;
        }

        // The dispatch time comes from Redis's clock plus elapsed monotonic
        // time: no tickler host's wall clock is involved.
        let dispatched_ms = redis_now_ms + started.elapsed().as_millis() as i64;
        let dispatched_at = Utc
            .timestamp_millis_opt(dispatched_ms)
            .single()
            .unwrap_or_else(Utc::now);
        let producer = self.producer_current();
        let sends = outcome
            .won
            .iter()
            .map(|job| self.produce(&producer, job, dispatched_ms));
        let results = join_all(sends).await;

        let mut dispatched = Vec::with_capacity(results.len());
        let mut failed = Vec::new();
        let mut first_error = None;
        for (job, result) in outcome.won.iter().zip(results) {
            match result {
                Ok((partition, offset)) => {
                    metrics::dispatch_lateness(job.schedule_time, dispatched_at);
                    dispatched.push(Dispatched {
                        id: job.id,
                        partition,
                        offset,
                        dispatched_at,
                    });
                }
                Err(err) => {
                    tracing::warn!(job_id = job.id, topic = %job.topic, error = %err, "produce failed");
                    first_error.get_or_insert(err);
                    failed.push(job.id);
                }
            }
        }
        report.dispatched = dispatched.len();
        report.failed = failed.len();
        metrics::dispatched(dispatched.len());
        drop(producer);
        self.producer_check(dispatched.is_empty() && !failed.is_empty());

        self.mark_dispatched(token, &dispatched).await;
        if !failed.is_empty() {
            let error = first_error.unwrap_or_default();
            metrics::produce_failed(failed.len());
            match self.store.job_release_many(token, &failed, &error).await {
                Ok(_) => {
                    let retry_ms = dispatched_ms + self.config.retry_delay.as_millis() as i64;
                    let back: Vec<(JobId, i64)> = failed.iter().map(|id| (*id, retry_ms)).collect();
                    self.index_requeue(&back).await;
                }
                // The rows stay dispatching; the reconciler frees them when
                // the lease expires.
                Err(err) => tracing::warn!(error = %err, "cannot release failed claims"),
            }
        }
        let done: Vec<JobId> = dispatched.iter().map(|d| d.id).collect();
        if let Err(err) = self.index.job_remove_many(&done).await {
            // Harmless: the entries expire and the CAS finds the rows done.
            tracing::warn!(error = %err, "cannot release redis claims");
        }
        report
    }

    async fn claim_all(&self) -> Vec<Claim> {
        let claims = self.config.shards.iter().map(|shard| {
            self.index
                .job_claim(*shard, self.config.batch, self.config.lease)
        });
        let mut out = Vec::with_capacity(self.config.shards.len());
        for result in join_all(claims).await {
            match result {
                Ok(claim) => out.push(claim),
                Err(err) => {
                    tracing::warn!(error = %err, "claim failed");
                    metrics::index_error();
                }
            }
        }
        out
    }

    /// Produces one job; returns (partition, offset) or the broker's error.
    async fn produce(
        &self,
        producer: &FutureProducer,
        job: &Job,
        dispatched_ms: i64,
    ) -> Result<(i32, i64), String> {
        let id = job.id.to_string();
        let attempt = job.attempt.to_string();
        let scheduled = job.schedule_time.timestamp_millis().to_string();
        let dispatched = dispatched_ms.to_string();
        let mut headers = OwnedHeaders::new_with_capacity(job.headers.len() + 4);
        for (name, value) in &job.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_bytes()),
            });
        }
        for (name, value) in [
            (job::HEADER_JOB_ID, &id),
            (job::HEADER_ATTEMPT, &attempt),
            (job::HEADER_SCHEDULED_AT, &scheduled),
            (job::HEADER_DISPATCHED_AT, &dispatched),
        ] {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_bytes()),
            });
        }
        let key = job.record_key();
        let record = FutureRecord::to(&job.topic)
            .key(&key)
            .payload(&job.payload)
            .headers(headers);
        // The claim is bounded, so the local queue is never full for long;
        // waiting for room would only eat into the claim's lease.
        let queue_timeout = Timeout::After(Duration::from_millis(100));
        match producer.send(record, queue_timeout).await {
            Ok(delivery) => Ok((delivery.partition, delivery.offset)),
            Err((err, _)) => Err(err.to_string()),
        }
    }

    /// Marks produced jobs, retrying briefly: giving up means they are
    /// produced a second time after the lease.
    async fn mark_dispatched(&self, token: u64, dispatched: &[Dispatched]) {
        if dispatched.is_empty() {
            return;
        }
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=5 {
            match self.store.job_mark_dispatched_many(token, dispatched).await {
                Ok(marked) => {
                    let lost = dispatched.len() as u64 - marked.min(dispatched.len() as u64);
                    if lost > 0 {
                        tracing::warn!(
                            num_jobs = lost,
                            "claims expired before marking; these jobs will be produced again"
                        );
                    }
                    return;
                }
                Err(err) => {
                    tracing::warn!(error = %err, attempt, num_jobs = dispatched.len(), "cannot mark jobs dispatched");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                }
            }
        }
    }

    async fn index_requeue(&self, jobs: &[(JobId, i64)]) {
        if let Err(err) = self.index.job_requeue_many(jobs).await {
            // The in-flight lease returns them to the due set anyway.
            tracing::warn!(error = %err, num_jobs = jobs.len(), "cannot requeue ids");
            metrics::index_error();
        }
    }

    fn producer_current(&self) -> FutureProducer {
        match self.producer.read() {
            Ok(producer) => producer.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the producer when librdkafka reports it fatally failed, or
    /// after several passes in which every send failed. Called between
    /// passes, when this dispatcher has nothing in flight.
    fn producer_check(&self, all_failed: bool) {
        let passes = if all_failed {
            self.failed_passes.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.failed_passes.store(0, Ordering::Relaxed);
            0
        };
        let fatal = self.producer_current().client().fatal_error();
        if fatal.is_none() && passes < PRODUCER_FAILED_PASSES_BEFORE_RESTART {
            return;
        }
        match producer_create(&self.config) {
            Ok(fresh) => {
                tracing::warn!(failed_passes = passes, fatal = ?fatal, "replacing the kafka producer");
                metrics::producer_restarted();
                self.failed_passes.store(0, Ordering::Relaxed);
                match self.producer.write() {
                    Ok(mut producer) => *producer = fresh,
                    Err(poisoned) => *poisoned.into_inner() = fresh,
                }
            }
            Err(err) => tracing::warn!(error = %err, "cannot create a kafka producer"),
        }
    }

    fn producer_flush(&self) {
        if let Err(err) = self
            .producer_current()
            .flush(Timeout::After(Duration::from_secs(5)))
        {
            tracing::warn!(error = %err, "producer flush on shutdown failed");
        }
    }
}

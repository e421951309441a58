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
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::util::Timeout;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::{Claim, Index};
use crate::job::{self, Job, JobId};
use crate::kafka;
use crate::metrics;
use crate::store::{Dispatched, Marked, Store};

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
    /// Settled passes in a row in which every send failed (the settler
    /// counts; the dispatcher reads before each pass).
    failed_passes: Arc<AtomicU32>,
    config: DispatcherConfig,
    wake: Arc<Notify>,
}

fn producer_create(
    config: &DispatcherConfig,
) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    kafka::producer_create(
        &config.brokers,
        &config.kafka_options,
        config.linger_ms,
        config.message_timeout_ms,
    )
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
            failed_passes: Arc::new(AtomicU32::new(0)),
            config,
            wake,
        })
    }

    /// Dispatches until `cancel` fires; the batch in hand is finished first.
    pub async fn run(self, cancel: CancellationToken) {
        let mut failures = 0u32;
        tracing::info!(shards = self.config.shards.len(), "dispatcher started");
        // The settler records pass N while pass N+1 claims. Capacity 1: at
        // most one batch waits to be recorded, so memory and the work in
        // flight stay bounded.
        let (to_settler, mut settles) = tokio::sync::mpsc::channel::<Settle>(1);
        let settler = self.settler();
        let settling = tokio::spawn(async move {
            while let Some(settle) = settles.recv().await {
                settler.settle(settle).await;
            }
        });
        while !cancel.is_cancelled() {
            let started = Instant::now();
            let (report, settle) = self.pass().await;
            if let Some(settle) = settle {
                if let Err(unsent) = to_settler.send(settle).await {
                    self.settler().settle(unsent.0).await;
                }
            }
            let pause = if report.more {
                failures = 0;
                Duration::ZERO
            } else if self.failed_passes.load(Ordering::Relaxed) > 0 || report.failed > 0 {
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
        // Drain: every batch produced is recorded before the process exits.
        drop(to_settler);
        if let Err(err) = settling.await {
            tracing::error!(error = %err, "settler task failed");
        }
        self.producer_flush();
        tracing::info!("dispatcher stopped");
    }

    /// One pass over every shard: claim, CAS, produce, mark, release.
    /// Never fails: what could not be done is left for the lease to repair
    /// and counted in the report.
    pub async fn run_once(&self) -> DispatchReport {
        let (mut report, settle) = self.pass().await;
        if let Some(settle) = settle {
            let (dispatched, failed) = self.settler().settle(settle).await;
            report.dispatched = dispatched;
            report.failed += failed;
        }
        report
    }

    fn settler(&self) -> Settler {
        Settler {
            store: self.store.clone(),
            index: self.index.clone(),
            failed_passes: self.failed_passes.clone(),
        }
    }

    /// Claim, CAS and produce; what is left to record (mark, release,
    /// requeue) is returned for the settler.
    async fn pass(&self) -> (DispatchReport, Option<Settle>) {
        self.producer_check();
        let mut report = DispatchReport::default();
        let pass_started = Instant::now();
        let claims = self.claim_all().await;
        let claimed_after = pass_started.elapsed();
        let started = Instant::now();
        let Some(redis_now_ms) = claims.iter().map(|c| c.now_ms).max() else {
            return (report, None);
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
            return (report, None);
        }

        let token: u64 = rand::random();
        let cas_started = Instant::now();
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
                return (report, None);
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
            return (report, None);
        }

        // The dispatch time comes from Redis's clock plus elapsed monotonic
        // time: no tickler host's wall clock is involved.
        let dispatched_ms = redis_now_ms + started.elapsed().as_millis() as i64;
        let dispatched_at = Utc
            .timestamp_millis_opt(dispatched_ms)
            .single()
            .unwrap_or_else(Utc::now);
        // Enqueue every record, then wait for the broker's acknowledgements:
        // measured, a pass that does not wait spins through many more, smaller
        // passes and loses more to the extra queries than it gains (docs/
        // benchmarks.md). Marking is left to the settler.
        let producer = self.producer_current();
        let enqueued = outcome.won.iter().map(|job| {
            let sending = self.enqueue(&producer, job, dispatched_ms);
            async move {
                (
                    job.id,
                    job.schedule_time,
                    Sending::Done(sending.delivered().await),
                )
            }
        });
        let produce_started = Instant::now();
        let sends: Vec<(JobId, chrono::DateTime<Utc>, Sending)> = join_all(enqueued).await;
        report.dispatched = sends.len();
        tracing::debug!(
            num_jobs = sends.len(),
            claim_us = claimed_after.as_micros() as u64,
            cas_us = (produce_started - cas_started).as_micros() as u64,
            produce_us = produce_started.elapsed().as_micros() as u64,
            "dispatch pass"
        );
        let retry_ms = dispatched_ms + self.config.retry_delay.as_millis() as i64;
        (
            report,
            Some(Settle {
                token,
                producer,
                sends,
                dispatched_at,
                retry_ms,
            }),
        )
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

    /// Puts one job's record in the producer's queue; its delivery is
    /// awaited by the settler.
    fn enqueue(&self, producer: &FutureProducer, job: &Job, dispatched_ms: i64) -> Sending {
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
        // The claim is bounded, so the local queue is never full for long; a
        // full queue fails the send (and the job is retried) at once.
        match producer.send_result(record) {
            Ok(delivery) => Sending::Queued(delivery),
            Err((err, _)) => Sending::Refused(err.to_string()),
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
    /// after several settled passes in which every send failed. Batches still
    /// settling keep the old producer alive until their deliveries resolve.
    fn producer_check(&self) {
        let passes = self.failed_passes.load(Ordering::Relaxed);
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

/// A record handed to the producer.
enum Sending {
    Queued(DeliveryFuture),
    /// The producer refused it at once (queue full, unknown topic...).
    Refused(String),
    /// Acknowledged (partition, offset) or failed.
    Done(Result<(i32, i64), String>),
}

impl Sending {
    /// Where the record landed, or why it did not.
    async fn delivered(self) -> Result<(i32, i64), String> {
        match self {
            Sending::Queued(delivery) => match delivery.await {
                Ok(Ok(delivery)) => Ok((delivery.partition, delivery.offset)),
                Ok(Err((err, _))) => Err(err.to_string()),
                Err(_) => Err("the producer was dropped before delivery".to_owned()),
            },
            Sending::Refused(err) => Err(err),
            Sending::Done(result) => result,
        }
    }
}

/// What a pass leaves to the settler: records in the producer's hands.
struct Settle {
    token: u64,
    /// Kept alive until every delivery resolves, even if replaced.
    producer: FutureProducer,
    sends: Vec<(JobId, chrono::DateTime<Utc>, Sending)>,
    dispatched_at: chrono::DateTime<Utc>,
    /// When jobs whose send failed are tried again (Redis clock, ms).
    retry_ms: i64,
}

/// Records a pass's deliveries: marks produced jobs `dispatched`, returns
/// failed ones to `pending`, releases the Redis claims. Runs beside the next
/// pass, so claiming never waits on marking.
struct Settler {
    store: Store,
    index: Index,
    failed_passes: Arc<AtomicU32>,
}

impl Settler {
    /// Returns (produced, failed).
    async fn settle(&self, settle: Settle) -> (usize, usize) {
        let Settle {
            token,
            producer,
            sends,
            dispatched_at,
            retry_ms,
        } = settle;
        let mut dispatched = Vec::with_capacity(sends.len());
        let mut failed = Vec::new();
        let mut first_error = None;
        let outcomes = join_all(
            sends
                .into_iter()
                .map(|(id, scheduled, sending)| async move {
                    (id, scheduled, sending.delivered().await)
                }),
        )
        .await;
        drop(producer);
        for (id, scheduled, result) in outcomes {
            match result {
                Ok((partition, offset)) => {
                    metrics::dispatch_lateness(scheduled, dispatched_at);
                    dispatched.push(Dispatched {
                        id,
                        partition,
                        offset,
                        dispatched_at,
                    });
                }
                Err(err) => {
                    tracing::warn!(job_id = id, error = %err, "produce failed");
                    first_error.get_or_insert(err);
                    failed.push(id);
                }
            }
        }
        metrics::dispatched(dispatched.len());
        if dispatched.is_empty() && !failed.is_empty() {
            self.failed_passes.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed_passes.store(0, Ordering::Relaxed);
        }

        let retried_early = self.mark_dispatched(token, &dispatched).await;
        if !failed.is_empty() {
            metrics::produce_failed(failed.len());
            let error = first_error.unwrap_or_default();
            match self.store.job_release_many(token, &failed, &error).await {
                Ok(_) => {
                    let back: Vec<(JobId, i64)> = failed.iter().map(|id| (*id, retry_ms)).collect();
                    if let Err(err) = self.index.job_requeue_many(&back).await {
                        // The in-flight lease returns them to the due set anyway.
                        tracing::warn!(error = %err, num_jobs = back.len(), "cannot requeue ids");
                        metrics::index_error();
                    }
                }
                // The rows stay dispatching; the reconciler frees them when
                // the lease expires.
                Err(err) => tracing::warn!(error = %err, "cannot release failed claims"),
            }
        }
        // A job a consumer's report already sent back for a retry keeps its
        // Redis entry (its retry time); its lease entry just expires.
        let done: Vec<JobId> = dispatched
            .iter()
            .map(|d| d.id)
            .filter(|id| !retried_early.contains(id))
            .collect();
        if let Err(err) = self.index.job_remove_many(&done).await {
            // Harmless: the entries expire and the CAS finds the rows done.
            tracing::warn!(error = %err, "cannot release redis claims");
        }
        (dispatched.len(), failed.len())
    }

    /// Marks produced jobs, retrying briefly: giving up means they are
    /// produced a second time after the lease. Returns the jobs a report
    /// retried before the mark.
    async fn mark_dispatched(&self, token: u64, dispatched: &[Dispatched]) -> Vec<JobId> {
        if dispatched.is_empty() {
            return Vec::new();
        }
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=5 {
            match self.store.job_mark_dispatched_many(token, dispatched).await {
                Ok(Marked {
                    marked,
                    retried_early,
                }) => {
                    let lost = dispatched.len() as u64 - marked.min(dispatched.len() as u64);
                    if lost > 0 {
                        tracing::warn!(
                            num_jobs = lost,
                            "claims expired before marking; these jobs will be produced again"
                        );
                    }
                    return retried_early;
                }
                Err(err) => {
                    tracing::warn!(error = %err, attempt, num_jobs = dispatched.len(), "cannot mark jobs dispatched");
                    tokio::time::sleep(delay).await;
                    delay *= 4;
                }
            }
        }
        Vec::new()
    }
}

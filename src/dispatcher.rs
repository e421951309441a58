//! The dispatcher (the "event process"): claims due ids in Redis from the
//! shards this instance holds (membership hands them over, with their
//! epochs), wins the MySQL compare-and-set `pending → dispatching` fenced by
//! those epochs, produces each job to its topic with the idempotent
//! producer, marks it `dispatched` with where it landed, and releases the
//! Redis claim. No business logic.
//!
//! It sleeps until the earliest due time Redis reports (or until woken by
//! the API or the loader), never on a fixed poll, and claims in batches.
//!
//! One bad job never holds up the rest. A job whose topic the broker does
//! not have (by the cached metadata) is not sent at all; a record the broker
//! refuses for the job's own sake (missing topic, too large, not authorised)
//! is a failed attempt of that job — retried with backoff, then `dead` —
//! while a failure of the broker itself (timeouts, transport) is not the
//! job's fault and only delays it. A pass waits for acknowledgements at
//! least `ack_wait`; records still unacknowledged then, of a topic the broker
//! has stopped answering for while it answers for others, settle in the
//! background. A broker slow for everyone is waited for, so claiming slows
//! down with it.
//!
//! What a crash leaves behind, step by step:
//! - after the Redis claim: ids sit in the in-flight set; when the lease
//!   expires the next claim returns them to the due set.
//! - after the MySQL claim: rows are `dispatching` under this instance;
//!   once it is dead for the others (heartbeat older than
//!   `instance_ttl_ms`) they return them to `pending` (the reconciler does
//!   after the claim lease, at worst), and the shards' new owners adopt the
//!   in-flight sets.
//! - after producing, before marking: the same (job id, attempt) is produced
//!   again by the new owner — the one duplicate the contract allows.
//! - after marking, before releasing Redis: stale in-flight entries, removed
//!   when their lease expires and the CAS finds the row not pending.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};
use futures::future::{join_all, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use tokio::sync::{watch, Notify, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::control::TopicControls;
use crate::index::{Claim, Index};
use crate::job::{self, Job, JobId};
use crate::kafka::{self, TopicState, Topics, TOPICS_REFRESH_MIN};
use crate::membership::{Holding, Ownership};
use crate::metrics;
use crate::results::Resolver;
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
    /// librdkafka `linger.ms`.
    pub linger_ms: u64,
    /// librdkafka `message.timeout.ms`: a send not acknowledged by then fails
    /// and the job goes back to pending.
    pub message_timeout_ms: u64,
    /// Delay before a job whose send failed for the broker's sake is tried
    /// again.
    pub retry_delay: Duration,
    /// The index window: an id found not yet due and later than this is
    /// dropped from Redis (the loader brings it back in time).
    pub window: Duration,
    /// How long a pass waits for acknowledgements before it leaves the
    /// records of a topic the broker stopped answering for to the background.
    pub ack_wait: Duration,
    /// Most records settling in the background at once; beyond it a pass
    /// waits for all of its records (as when the broker is down).
    pub stragglers_max: usize,
}

/// Delay before a job whose send failed for the broker's sake is tried
/// again.
pub const DISPATCH_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Records settling in the background at most, per claimed batch of a
/// shard (`stragglers_max` = this × `dispatch_batch`).
pub const STRAGGLER_BATCHES: usize = 4;

impl DispatcherConfig {
    pub fn from_config(config: &Config) -> Self {
        DispatcherConfig {
            brokers: config.kafka_brokers.clone(),
            kafka_options: config.kafka_options.clone(),
            batch: config.dispatch_batch,
            lease: config.claim_lease(),
            idle: Duration::from_millis(config.dispatch_idle_ms),
            linger_ms: config.kafka_linger_ms,
            message_timeout_ms: config.kafka_message_timeout_ms,
            retry_delay: DISPATCH_RETRY_DELAY,
            window: config.window(),
            ack_wait: Duration::from_millis(config.dispatch_ack_wait_ms),
            stragglers_max: (config.dispatch_batch as usize).saturating_mul(STRAGGLER_BATCHES),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DispatchError {
    #[error("cannot create the kafka producer: {0}")]
    Producer(#[from] KafkaError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DispatchReport {
    /// Ids taken from Redis.
    pub claimed: usize,
    /// Jobs that won the MySQL CAS and were handed to the producer
    /// (`run_once`: produced and marked).
    pub dispatched: usize,
    /// Ids whose row was not pending any more (cancelled, done, gone).
    pub stale: usize,
    /// Ids still pending but not yet due by MySQL's clock.
    pub not_due: usize,
    /// Jobs the broker did not take for its own sake (down, timed out);
    /// back to pending without counting an attempt.
    pub failed: usize,
    /// Jobs the broker refused for their own sake (missing topic, too
    /// large...): a failed attempt each (`run_once` only).
    pub refused: usize,
    /// Whether some shard had more due than one batch: run again at once.
    pub more: bool,
    /// How long until a shard next needs attention, by Redis's clock.
    pub next_in: Option<Duration>,
}

/// Consecutive settled batches in which every send failed for the broker's
/// sake before the producer is replaced. An idempotent producer whose
/// sequence state the broker no longer accepts (seen after a broker restart)
/// fails every send forever; a fresh producer starts a new sequence.
const PRODUCER_FAILED_PASSES_BEFORE_RESTART: u32 = 3;

/// How recent metadata must be for a topic missing from it to count against
/// a job. Longer than `retry_delay`, so that a job released to check again
/// finds the fetch it triggered recent enough.
const TOPIC_MISSING_TRUST: Duration = Duration::from_secs(5);

pub struct Dispatcher {
    store: Store,
    index: Index,
    /// Replaced (between passes) when it is wedged.
    producer: RwLock<FutureProducer>,
    /// Settled batches in a row in which every send failed (the settler
    /// counts; the dispatcher reads before each pass).
    failed_passes: Arc<AtomicU32>,
    config: DispatcherConfig,
    wake: Arc<Notify>,
    /// Which topics the broker has: a job for one it lacks is not sent.
    topics: Topics,
    /// Counts refused sends as failed attempts.
    resolver: Resolver,
    /// Background settling of records unacknowledged after `ack_wait`.
    stragglers: TaskTracker,
    /// One permit per record settling in the background.
    straggler_permits: Arc<Semaphore>,
    /// When each topic last had a record acknowledged.
    acks: Arc<Acks>,
    /// The shards this instance holds, with their epochs (membership keeps
    /// it current); only they are claimed from.
    ownership: watch::Receiver<Ownership>,
    /// Asks membership for a round now (after a fenced-off claim).
    refresh: Arc<Notify>,
    /// Which topics have a pace.
    controls: TopicControls,
}

/// The burst a paced topic may send at once, and the granularity at which
/// the jobs it holds back are spread (so that they come back in groups, not
/// one claim per job).
pub const PACE_TICK: Duration = Duration::from_millis(100);

/// A topic whose records have not been acknowledged for this long, while
/// other topics' were, is one the broker stopped answering for.
const TOPIC_SILENT_AFTER: Duration = Duration::from_secs(1);
/// Another topic counts as answered when one of its records was
/// acknowledged within this long.
const BROKER_ANSWERING_WITHIN: Duration = Duration::from_secs(10);

/// When the broker last acknowledged a record of each topic.
#[derive(Default)]
struct Acks {
    last: std::sync::Mutex<HashMap<String, Instant>>,
}

impl Acks {
    fn acked(&self, topic: &str, now: Instant) {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Called for every acknowledged record: no allocation once the
        // topic is known.
        match last.get_mut(topic) {
            Some(at) => *at = now,
            None => {
                last.insert(topic.to_owned(), now);
            }
        }
    }

    /// Whether records of `topic` still unacknowledged at `now` are the
    /// topic's trouble rather than the broker's: none of its records was
    /// acknowledged for `TOPIC_SILENT_AFTER`, while another topic's was
    /// since, within `BROKER_ANSWERING_WITHIN`. With one topic, or all
    /// topics silent alike, the broker is slow for everyone.
    fn suspect(&self, topic: &str, now: Instant) -> bool {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let own = last.get(topic).copied();
        if own.is_some_and(|at| now.saturating_duration_since(at) < TOPIC_SILENT_AFTER) {
            return false;
        }
        last.iter().any(|(other, at)| {
            other != topic
                && now.saturating_duration_since(*at) < BROKER_ANSWERING_WITHIN
                && own.is_none_or(|own| *at > own)
        })
    }
}

fn producer_create(config: &DispatcherConfig) -> Result<FutureProducer, KafkaError> {
    kafka::producer_create(
        &config.brokers,
        &config.kafka_options,
        config.linger_ms,
        config.message_timeout_ms,
    )
}

/// Why a record did not reach the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Refused for the job's own sake: a failed attempt of the job.
    Refused {
        /// Stable word, the `reason` label of `tickler_produce_refused_total`.
        reason: &'static str,
        message: String,
    },
    /// Not acknowledged in time: the topic may have vanished (checked
    /// against fresh metadata) or the broker is slow.
    TimedOut(String),
    /// The broker's trouble, not the job's: tried again, attempt uncounted.
    Broker(String),
    /// Not sent: the topic was missing from metadata more than a second
    /// old, which is being fetched again. Tried again, attempt uncounted,
    /// and no sign of trouble with the broker.
    Unchecked(String),
}

/// Sorts a Kafka error into the job's fault or the broker's. Only errors
/// that say something about this record or its topic count against the job;
/// anything else (transport, leadership, timeouts, a full queue) would
/// bury every job during a broker outage.
pub fn failure_classify(code: Option<RDKafkaErrorCode>, message: String) -> Failure {
    use RDKafkaErrorCode as C;
    let reason = match code {
        Some(C::UnknownTopicOrPartition | C::UnknownTopic | C::UnknownPartition) => "unknown_topic",
        Some(C::TopicAuthorizationFailed) => "not_authorized",
        Some(
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::MessageBatchTooLarge
            | C::InvalidRecord
            | C::InvalidMessage
            | C::InvalidTopic
            | C::PolicyViolation,
        ) => "invalid_record",
        Some(C::MessageTimedOut) => return Failure::TimedOut(message),
        _ => return Failure::Broker(message),
    };
    Failure::Refused { reason, message }
}

/// What became of one record.
struct Sent {
    id: JobId,
    topic: String,
    scheduled: DateTime<Utc>,
    result: Result<(i32, i64), Failure>,
}

type Delivery = BoxFuture<'static, Sent>;

impl Dispatcher {
    // Each is a handle the dispatcher shares with another role; a struct
    // to carry them would only rename the list.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Store,
        index: Index,
        config: DispatcherConfig,
        wake: Arc<Notify>,
        topics: Topics,
        resolver: Resolver,
        holding: Holding,
        controls: TopicControls,
    ) -> Result<Self, DispatchError> {
        let producer = producer_create(&config)?;
        Ok(Dispatcher {
            controls,
            ownership: holding.ownership,
            refresh: holding.refresh,
            store,
            index,
            producer: RwLock::new(producer),
            failed_passes: Arc::new(AtomicU32::new(0)),
            straggler_permits: Arc::new(Semaphore::new(config.stragglers_max.max(1))),
            stragglers: TaskTracker::new(),
            acks: Arc::new(Acks::default()),
            config,
            wake,
            topics,
            resolver,
        })
    }

    /// Dispatches until `cancel` fires; the batch in hand is finished first.
    pub async fn run(self, cancel: CancellationToken) {
        let mut failures = 0u32;
        tracing::info!("dispatcher started");
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
            let (report, settle) = self.pass(true).await;
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
        // Drain: every record produced is recorded before the process exits.
        drop(to_settler);
        if let Err(err) = settling.await {
            tracing::error!(error = %err, "settler task failed");
        }
        self.stragglers.close();
        self.stragglers.wait().await;
        self.producer_flush();
        tracing::info!("dispatcher stopped");
    }

    /// One pass over every shard: claim, CAS, produce, and record every
    /// outcome (waiting for every acknowledgement). Never fails: what could
    /// not be done is left for the lease to repair and counted.
    pub async fn run_once(&self) -> DispatchReport {
        let (mut report, settle) = self.pass(false).await;
        if let Some(settle) = settle {
            let settled = self.settler().settle(settle).await;
            report.dispatched = settled.produced;
            report.failed += settled.failed;
            report.refused = settled.refused;
        }
        report
    }

    fn settler(&self) -> Settler {
        Settler {
            store: self.store.clone(),
            index: self.index.clone(),
            failed_passes: self.failed_passes.clone(),
            topics: self.topics.clone(),
            resolver: self.resolver.clone(),
            window: self.config.window,
        }
    }

    /// Claim, compare-and-set and produce; what is left to record (mark,
    /// release, count refusals) is returned for the settler. With `detach`,
    /// records unacknowledged after `ack_wait` settle in the background.
    async fn pass(&self, detach: bool) -> (DispatchReport, Option<Settle>) {
        self.producer_check();
        let mut report = DispatchReport::default();
        let pass_started = Instant::now();
        let ownership = self.ownership.borrow().clone();
        let claims = self.claim_all(&ownership).await;
        let claimed_after = pass_started.elapsed();
        let Some(redis_now_ms) = claims.iter().map(|c| c.now_ms).max() else {
            return (report, None);
        };
        let started = Instant::now();
        report.more = claims
            .iter()
            .any(|c| c.ids.len() >= self.config.batch as usize);
        report.next_in = claims
            .iter()
            .filter_map(|c| c.next_ms)
            .min()
            .map(|next| Duration::from_millis(next.saturating_sub(redis_now_ms).max(0) as u64));
        let fence = ownership.fence(claims.iter().filter(|c| !c.ids.is_empty()).map(|c| c.shard));
        let ids: Vec<JobId> = claims.into_iter().flat_map(|c| c.ids).collect();
        report.claimed = ids.len();
        let ids = self.pace(ids, redis_now_ms).await;
        let Some(fence) = fence else {
            return (report, None);
        };

        let token: u64 = rand::random();
        let cas_started = Instant::now();
        let won = self
            .cas(&ids, token, &fence, redis_now_ms, &mut report)
            .await;
        if won.is_empty() {
            return (report, None);
        }

        // The dispatch time comes from Redis's clock plus elapsed monotonic
        // time: no tickler host's wall clock is involved.
        let dispatched_ms = redis_now_ms + started.elapsed().as_millis() as i64;
        let dispatched_at = Utc
            .timestamp_millis_opt(dispatched_ms)
            .single()
            .unwrap_or_else(Utc::now);
        let retry_ms = dispatched_ms + self.config.retry_delay.as_millis() as i64;
        let producer = self.producer_current();
        let produce_started = Instant::now();
        let (mut outcomes, stragglers) = self.produce(&producer, &won, dispatched_ms).await;
        report.dispatched = won.len();
        if !stragglers.is_empty() {
            let waiting = stragglers.len();
            let permit = if detach {
                u32::try_from(waiting).ok().and_then(|n| {
                    self.straggler_permits
                        .clone()
                        .try_acquire_many_owned(n)
                        .ok()
                })
            } else {
                None
            };
            match permit {
                Some(permit) => {
                    tracing::debug!(num_jobs = waiting, "records settle in the background");
                    let settler = self.settler();
                    let settle = Settle {
                        token,
                        producer: producer.clone(),
                        outcomes: Vec::new(),
                        dispatched_at,
                        retry_ms,
                    };
                    self.stragglers.spawn(async move {
                        let outcomes: Vec<Sent> = stragglers.collect().await;
                        settler.settle(Settle { outcomes, ..settle }).await;
                        drop(permit);
                    });
                }
                // Too many already settling (the broker is down or slow for
                // everyone): wait, which also slows claiming.
                None => outcomes.extend(stragglers.collect::<Vec<Sent>>().await),
            }
        }
        tracing::debug!(
            num_jobs = won.len(),
            claim_us = claimed_after.as_micros() as u64,
            cas_us = (produce_started - cas_started).as_micros() as u64,
            produce_us = produce_started.elapsed().as_micros() as u64,
            "dispatch pass"
        );
        (
            report,
            Some(Settle {
                token,
                producer,
                outcomes,
                dispatched_at,
                retry_ms,
            }),
        )
    }

    /// Holds back the jobs of paced topics beyond what each topic's shared
    /// pace lets through now: they go back to the index, spread at the
    /// topic's rate after the ones held back before them. Returns the ids
    /// that go on to the compare-and-set. Costs nothing while no topic has
    /// a pace.
    async fn pace(&self, ids: Vec<JobId>, redis_now_ms: i64) -> Vec<JobId> {
        if ids.is_empty() || !self.controls.any_paced() {
            return ids;
        }
        let topics = match self.store.job_topics(&ids).await {
            Ok(topics) => topics,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the topics of claimed jobs to pace them; trying again shortly");
                let retry_ms = redis_now_ms + self.config.retry_delay.as_millis() as i64;
                let back: Vec<(JobId, i64)> = ids.iter().map(|id| (*id, retry_ms)).collect();
                self.index_requeue(&back).await;
                return Vec::new();
            }
        };
        let topic_of: HashMap<JobId, &str> =
            topics.iter().map(|(id, t)| (*id, t.as_str())).collect();
        let mut paced: BTreeMap<&str, Vec<JobId>> = BTreeMap::new();
        let mut free = Vec::with_capacity(ids.len());
        for id in ids {
            match topic_of.get(&id) {
                Some(topic) if self.controls.rate(topic).is_some() => {
                    paced.entry(topic).or_default().push(id)
                }
                _ => free.push(id),
            }
        }
        let tick_ms = PACE_TICK.as_millis() as i64;
        for (topic, ids) in paced {
            let Some(rate) = self.controls.rate(topic) else {
                continue;
            };
            let (granted, slot) = match self.index.pace(topic, ids.len(), rate, PACE_TICK).await {
                Ok(answer) => answer,
                Err(err) => {
                    metrics::index_failed("pace", ids.len(), &err);
                    (0, redis_now_ms + self.config.retry_delay.as_millis() as i64)
                }
            };
            free.extend_from_slice(&ids[..granted]);
            let held = &ids[granted..];
            if held.is_empty() {
                continue;
            }
            // Job i of those held goes at slot + i / rate, rounded up to a
            // tick.
            let back: Vec<(JobId, i64)> = held
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let at = slot + (i as i64 * 1000) / i64::from(rate);
                    (*id, (at + tick_ms - 1) / tick_ms * tick_ms)
                })
                .collect();
            metrics::dispatch_paced(topic, held.len());
            self.index_requeue(&back).await;
        }
        free
    }

    async fn claim_all(&self, ownership: &Ownership) -> Vec<Claim> {
        let claims = ownership.shards.keys().map(|shard| {
            self.index
                .job_claim(*shard, self.config.batch, self.config.lease)
        });
        let mut out = Vec::with_capacity(ownership.shards.len());
        for result in join_all(claims).await {
            match result {
                Ok(claim) => out.push(claim),
                Err(err) => metrics::index_failed("claim", 0, &err),
            }
        }
        out
    }

    /// The MySQL compare-and-set on the claimed ids; returns the jobs won.
    /// Ids not due by the database's clock go back to Redis (or out of it,
    /// beyond the window); stale ones are dropped from it.
    async fn cas(
        &self,
        ids: &[JobId],
        token: u64,
        fence: &crate::store::Fence,
        redis_now_ms: i64,
        report: &mut DispatchReport,
    ) -> Vec<Job> {
        let outcome = match self
            .store
            .job_claim_many_with(
                ids,
                token,
                self.config.lease,
                fence,
                self.controls.claim_checks_pauses(),
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(err) => {
                tracing::warn!(error = %err, num_jobs = ids.len(), "claim compare-and-set failed");
                let retry_ms = redis_now_ms + self.config.retry_delay.as_millis() as i64;
                let back: Vec<(JobId, i64)> = ids.iter().map(|id| (*id, retry_ms)).collect();
                self.index_requeue(&back).await;
                report.failed = ids.len();
                return Vec::new();
            }
        };
        if !outcome.fenced.is_empty() {
            // This instance lost a shard (paused past its TTL, or handed it
            // back): the ids are the new owner's, due now.
            tracing::warn!(
                num_jobs = outcome.fenced.len(),
                "claim fenced off: a shard has a new owner"
            );
            metrics::dispatch_fenced(outcome.fenced.len());
            let back: Vec<(JobId, i64)> = outcome
                .fenced
                .iter()
                .map(|id| (*id, redis_now_ms))
                .collect();
            self.index_requeue(&back).await;
            self.refresh.notify_one();
        }
        if !outcome.paused.is_empty() {
            // Out of the index while the topic is paused; a resume puts
            // them back.
            metrics::dispatch_held("paused", outcome.paused.len());
            if let Err(err) = self.index.job_remove_many(&outcome.paused).await {
                metrics::index_failed("drop jobs of paused topics", outcome.paused.len(), &err);
            }
        }
        if !outcome.expired.is_empty() {
            metrics::dispatch_held("expired", outcome.expired.len());
            match self.store.job_expire_many(&outcome.expired).await {
                Ok(n) => tracing::info!(
                    num_jobs = n,
                    "occurrences past their misfire grace cancelled"
                ),
                // They stay pending and expired: the next claim tries again.
                Err(err) => tracing::warn!(error = %err, "cannot cancel expired jobs"),
            }
            if let Err(err) = self.index.job_remove_many(&outcome.expired).await {
                metrics::index_failed("drop expired jobs", outcome.expired.len(), &err);
            }
        }
        report.stale = outcome.stale.len();
        report.not_due = outcome.not_due.len();
        metrics::dispatch_cas_lost(outcome.stale.len() + outcome.not_due.len());
        if !outcome.stale.is_empty() {
            if let Err(err) = self.index.job_remove_many(&outcome.stale).await {
                metrics::index_failed("drop stale entries", outcome.stale.len(), &err);
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
                metrics::index_failed("drop jobs moved beyond the window", beyond.len(), &err);
            }
        }
        outcome.won
    }

    /// Hands the jobs' records to the producer and waits for their
    /// acknowledgements, at most `ack_wait`. Returns the outcomes known by
    /// then and the deliveries still outstanding. A job whose topic the
    /// broker does not have is refused without being sent: librdkafka would
    /// hold it for `message.timeout.ms`.
    async fn produce(
        &self,
        producer: &FutureProducer,
        jobs: &[Job],
        dispatched_ms: i64,
    ) -> (Vec<Sent>, FuturesUnordered<Delivery>) {
        let mut outcomes = Vec::new();
        let pending: FuturesUnordered<Delivery> = FuturesUnordered::new();
        // Records not yet acknowledged, by topic.
        let mut outstanding: HashMap<String, usize> = HashMap::new();
        for job in jobs {
            let sent = |result| Sent {
                id: job.id,
                topic: job.topic.clone(),
                scheduled: job.schedule_time,
                result,
            };
            if self.topics.state(&job.topic) == TopicState::Missing {
                // Refused only on recent metadata, so a topic created since
                // is not held against a job. Older metadata is fetched again
                // in the background (the pass never waits on the broker for
                // it) and the job tried again after `retry_delay`, by when
                // the metadata is recent.
                let failure = if self.topics.fetched_within(TOPIC_MISSING_TRUST) {
                    Failure::Refused {
                        reason: "unknown_topic",
                        message: format!("topic {:?} does not exist on the broker", job.topic),
                    }
                } else {
                    let topics = self.topics.clone();
                    tokio::spawn(async move { topics.refresh_if_older(TOPICS_REFRESH_MIN).await });
                    Failure::Unchecked(format!(
                        "topic {:?} is not in the broker's metadata; checking again",
                        job.topic
                    ))
                };
                outcomes.push(sent(Err(failure)));
                continue;
            }
            match enqueue(producer, job, dispatched_ms) {
                Ok(delivery) => {
                    let (id, topic, scheduled) = (job.id, job.topic.clone(), job.schedule_time);
                    *outstanding.entry(topic.clone()).or_insert(0) += 1;
                    let acks = self.acks.clone();
                    pending.push(
                        async move {
                            let result = match delivery.await {
                                Ok(Ok(delivery)) => {
                                    acks.acked(&topic, Instant::now());
                                    Ok((delivery.partition, delivery.offset))
                                }
                                Ok(Err((err, _))) => Err(kafka_failure(&err)),
                                Err(_) => Err(Failure::Broker(
                                    "the producer was dropped before delivery".to_owned(),
                                )),
                            };
                            Sent {
                                id,
                                topic,
                                scheduled,
                                result,
                            }
                        }
                        .boxed(),
                    );
                }
                Err(err) => outcomes.push(sent(Err(kafka_failure(&err)))),
            }
        }
        let mut pending = pending;
        let mut settled = |sent: Sent, outstanding: &mut HashMap<String, usize>| {
            if let Some(n) = outstanding.get_mut(&sent.topic) {
                *n -= 1;
            }
            outcomes.push(sent);
        };
        let deadline = tokio::time::sleep(self.config.ack_wait);
        tokio::pin!(deadline);
        while !pending.is_empty() {
            tokio::select! {
                Some(sent) = pending.next() => settled(sent, &mut outstanding),
                _ = &mut deadline => break,
            }
        }
        // Past the wait, only the records of topics the broker has stopped
        // answering for are left to the background; the others are waited
        // for, so that a broker slow for everyone slows claiming down too.
        let now = Instant::now();
        loop {
            let waited_for = outstanding
                .iter()
                .any(|(topic, n)| *n > 0 && !self.acks.suspect(topic, now));
            if !waited_for {
                break;
            }
            match pending.next().await {
                Some(sent) => settled(sent, &mut outstanding),
                None => break,
            }
        }
        (outcomes, pending)
    }

    async fn index_requeue(&self, jobs: &[(JobId, i64)]) {
        if let Err(err) = self.index.job_requeue_many(jobs).await {
            // The in-flight lease returns them to the due set anyway.
            metrics::index_failed("requeue", jobs.len(), &err);
        }
    }

    fn producer_current(&self) -> FutureProducer {
        match self.producer.read() {
            Ok(producer) => producer.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the producer when librdkafka reports it fatally failed, or
    /// after several settled batches in which every send failed. Batches
    /// still settling keep the old producer alive until their deliveries
    /// resolve.
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

fn kafka_failure(err: &KafkaError) -> Failure {
    failure_classify(err.rdkafka_error_code(), err.to_string())
}

/// Puts one job's record in the producer's queue. The claim is bounded, so
/// the local queue is never full for long; a full queue fails the send (and
/// the job is retried) at once.
fn enqueue(
    producer: &FutureProducer,
    job: &Job,
    dispatched_ms: i64,
) -> Result<DeliveryFuture, KafkaError> {
    let id = job.id.to_string();
    let attempt = job.attempt.to_string();
    let scheduled = job.schedule_time.timestamp_millis().to_string();
    let dispatched = dispatched_ms.to_string();
    let mut headers = OwnedHeaders::new_with_capacity(job.headers.len() + 6);
    for (name, value) in &job.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_bytes()),
        });
    }
    // The creating request's trace context, unless the job's own headers
    // carry one.
    if let Some(trace_parent) = &job.trace_parent {
        if !job.headers.contains_key(job::HEADER_TRACEPARENT) {
            headers = headers.insert(Header {
                key: job::HEADER_TRACEPARENT,
                value: Some(trace_parent.as_bytes()),
            });
        }
    }
    if let Some(schedule_id) = job.schedule_id {
        headers = headers.insert(Header {
            key: job::HEADER_SCHEDULE_ID,
            value: Some(schedule_id.to_string().as_bytes()),
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
    producer.send_result(record).map_err(|(err, _)| err)
}

/// What a pass leaves to the settler: the outcomes of its records.
struct Settle {
    token: u64,
    /// Kept alive until every delivery resolved, even if replaced.
    producer: FutureProducer,
    outcomes: Vec<Sent>,
    dispatched_at: DateTime<Utc>,
    /// When jobs whose send failed for the broker's sake are tried again
    /// (Redis clock, ms).
    retry_ms: i64,
}

/// What settling a batch did.
#[derive(Debug, Default)]
struct Settled {
    produced: usize,
    failed: usize,
    refused: usize,
}

/// Records a pass's outcomes: marks produced jobs `dispatched`, returns the
/// broker's failures to `pending`, counts refusals as failed attempts, and
/// releases or moves the Redis claims. Runs beside the next pass, so
/// claiming never waits on marking.
struct Settler {
    store: Store,
    index: Index,
    failed_passes: Arc<AtomicU32>,
    topics: Topics,
    resolver: Resolver,
    window: Duration,
}

impl Settler {
    async fn settle(&self, settle: Settle) -> Settled {
        let Settle {
            token,
            producer,
            outcomes,
            dispatched_at,
            retry_ms,
        } = settle;
        drop(producer);
        if outcomes.is_empty() {
            return Settled::default();
        }
        // A record that timed out may be for a topic deleted since the
        // metadata was read: ask again before blaming the broker.
        if outcomes
            .iter()
            .any(|s| matches!(s.result, Err(Failure::TimedOut(_))))
        {
            self.topics.refresh_if_older(TOPICS_REFRESH_MIN).await;
        }
        let mut dispatched = Vec::with_capacity(outcomes.len());
        let mut refused: Vec<(JobId, String)> = Vec::new();
        let mut failed = Vec::new();
        let mut unchecked = 0usize;
        let mut first_error = None;
        for sent in outcomes {
            let failure = match sent.result {
                Ok((partition, offset)) => {
                    metrics::dispatch_lateness(sent.scheduled, dispatched_at);
                    dispatched.push(Dispatched {
                        id: sent.id,
                        partition,
                        offset,
                        dispatched_at,
                    });
                    continue;
                }
                Err(Failure::TimedOut(message))
                    if self.topics.state(&sent.topic) == TopicState::Missing =>
                {
                    Failure::Refused {
                        reason: "unknown_topic",
                        message: format!(
                            "topic {:?} does not exist on the broker ({message})",
                            sent.topic
                        ),
                    }
                }
                Err(failure) => failure,
            };
            match failure {
                Failure::Refused { reason, message } => {
                    tracing::warn!(job_id = sent.id, topic = %sent.topic, reason, error = %message, "record refused");
                    metrics::produce_refused(&sent.topic, reason);
                    if reason == "unknown_topic" {
                        self.topics.forget(&sent.topic);
                    }
                    refused.push((sent.id, message));
                }
                Failure::TimedOut(message) | Failure::Broker(message) => {
                    tracing::warn!(job_id = sent.id, error = %message, "produce failed");
                    first_error.get_or_insert(message);
                    failed.push(sent.id);
                }
                Failure::Unchecked(message) => {
                    tracing::debug!(job_id = sent.id, error = %message, "record not sent");
                    first_error.get_or_insert(message);
                    failed.push(sent.id);
                    unchecked += 1;
                }
            }
        }
        metrics::dispatched(dispatched.len());
        if !dispatched.is_empty() {
            self.failed_passes.store(0, Ordering::Relaxed);
        } else if failed.len() > unchecked {
            self.failed_passes.fetch_add(1, Ordering::Relaxed);
        }

        let retried_early = self.mark_dispatched(token, &dispatched).await;
        if !failed.is_empty() {
            metrics::produce_failed(failed.len() - unchecked);
            let error = first_error.unwrap_or_default();
            match self.store.job_release_many(token, &failed, &error).await {
                Ok(_) => {
                    let back: Vec<(JobId, i64)> = failed.iter().map(|id| (*id, retry_ms)).collect();
                    self.index_requeue(&back).await;
                }
                // The rows stay dispatching; the reconciler frees them when
                // the lease expires.
                Err(err) => tracing::warn!(error = %err, "cannot release failed claims"),
            }
        }
        self.refusals_record(token, &refused).await;
        // A job a consumer's report already sent back for a retry keeps its
        // Redis entry (its retry time); its lease entry just expires.
        let done: Vec<JobId> = dispatched
            .iter()
            .map(|d| d.id)
            .filter(|id| !retried_early.contains(id))
            .collect();
        if let Err(err) = self.index.job_remove_many(&done).await {
            // Harmless: the entries expire and the CAS finds the rows done.
            metrics::index_failed("release claims", done.len(), &err);
        }
        Settled {
            produced: dispatched.len(),
            failed: failed.len(),
            refused: refused.len(),
        }
    }

    /// Counts refusals as failed attempts, then moves their Redis claims:
    /// a retry inside the window back to the due set at its new time,
    /// anything else (dead, beyond the window) out of Redis.
    async fn refusals_record(&self, token: u64, refused: &[(JobId, String)]) {
        if refused.is_empty() {
            return;
        }
        let settled = match self.resolver.refusals_apply(token, refused).await {
            Ok(settled) => settled,
            Err(err) => {
                // The rows stay dispatching; after the lease the reconciler
                // returns them to pending and the next send is refused again.
                tracing::warn!(error = %err, num_jobs = refused.len(), "cannot record refused sends");
                return;
            }
        };
        let horizon = settled.db_now.map(|now| now + self.window);
        let back: Vec<(JobId, i64)> = settled
            .retried
            .iter()
            .filter(|entry| horizon.is_some_and(|h| entry.schedule_time < h))
            .map(|entry| (entry.id, entry.schedule_time.timestamp_millis()))
            .collect();
        // Only rows this refusal changed leave Redis: one that moved on
        // without it (its lease expired and it was rescued, maybe indexed
        // and claimed again) keeps its entry.
        let gone: Vec<JobId> = settled
            .dead_ids
            .iter()
            .copied()
            .chain(
                settled
                    .retried
                    .iter()
                    .map(|entry| entry.id)
                    .filter(|id| !back.iter().any(|(b, _)| b == id)),
            )
            .collect();
        self.index_requeue(&back).await;
        if let Err(err) = self.index.job_remove_many(&gone).await {
            metrics::index_failed("drop refused jobs", gone.len(), &err);
        }
    }

    async fn index_requeue(&self, jobs: &[(JobId, i64)]) {
        if let Err(err) = self.index.job_requeue_many(jobs).await {
            // The in-flight lease returns them to the due set anyway.
            metrics::index_failed("requeue", jobs.len(), &err);
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_topic_silent_while_others_are_answered_is_left_behind() {
        let acks = Acks::default();
        let t0 = Instant::now();
        assert!(
            !acks.suspect("orders", t0),
            "no answer from the broker yet: wait"
        );
        acks.acked("payments", t0);
        assert!(
            acks.suspect("orders", t0),
            "others answered, this one never"
        );
        acks.acked("orders", t0);
        assert!(
            !acks.suspect("orders", t0 + Duration::from_millis(500)),
            "answered lately"
        );
        let later = t0 + TOPIC_SILENT_AFTER + Duration::from_millis(1);
        assert!(
            !acks.suspect("orders", later),
            "silent, but so is everyone: wait"
        );
        acks.acked("payments", later);
        assert!(
            acks.suspect("orders", later),
            "silent while others are answered"
        );
        let much_later = later + BROKER_ANSWERING_WITHIN;
        assert!(
            !acks.suspect("orders", much_later),
            "the broker answers no one: wait"
        );
        let alone = Acks::default();
        alone.acked("orders", t0);
        assert!(
            !alone.suspect("orders", t0 + Duration::from_secs(5)),
            "one topic, slow: the broker is slow"
        );
    }

    #[test]
    fn only_the_jobs_own_faults_count_as_attempts() {
        let refused = |code| match failure_classify(Some(code), String::new()) {
            Failure::Refused { reason, .. } => Some(reason),
            _ => None,
        };
        for (code, reason) in [
            (RDKafkaErrorCode::UnknownTopicOrPartition, "unknown_topic"),
            (RDKafkaErrorCode::UnknownTopic, "unknown_topic"),
            (RDKafkaErrorCode::MessageSizeTooLarge, "invalid_record"),
            (RDKafkaErrorCode::TopicAuthorizationFailed, "not_authorized"),
        ] {
            assert_eq!(refused(code), Some(reason), "{code:?}");
        }
        // The broker's own trouble never buries a job.
        for code in [
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::QueueFull,
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::RequestTimedOut,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
        ] {
            assert!(
                matches!(
                    failure_classify(Some(code), String::new()),
                    Failure::Broker(_)
                ),
                "{code:?}"
            );
        }
        assert!(matches!(
            failure_classify(Some(RDKafkaErrorCode::MessageTimedOut), String::new()),
            Failure::TimedOut(_)
        ));
        assert!(matches!(
            failure_classify(None, String::new()),
            Failure::Broker(_)
        ));
    }
}

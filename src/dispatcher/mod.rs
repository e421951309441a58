//! The dispatcher (the "event process"): claims due ids in Redis from the
//! shards this instance holds (membership hands them over, with their
//! epochs), wins the MySQL compare-and-set `pending → dispatching` fenced by
//! those epochs, produces each job to its topic with the idempotent
//! producer, marks it `dispatched` with where it landed, and releases the
//! Redis claim. No business logic.
//!
//! It claims ahead: the ids due within `dispatch_lookahead_ms` (20 ms by
//! default), by Redis's clock and then by the database's in the
//! compare-and-set, and holds each job until the first instant at which the
//! database's clock is surely past its `schedule_time` ([`release`]). So the
//! claim and the compare-and-set cost no lateness, and nothing leaves early
//! by the database's clock. It sleeps until the next job enters the
//! lookahead (or until woken by the API or the loader), never on a fixed
//! poll, and claims in batches. Claiming, sending and recording run as
//! separate tasks, so MySQL, Redis and the broker work at once; the jobs
//! between claim and record are bounded.
//!
//! One bad job never holds up the rest. A job whose topic the broker does
//! not have (by the cached metadata) is not sent at all; a record the broker
//! refuses for the job's own sake (missing topic, too large, not authorised)
//! is a failed attempt of that job — retried with backoff, then `dead` —
//! while a failure of the broker itself (timeouts, transport) is not the
//! job's fault and only delays it. Records sent together are waited for at
//! least `ack_wait`; those still unacknowledged then, of a topic the broker
//! has stopped answering for while it answers for others, settle in the
//! background. A broker slow for everyone is waited for, and claiming waits
//! with it.
//!
//! What a crash leaves behind, step by step:
//! - after the Redis claim (of a job due now or within the lookahead): ids
//!   sit in the in-flight set; when the lease expires the next claim returns
//!   them to the due set.
//! - after the MySQL claim: rows are `dispatching` under this instance;
//!   once it is dead for the others (heartbeat older than
//!   `instance_ttl_ms`) they put them in doubt (after the claim lease, at
//!   worst), the reconciler reads their topics back and returns those not
//!   found to `pending`, and the shards' new owners adopt the in-flight
//!   sets.
//! - after producing, before marking: the read-back finds the records and
//!   marks the jobs; one that reaches the broker only after it (a pause at
//!   the wrong instant, see docs/api.md) is the one duplicate the contract
//!   allows.
//! - after marking, before releasing Redis: stale in-flight entries, removed
//!   when their lease expires and the CAS finds the row not pending.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::future::{join_all, BoxFuture};
use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::Timeout;
use tokio::sync::{watch, Notify, Semaphore};

mod release;
mod settle;

use release::{Claimed, DbClock, Releaser};
use settle::Settler;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};

use crate::config::Config;
use crate::index::{Claim, Index};
use crate::job::{self, Job, JobId};
use crate::kafka::{self, Topics};
use crate::membership::{Holding, Ownership};
use crate::metrics;
use crate::resolver::Resolver;
use crate::store::Store;
use crate::topic_controls::TopicControls;

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
    /// Jobs due within this long are claimed and held until their time.
    pub lookahead: Duration,
    /// `doubt_margin_ms`: how long after the producer gave up on a record
    /// the broker may still make it visible.
    pub doubt_margin: Duration,
    /// `dispatch_stall_ms`: busy this long without finishing a pass, the
    /// dispatcher gives up ([`Watchdog`]).
    pub stall: Duration,
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
            lookahead: Duration::from_millis(config.dispatch_lookahead_ms),
            doubt_margin: Duration::from_millis(config.doubt_margin_ms),
            stall: Duration::from_millis(config.dispatch_stall_ms),
        }
    }
}

/// Watches the dispatcher's loop for a stall: a pass (or the wait for room
/// in the pipeline) that does not end, because a call to MySQL, Redis or
/// Kafka never returns. Membership beats on its own connections, so such
/// a dispatcher would keep its shards, and their jobs, for good.
///
/// It counts its own ticks, a second apart, while the loop is busy and
/// has not moved: a process stopped and resumed (SIGSTOP, a VM paused)
/// sees one late tick on waking, not a stall.
#[derive(Clone, Default)]
struct Watchdog {
    /// Passes finished.
    moved: Arc<AtomicU64>,
    /// Inside a pass or waiting for room, not sleeping between passes.
    busy: Arc<std::sync::atomic::AtomicBool>,
}

impl Watchdog {
    const TICK: Duration = Duration::from_secs(1);

    fn busy(&self, busy: bool) {
        self.busy.store(busy, Ordering::Relaxed);
        if !busy {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Resolves once the loop has been busy without moving for `stall`.
    async fn stalled(self, stall: Duration) {
        let ticks = stall.as_millis().div_ceil(Self::TICK.as_millis()).max(1);
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + Self::TICK, Self::TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut seen = self.moved.load(Ordering::Relaxed);
        let mut still = 0u128;
        loop {
            tick.tick().await;
            let moved = self.moved.load(Ordering::Relaxed);
            if moved != seen || !self.busy.load(Ordering::Relaxed) {
                seen = moved;
                still = 0;
                continue;
            }
            still += 1;
            if still >= ticks {
                return;
            }
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
    /// Jobs that won the MySQL CAS, to be sent at their time (`run_once`:
    /// produced and marked).
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
    /// Jobs between their claim and their record.
    pipeline: Arc<Pipeline>,
}

/// Holds claiming back while it lives (see [`Pipeline::stall`]).
struct Stall(Arc<Pipeline>);

impl Drop for Stall {
    fn drop(&mut self) {
        self.0.stalled.fetch_sub(1, Ordering::Relaxed);
        self.0.freed.notify_waiters();
    }
}

/// Counts the jobs between their claim and their record, so that claiming
/// waits while too many are in flight, or while the broker keeps records
/// unacknowledged past `ack_wait` (a slow broker or database slows claiming
/// down instead of piling claims up in the producer's queue).
#[derive(Default)]
pub struct Pipeline {
    jobs: AtomicUsize,
    /// Records waited for past `ack_wait`, by groups.
    stalled: AtomicUsize,
    freed: Notify,
}

impl Pipeline {
    fn claimed(&self, n: usize) {
        self.jobs.fetch_add(n, Ordering::Relaxed);
    }

    fn settled(&self, n: usize) {
        let _ = self
            .jobs
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |jobs| {
                Some(jobs.saturating_sub(n))
            });
        self.freed.notify_waiters();
    }

    /// A group's records are waited for past `ack_wait`: claiming waits
    /// until the returned guard is dropped.
    fn stall(self: &Arc<Self>) -> Stall {
        self.stalled.fetch_add(1, Ordering::Relaxed);
        Stall(self.clone())
    }

    /// Returns once fewer than `max` jobs are in flight and the broker
    /// answers within `ack_wait`.
    async fn room(&self, max: usize) {
        loop {
            let freed = self.freed.notified();
            if self.jobs.load(Ordering::Relaxed) < max && self.stalled.load(Ordering::Relaxed) == 0
            {
                return;
            }
            freed.await;
        }
    }
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

/// Spawns one of the dispatcher's tasks; `ended` fires when it ends, by
/// returning or by a panic. Dropped unfinished (the dispatcher panicked),
/// the task is aborted: its claims are recovered as after a crash.
fn spawn_watched<F>(ended: &CancellationToken, task: F) -> AbortOnDropHandle<()>
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let ended = ended.clone().drop_guard();
    AbortOnDropHandle::new(tokio::spawn(async move {
        let _ended = ended;
        task.await
    }))
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
    /// The broker's trouble, not the job's, reported for a record handed
    /// to it (a delivery failure): it may have been persisted all the same,
    /// so the claim is put in doubt and settled by reading the topic back.
    Broker(String),
    /// Never handed to the broker (the producer's queue refused it, or the
    /// dispatcher withheld it: its lease ran out, its topic was paused):
    /// tried again, attempt uncounted.
    Unsent(String),
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
    /// The claim it was sent under.
    token: u64,
    topic: String,
    scheduled: DateTime<Utc>,
    attempt: u32,
    /// The database's time when it was sent (its `tickler-dispatched-at`).
    dispatched_at: DateTime<Utc>,
    /// When to try again if the broker failed it (Redis's clock, ms).
    retry_ms: i64,
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
            pipeline: Arc::new(Pipeline::default()),
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

    /// Dispatches until `cancel` fires; every job claimed is sent and
    /// recorded first.
    ///
    /// Three tasks beside this loop's claiming: the releaser holds claimed
    /// jobs until their time and sends them, the acknowledger waits for the
    /// broker's answers, the settler records them. At most twice a batch
    /// per shard held are between the claim and their record at once.
    pub async fn run(self, cancel: CancellationToken) {
        let mut failures = 0u32;
        tracing::info!("dispatcher started");
        let releaser = self.releaser();
        let settler = self.settler();
        let (to_releaser, claimed) = tokio::sync::mpsc::channel::<Claimed>(4);
        let (to_acker, released) = tokio::sync::mpsc::unbounded_channel();
        let (to_settler, settles) = tokio::sync::mpsc::channel(64);
        // Each task ends only once the drain closes its input: one that
        // ends before (a panic) ends the dispatcher as well.
        let broken = CancellationToken::new();
        let holding = {
            let releaser = releaser.clone();
            spawn_watched(
                &broken,
                async move { releaser.hold(claimed, to_acker).await },
            )
        };
        let acknowledging = {
            let releaser = releaser.clone();
            spawn_watched(&broken, async move {
                releaser.acknowledge_all(released, to_settler).await
            })
        };
        let settling = spawn_watched(&broken, async move { settler.settle_all(settles).await });
        // A stall ends the dispatcher as a broken task does.
        let watchdog = Watchdog::default();
        let watching = spawn_watched(&broken, {
            let (watchdog, stall) = (watchdog.clone(), self.config.stall);
            async move {
                watchdog.stalled(stall).await;
                tracing::error!(
                    stall_ms = stall.as_millis() as u64,
                    "the dispatcher made no progress for dispatch_stall_ms: a call to MySQL, Redis or Kafka does not return; giving up"
                );
            }
        });
        while !cancel.is_cancelled() && !broken.is_cancelled() {
            // Bounded: claim no more while the pipeline is full.
            let owned = self.ownership.borrow().shards.len().max(1);
            let max = (self.config.batch as usize)
                .saturating_mul(owned)
                .saturating_mul(2);
            watchdog.busy(true);
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = broken.cancelled() => break,
                _ = self.pipeline.room(max) => {}
            }
            let started = Instant::now();
            let (report, claimed) = tokio::select! {
                passed = self.pass() => passed,
                _ = broken.cancelled() => break,
            };
            if let Some(claimed) = claimed {
                fail_point!("dispatcher-claimed");
                if let Err(unsent) = to_releaser.send(claimed).await {
                    let settle = releaser.release_now(unsent.0).await;
                    self.settler().settle(vec![settle]).await;
                }
            }
            watchdog.busy(false);
            let pause = if report.more {
                failures = 0;
                Duration::ZERO
            } else if self.failed_passes.load(Ordering::Relaxed) > 0 || report.failed > 0 {
                // The broker or the database is failing: back off.
                failures = failures.saturating_add(1);
                Duration::from_millis(100u64 << failures.min(5))
            } else {
                failures = 0;
                self.pause_after(report.next_in, started.elapsed())
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = broken.cancelled() => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
            }
        }
        if broken.is_cancelled() && !cancel.is_cancelled() {
            // No drain: what the tasks hold is recovered as after a crash,
            // put in doubt once this instance has left (the role's end
            // stops it). The panic goes on to the role's watcher.
            let tasks = [holding, acknowledging, settling];
            for task in &tasks {
                task.abort();
            }
            for task in tasks {
                if let Err(err) = task.await {
                    if err.is_panic() {
                        std::panic::resume_unwind(err.into_panic());
                    }
                }
            }
            tracing::error!(
                "the dispatcher stopped: one of its tasks ended on its own, or it stalled"
            );
            return;
        }
        // The drain is bounded by shutdown_timeout_ms, not the watchdog: a
        // long one (into a broker that answers nothing) is no stall.
        drop(watching);
        // Drain: every job claimed is sent, and every record produced is
        // recorded, before the process exits.
        drop(to_releaser);
        for (task, name) in [
            (holding, "releaser"),
            (acknowledging, "acknowledger"),
            (settling, "settler"),
        ] {
            if let Err(err) = task.await {
                tracing::error!(error = %err, task = name, "dispatcher task failed");
            }
        }
        self.stragglers.close();
        self.stragglers.wait().await;
        self.producer_flush();
        tracing::info!("dispatcher stopped");
    }

    /// How long to sleep after a pass that left nothing due: until the
    /// next job enters the lookahead, but at least half the lookahead (so
    /// a steady stream is claimed in groups, not one job per pass) and at
    /// most `idle`.
    fn pause_after(&self, next_in: Option<Duration>, spent: Duration) -> Duration {
        let lookahead = self.config.lookahead;
        let until_next = next_in.unwrap_or(self.config.idle);
        until_next
            .saturating_sub(lookahead)
            .max(lookahead / 2)
            .min(self.config.idle)
            .saturating_sub(spent)
    }

    /// One pass over every shard: claim, CAS, send at each job's time, and
    /// record every outcome (waiting for every acknowledgement). Never
    /// fails: what could not be done is left for the lease to repair and
    /// counted.
    pub async fn run_once(&self) -> DispatchReport {
        let (mut report, claimed) = self.pass().await;
        if let Some(claimed) = claimed {
            let settle = self.releaser().release_now(claimed).await;
            let settled = self.settler().settle(vec![settle]).await;
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
            pipeline: self.pipeline.clone(),
            doubt_margin: self.config.doubt_margin,
        }
    }

    fn releaser(&self) -> Releaser {
        Releaser {
            ownership: self.ownership.clone(),
            controls: self.controls.clone(),
            topics: self.topics.clone(),
            acks: self.acks.clone(),
            ack_wait: self.config.ack_wait,
            straggler_permits: self.straggler_permits.clone(),
            stragglers: self.stragglers.clone(),
            settler: self.settler(),
        }
    }

    /// Claims in Redis the ids due within the lookahead and wins the
    /// compare-and-set on them; returns what was won, to be sent at each
    /// job's time.
    async fn pass(&self) -> (DispatchReport, Option<Claimed>) {
        self.producer_check();
        let mut report = DispatchReport::default();
        let claim_started = Instant::now();
        let ownership = self.ownership.borrow().clone();
        let claims = self.claim_all(&ownership).await;
        let Some(redis_now_ms) = claims.iter().map(|c| c.now_ms).max() else {
            return (report, None);
        };
        metrics::dispatch_stage("claim", claim_started.elapsed());
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

        // Never 0: that is the placeholder of a job no claim holds
        // (`store::dispatch::CLAIM_NONE`).
        let token: u64 = rand::random::<u64>() | 1;
        let cas_started = Instant::now();
        let Some((jobs, clock)) = self
            .cas(&ids, token, &fence, redis_now_ms, &mut report)
            .await
        else {
            return (report, None);
        };
        metrics::dispatch_stage("cas", cas_started.elapsed());
        fail_point_stall!("dispatcher-stall");
        report.dispatched = jobs.len();
        self.pipeline.claimed(jobs.len());
        let retry_ms =
            redis_now_ms + (self.config.retry_delay + claim_started.elapsed()).as_millis() as i64;
        (
            report,
            Some(Claimed {
                token,
                producer: self.producer_current(),
                // From before the compare-and-set: its own time, lock
                // waits included, comes out of the window, not the margin.
                send_by: cas_started + self.send_window(),
                claim_started: cas_started,
                incarnation: ownership.incarnation,
                clock,
                retry_ms,
                jobs,
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
            self.index.job_claim(
                *shard,
                self.config.batch,
                self.config.lease,
                self.config.lookahead,
            )
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

    /// The MySQL compare-and-set on the claimed ids; returns the jobs won
    /// (due within the lookahead by the database's clock) and where that
    /// clock stood. Ids not due by then go back to Redis (or out of it,
    /// beyond the window); stale ones are dropped from it.
    ///
    /// Long because it is one step of the hot path with its three outcomes
    /// (won, not due yet, stale), each followed in Redis at once.
    async fn cas(
        &self,
        ids: &[JobId],
        token: u64,
        fence: &crate::store::Fence,
        redis_now_ms: i64,
        report: &mut DispatchReport,
    ) -> Option<(Vec<Job>, DbClock)> {
        let outcome = match self
            .store
            .job_claim_many_with(
                ids,
                token,
                self.config.lease,
                fence,
                self.controls.claim_checks_pauses(),
                self.config.lookahead,
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
                return None;
            }
        };
        let answered = Instant::now();
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
        if !outcome.unreadable.is_empty() {
            // Set aside as dead by the compare-and-set itself; the others
            // of the pass go on.
            for (id, reason) in &outcome.unreadable {
                tracing::error!(job_id = id, error = %reason, "claimed row does not decode; set aside as dead");
            }
            metrics::jobs_unreadable(outcome.unreadable.len());
            let ids: Vec<JobId> = outcome.unreadable.iter().map(|(id, _)| *id).collect();
            if let Err(err) = self.index.job_remove_many(&ids).await {
                metrics::index_failed("drop unreadable jobs", ids.len(), &err);
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
        let db_now = outcome.db_now?;
        if outcome.won.is_empty() {
            return None;
        }
        let clock = DbClock {
            db_ms: db_now.timestamp_millis(),
            at: answered,
        };
        Some((outcome.won, clock))
    }

    /// How long after its claim a job may still be handed to the producer:
    /// its record then reaches the broker or is given up by the producer
    /// (`message.timeout.ms`) before the claim's lease expires, with a
    /// margin for what is on the wire. Past the lease the reconciler reads
    /// the topic back, and that reading must be final.
    fn send_window(&self) -> Duration {
        self.config
            .lease
            .saturating_sub(Duration::from_millis(self.config.message_timeout_ms))
            .saturating_sub(self.config.doubt_margin)
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
    // Stamped with the database's time, as its `tickler-dispatched-at`:
    // reading the topic back to settle a claim in doubt starts from the
    // claim's time on the same clock.
    let record = FutureRecord::to(&job.topic)
        .key(&key)
        .payload(&job.payload)
        .headers(headers)
        .timestamp(dispatched_ms);
    producer.send_result(record).map_err(|(err, _)| err)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the watchdog calls a stall of `stall` within `within`,
    /// while `drive` works the loop's side.
    async fn stalls<F>(stall: Duration, within: Duration, drive: impl FnOnce(Watchdog) -> F) -> bool
    where
        F: std::future::Future<Output = ()>,
    {
        let watchdog = Watchdog::default();
        let watching = watchdog.clone().stalled(stall);
        tokio::select! {
            _ = watching => true,
            _ = async { drive(watchdog).await; std::future::pending::<()>().await } => false,
            _ = tokio::time::sleep(within) => false,
        }
    }

    #[tokio::test]
    async fn the_watchdog_calls_a_pass_that_does_not_end_a_stall() {
        let stalled = stalls(
            Duration::from_secs(2),
            Duration::from_secs(5),
            |w| async move {
                w.busy(true);
            },
        )
        .await;
        assert!(stalled);
    }

    #[tokio::test]
    async fn the_watchdog_leaves_a_loop_that_moves_or_sleeps_alone() {
        let moving = stalls(
            Duration::from_secs(1),
            Duration::from_secs(3),
            |w| async move {
                loop {
                    w.busy(true);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    w.busy(false);
                }
            },
        );
        let sleeping = stalls(
            Duration::from_secs(1),
            Duration::from_secs(3),
            |w| async move {
                w.busy(false);
            },
        );
        let (moving, sleeping) = tokio::join!(moving, sleeping);
        assert!(!moving && !sleeping);
    }

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

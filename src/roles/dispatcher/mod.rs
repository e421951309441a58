//! The dispatcher (the "event process"): claims due ids in Redis from the
//! shards this instance holds (membership hands them over, with their
//! epochs), wins the MySQL compare-and-set `pending → dispatching` fenced by
//! those epochs, produces each job to its topic with the idempotent
//! producer, marks it `dispatched` with where it landed, and releases the
//! Redis claim. No business logic.
//!
//! It claims ahead: the ids due within `dispatcher.lookahead_ms` (20 ms by
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
//!   `cluster.instance_ttl_ms`) they put them in doubt (after the claim lease, at
//!   worst), the reconciler reads their topics back and returns those not
//!   found to `pending`, and the shards' new owners adopt the in-flight
//!   sets.
//! - after producing, before marking: the read-back finds the records and
//!   marks the jobs; one that reaches the broker only after it (a pause at
//!   the wrong instant, see docs/api.md) is the one duplicate the contract
//!   allows.
//! - after marking, before releasing Redis: stale in-flight entries, removed
//!   when their lease expires and the CAS finds the row not pending.
//!
//! Its rooms: this file holds the settings and the loop; [`claim`] the
//! claim and the compare-and-set, [`release`] holding each job until its
//! time and handing it to the producer, [`send`] the record and what a
//! failed send means, [`settle`] recording what became of each record,
//! [`pipeline`] what holds claiming back, [`watchdog`] the watch for a
//! loop that stopped moving.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify, Semaphore};

mod claim;
mod pipeline;
mod release;
mod send;
mod settle;
mod watchdog;

use pipeline::{Acks, Pipeline};
use release::{Claimed, Releaser};
use send::producer_create;
pub use send::Failure;
use settle::Settler;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use watchdog::{spawn_watched, Watchdog};

use crate::config::Config;
use crate::index::Index;
use crate::kafka::{KafkaError, Producer, Topics};
use crate::metrics;
use crate::roles::membership::{Holding, Ownership};
use crate::roles::resolver::Resolver;
use crate::roles::topic_controls::TopicControls;
use crate::roles::verifier::Feed;
use crate::store::Store;

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
    /// `kafka.doubt_margin_ms`: how long after the producer gave up on a record
    /// the broker may still make it visible.
    pub doubt_margin: Duration,
    /// `dispatcher.stall_ms`: busy this long without finishing a pass, the
    /// dispatcher gives up ([`Watchdog`]).
    pub stall: Duration,
    /// `dispatcher.smooth_per_second`: the deployment-wide pace jobs with a
    /// flexible window are smoothed under.
    pub smooth_per_second: Option<u32>,
}

/// Delay before a job whose send failed for the broker's sake is tried
/// again.
pub const DISPATCH_RETRY_DELAY: Duration = Duration::from_secs(1);
/// Records settling in the background at most, per claimed batch of a
/// shard (`stragglers_max` = this × `dispatcher.batch`).
pub const STRAGGLER_BATCHES: usize = 4;

impl DispatcherConfig {
    pub fn from_config(config: &Config) -> Self {
        DispatcherConfig {
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            batch: config.dispatcher.batch,
            lease: config.claim_lease(),
            idle: Duration::from_millis(config.dispatcher.idle_ms),
            linger_ms: config.kafka.linger_ms,
            message_timeout_ms: config.kafka.message_timeout_ms,
            retry_delay: DISPATCH_RETRY_DELAY,
            window: config.window(),
            ack_wait: Duration::from_millis(config.dispatcher.ack_wait_ms),
            stragglers_max: (config.dispatcher.batch as usize).saturating_mul(STRAGGLER_BATCHES),
            lookahead: Duration::from_millis(config.dispatcher.lookahead_ms),
            doubt_margin: Duration::from_millis(config.kafka.doubt_margin_ms),
            stall: Duration::from_millis(config.dispatcher.stall_ms),
            smooth_per_second: config.dispatcher.smooth_per_second,
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
    producer: RwLock<Producer>,
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
    /// Where produced records are handed to be read back.
    verify: Option<Feed>,
}

/// The burst a paced topic may send at once, and the granularity at which
/// the jobs it holds back are spread (so that they come back in groups, not
/// one claim per job).
pub const PACE_TICK: Duration = Duration::from_millis(100);

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
            verify: None,
        })
    }

    /// Hands every record it produces to `feed`, to be read back
    /// ([`crate::roles::verifier`]).
    pub fn verified_by(mut self, feed: Feed) -> Self {
        self.verify = Some(feed);
        self
    }

    /// Dispatches until `cancel` fires; every job claimed is sent and
    /// recorded first.
    ///
    /// Three tasks beside this loop's claiming: the releaser holds claimed
    /// jobs until their time and sends them, the acknowledger waits for the
    /// broker's answers, the settler records them. At most twice a batch
    /// per shard held are between the claim and their record at once.
    ///
    /// Long because it is the dispatcher's whole life in order — its tasks
    /// started, the claim loop, the two ways out (a task that broke, a drain) —
    /// and each part uses the handles the start made.
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
                    "the dispatcher made no progress for dispatcher.stall_ms: a call to MySQL, Redis or Kafka does not return; giving up"
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
            verify: self.verify.clone(),
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

    fn producer_current(&self) -> Producer {
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
        let fatal = self.producer_current().fatal_error();
        if fatal.is_none() && passes < PRODUCER_FAILED_PASSES_BEFORE_RESTART {
            return;
        }
        match producer_create(&self.config) {
            Ok(fresh) => {
                metrics::producer_restarted(passes, &fatal);
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
        if let Err(err) = self.producer_current().flush(Duration::from_secs(5)) {
            tracing::warn!(error = %err, "producer flush on shutdown failed");
        }
    }
}

//! The verifier (#59): proof that each dispatched job's record is on its
//! topic. Behind the dispatch path — the settler hands it what it marked
//! `dispatched`, and never waits for it — it reads the records back at the
//! positions the broker acknowledged, in batches, and:
//!
//! - found: sets `verified_at`;
//! - not there once the partition's end is past it (another record at its
//!   offset, none, the topic made again): the job is produced again as the
//!   next attempt, counted in `tickler_delivery_missing_total` and logged
//!   with the offset that failed;
//! - never knowable (retention removed the offset first): counted, left;
//! - not yet told (the broker down, a slow read): asked again later.
//!
//! A sweep finds what it was never handed or let go of: dispatched rows
//! still unverified a while after their mark (their verifier died, its
//! queue was full), within a lookback. Every change is a compare-and-set on
//! the row's attempt and position, so any number of verifiers may read the
//! same rows.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::domain::delivery::{Produced, Verify};
use crate::domain::job::JobId;
use crate::index::Index;
use crate::kafka::verify::{Reader, Verdict};
use crate::metrics;
use crate::store::{Store, SweepMark};

/// Most records waiting for the verifier; past it the dispatcher's hand-off
/// is dropped (counted) and the sweep finds them.
pub const QUEUE_MAX: usize = 200_000;
/// Most records read back in one batch.
pub const BATCH_MAX: usize = 5_000;
/// How long one batch's reading may take.
pub const READ_WAIT: Duration = Duration::from_secs(5);
/// A record not yet told is asked again after this long ...
pub const RETRY_AFTER: Duration = Duration::from_secs(5);
/// ... and, once it was produced this long ago (the broker down a while),
/// every [`RETRY_SLOW`].
pub const SLOW_AFTER: Duration = Duration::from_secs(600);
pub const RETRY_SLOW: Duration = Duration::from_secs(60);
/// A record still not told this long after it was produced is let go of
/// (counted `gave_up`): past the sweep's lookback, nothing reads it again.
pub const GIVE_UP_AFTER: Duration = SWEEP_LOOKBACK;
/// The sweep looks at rows marked at least this long ago (sooner, their
/// own verifier is on them) ...
pub const SWEEP_AFTER: Duration = Duration::from_secs(60);
/// ... and at most this long ago when it starts.
pub const SWEEP_LOOKBACK: Duration = Duration::from_secs(3_600);
/// Time between sweeps.
pub const SWEEP_EVERY: Duration = Duration::from_secs(30);
/// Records handed a second above which the dispatcher is in a burst: the
/// verifier then waits (its reads and writes would share the database and
/// the broker with the burst) ...
pub const BURST_PER_SECOND: u64 = 5_000;
/// ... at most this long after the oldest record waiting was produced.
pub const BURST_DEFER_MAX: Duration = Duration::from_secs(30);

/// The settler's side: offers what it marked dispatched.
#[derive(Clone)]
pub struct Feed {
    verify: Verify,
    to_verifier: mpsc::Sender<Vec<Produced>>,
}

impl Feed {
    /// Hands the records `verify` covers to the verifier, never waiting:
    /// with its queue full they are counted and left to the sweep.
    pub fn offer(&self, produced: Vec<Produced>) {
        let covered: Vec<Produced> = produced
            .into_iter()
            .filter(|p| self.verify.covers(p.id))
            .collect();
        if covered.is_empty() {
            return;
        }
        if let Err(err) = self.to_verifier.try_send(covered) {
            let dropped = match err {
                mpsc::error::TrySendError::Full(v) | mpsc::error::TrySendError::Closed(v) => {
                    v.len()
                }
            };
            metrics::delivery_unverified("queue_full", dropped);
        }
    }
}

/// The verifier's settings.
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    pub brokers: String,
    pub kafka_options: std::collections::BTreeMap<String, String>,
    pub verify: Verify,
    /// The sweep looks at rows marked at least this long ago.
    pub sweep_after: Duration,
    /// Time between sweeps.
    pub sweep_every: Duration,
}

impl VerifierConfig {
    pub fn from_config(config: &Config) -> Self {
        VerifierConfig {
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            verify: config.dispatcher.verify,
            sweep_after: SWEEP_AFTER,
            sweep_every: SWEEP_EVERY,
        }
    }
}

/// A record waiting to be read back.
#[derive(Debug)]
struct Waiting {
    produced: Produced,
    /// Not read again before this.
    next: tokio::time::Instant,
}

pub struct Verifier {
    store: Store,
    index: Index,
    config: VerifierConfig,
    from_feed: mpsc::Receiver<Vec<Produced>>,
    queue: VecDeque<Waiting>,
    /// (id, attempt) of what waits, so the sweep adds nothing twice.
    queued: HashSet<(JobId, u32)>,
    swept: SweepMark,
    /// Records handed in the current second, and in the one before.
    handed: (tokio::time::Instant, u64, u64),
}

impl Verifier {
    /// The verifier and the feed the dispatcher's settler offers to.
    pub fn new(store: Store, index: Index, config: VerifierConfig) -> (Verifier, Feed) {
        // Hand-offs, not records: each is one settle's worth.
        let (to_verifier, from_feed) = mpsc::channel(256);
        let feed = Feed {
            verify: config.verify,
            to_verifier,
        };
        let verifier = Verifier {
            store,
            index,
            config,
            from_feed,
            queue: VecDeque::new(),
            queued: HashSet::new(),
            swept: SweepMark::default(),
            handed: (tokio::time::Instant::now(), 0, 0),
        };
        (verifier, feed)
    }

    /// Verifies until `cancel` fires.
    pub async fn run(mut self, cancel: CancellationToken) {
        let reader = loop {
            match Reader::new(&self.config.brokers, &self.config.kafka_options) {
                Ok(reader) => break Arc::new(reader),
                Err(err) => {
                    tracing::warn!(error = %err, "cannot make the verifier's reader; trying again");
                    tokio::select! {
                        _ = cancel.cancelled() => return,
                        _ = tokio::time::sleep(RETRY_AFTER) => {}
                    }
                }
            }
        };
        tracing::info!(verify = %self.config.verify, "verifier started");
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sweep = tokio::time::interval(self.config.sweep_every);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Closed when the dispatcher has stopped: what waits is still read.
        let mut fed = true;
        loop {
            tokio::select! {
                _ = cancel.cancelled() => break,
                handed = self.from_feed.recv(), if fed => match handed {
                    Some(produced) => {
                        self.count_handed(produced.len());
                        self.enqueue(produced);
                    }
                    None => fed = false,
                },
                _ = tick.tick() => self.pass(&reader).await,
                _ = sweep.tick() => self.sweep().await,
            }
        }
        tracing::info!(
            waiting = self.queue.len(),
            "verifier stopped; the sweep reads back what it left"
        );
    }

    /// Counts records handed by the dispatcher, by second.
    fn count_handed(&mut self, n: usize) {
        let now = tokio::time::Instant::now();
        let (since, current, _) = self.handed;
        if now.duration_since(since) >= Duration::from_secs(1) {
            let last = if now.duration_since(since) >= Duration::from_secs(2) {
                0
            } else {
                current
            };
            self.handed = (now, 0, last);
        }
        self.handed.1 += n as u64;
    }

    /// Whether the dispatcher is in a burst (it handed more than
    /// [`BURST_PER_SECOND`] in the last full second or this one) and the
    /// oldest record waiting may wait longer.
    fn deferring(&self) -> bool {
        let (since, current, last) = self.handed;
        let recent = since.elapsed() < Duration::from_secs(2);
        let busy = recent && current.max(last) > BURST_PER_SECOND;
        // The queue is in the order records were handed: its front is the
        // oldest (but for a few retried or swept).
        busy && self
            .queue
            .front()
            .is_none_or(|w| !is_older(&w.produced, Utc::now(), BURST_DEFER_MAX))
    }

    fn enqueue(&mut self, produced: Vec<Produced>) {
        let now = tokio::time::Instant::now();
        let mut dropped = 0;
        for produced in produced {
            if self.queue.len() >= QUEUE_MAX {
                dropped += 1;
                continue;
            }
            if self.queued.insert((produced.id, produced.attempt)) {
                self.queue.push_back(Waiting {
                    produced,
                    next: now,
                });
            }
        }
        metrics::delivery_unverified("queue_full", dropped);
    }

    /// Reads back one batch of what is due to be read, and records what it
    /// found.
    async fn pass(&mut self, reader: &Arc<Reader>) {
        if self.deferring() {
            return;
        }
        let now = tokio::time::Instant::now();
        let mut batch = Vec::new();
        let mut later = VecDeque::new();
        while let Some(waiting) = self.queue.pop_front() {
            if batch.len() < BATCH_MAX && waiting.next <= now {
                batch.push(waiting.produced);
            } else {
                later.push_back(waiting);
            }
        }
        self.queue = later;
        if !batch.is_empty() {
            let reader = reader.clone();
            let read = tokio::task::spawn_blocking(move || {
                let verdicts = reader.check(&batch, Utc::now(), READ_WAIT);
                (batch, verdicts)
            })
            .await;
            match read {
                Ok((batch, verdicts)) => self.record(batch, verdicts).await,
                Err(err) => tracing::warn!(error = %err, "the verifier's read stopped"),
            }
        }
        let oldest = self
            .queue
            .iter()
            .map(|w| w.produced.dispatched_at)
            .min()
            .map(|at| (Utc::now() - at).to_std().unwrap_or_default())
            .unwrap_or_default();
        metrics::delivery_verify_queue(self.queue.len(), oldest);
    }

    /// Long because it is one walk over a batch's verdicts, each kind
    /// recorded its own way (a found batch in one statement, each missing
    /// record produced again, the rest counted or kept for later).
    async fn record(&mut self, batch: Vec<Produced>, verdicts: Vec<Verdict>) {
        let mut found = Vec::new();
        let mut again = Vec::new();
        let mut gave_up = 0;
        let now = Utc::now();
        for (produced, verdict) in batch.into_iter().zip(verdicts) {
            match verdict {
                Verdict::Found => found.push(produced),
                Verdict::Missing(why) => {
                    if !self.produce_again(&produced, &why).await {
                        // The store failed (a failover): asked again.
                        again.push(produced);
                    }
                }
                Verdict::Unknowable(why) => {
                    metrics::delivery_unknowable(produced.id, &produced.topic, &why);
                }
                Verdict::NotYet(why) if is_older(&produced, now, GIVE_UP_AFTER) => {
                    tracing::warn!(
                        job_id = produced.id,
                        why,
                        "a record not read back within the sweep's lookback stays unverified"
                    );
                    gave_up += 1;
                }
                Verdict::NotYet(why) => {
                    tracing::debug!(job_id = produced.id, why, "a record not read back yet");
                    again.push(produced);
                    continue;
                }
            }
        }
        for produced in &found {
            self.queued.remove(&(produced.id, produced.attempt));
        }
        match self.store.job_verified_many(&found).await {
            Ok(_) => metrics::delivery_verified(found.len()),
            Err(err) => {
                tracing::warn!(error = %err, num_jobs = found.len(), "cannot record verified jobs; they are read back again");
                again.extend(found);
            }
        }
        metrics::delivery_unverified("gave_up", gave_up);
        for produced in again {
            let wait = if is_older(&produced, now, SLOW_AFTER) {
                RETRY_SLOW
            } else {
                RETRY_AFTER
            };
            self.queued.insert((produced.id, produced.attempt));
            self.queue.push_back(Waiting {
                produced,
                next: tokio::time::Instant::now() + wait,
            });
        }
        // What was let go of (missing, unknowable, given up) no longer waits.
        let waiting: HashSet<(JobId, u32)> = self
            .queue
            .iter()
            .map(|w| (w.produced.id, w.produced.attempt))
            .collect();
        self.queued.retain(|key| waiting.contains(key));
    }

    /// Produces a job again whose record is not on its topic: the row goes
    /// back to pending as the next attempt (a compare-and-set), then into
    /// Redis. A row changed meanwhile is left as it is. False when the
    /// store failed: the record is to be judged again.
    async fn produce_again(&self, produced: &Produced, why: &str) -> bool {
        match self.store.job_verify_missing(produced, why).await {
            Ok(Some(entry)) => {
                metrics::delivery_missing(
                    produced.id,
                    &produced.topic,
                    produced.partition,
                    produced.offset,
                    why,
                );
                if let Err(err) = self
                    .index
                    .job_refeed_many(&[(entry.id, entry.schedule_time)])
                    .await
                {
                    // Pending and overdue: the reconciler's probe indexes it.
                    metrics::index_failed("requeue a missing record", 1, &err);
                }
            }
            Ok(None) => {
                tracing::debug!(
                    job_id = produced.id,
                    "a record not found belongs to a row changed since"
                );
            }
            Err(err) => {
                tracing::warn!(job_id = produced.id, error = %err, "cannot produce a missing record again; trying again");
                return false;
            }
        }
        true
    }

    /// Adds the dispatched rows still unverified a while after their mark.
    async fn sweep(&mut self) {
        if self.queue.len() >= QUEUE_MAX {
            return;
        }
        let now = match self.store.db_now().await {
            Ok(now) => now,
            Err(err) => {
                tracing::debug!(error = %err, "the verifier's sweep cannot read the database's clock");
                return;
            }
        };
        let until = now - chrono::Duration::from_std(self.config.sweep_after).unwrap_or_default();
        if self.swept.status_at.is_none() {
            self.swept.status_at =
                Some(now - chrono::Duration::from_std(SWEEP_LOOKBACK).unwrap_or_default());
        }
        loop {
            let limit = (QUEUE_MAX - self.queue.len()).min(BATCH_MAX) as u32;
            if limit == 0 {
                return;
            }
            match self.store.job_unverified(self.swept, until, limit).await {
                Ok((rows, mark)) => {
                    self.swept = mark;
                    let full = rows.len() as u32 == limit;
                    let sampled: Vec<Produced> = rows
                        .into_iter()
                        .filter(|p| self.config.verify.covers(p.id))
                        .collect();
                    self.enqueue(sampled);
                    if !full {
                        return;
                    }
                }
                Err(err) => {
                    tracing::debug!(error = %err, "the verifier's sweep failed; trying next time");
                    return;
                }
            }
        }
    }
}

fn is_older(produced: &Produced, now: DateTime<Utc>, age: Duration) -> bool {
    (now - produced.dispatched_at)
        .to_std()
        .is_ok_and(|passed| passed >= age)
}

//! The reconciler: repairs, from MySQL, what a crash or a lost Redis left
//! behind. Every pass:
//!
//! 1. **Claims in doubt** (run last in a pass, since reading Kafka may wait
//!    for a broker that is down) — rows `dispatching` whose lease expired by the
//!    database's clock (their dispatcher died or stalled mid-batch, or its
//!    mark was lost), or which were put in doubt (their instance died,
//!    their send timed out) and whose quiet time is over. Their record may
//!    be on Kafka: their topics are read back. Found, the job is marked
//!    `dispatched` at that position; not found — and nothing more of the
//!    claim can arrive by then — it goes back to `pending` and is
//!    re-indexed. Until then a cancel answers `in_flight`: a job answered
//!    `cancelled` never has a record out there.
//! 2. **Ack deadlines** — dispatched jobs expecting a result whose deadline
//!    passed in silence are retried (or end dead) as if the consumer had
//!    said `retry`.
//! 3. **Overdue probe** — pending jobs due more than `grace` ago are put
//!    back in Redis unless already due or in flight there (the index lost
//!    them, or the write after an INSERT never landed).
//!
//! Beside it in the same role, the [`crate::roles::purger`] deletes finished jobs
//! past `jobs.retention_days`.
//!
//! Its cost follows the number of overdue and in-flight rows — both range
//! scans on `(status, schedule_time)` — never the number of far-future jobs.
//! Every change is a compare-and-set, so several instances may run it at
//! once. (Expired Redis leases are returned by the claim script itself, and
//! stale Redis members are dropped by the dispatcher's compare-and-set.)

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::config::Config;
use crate::index::{Index, IndexError};
use crate::kafka::readback::{self, Sought};
use crate::metrics;
use crate::roles::resolver::Resolver;
use crate::roles::service::{PassError, Service};
use crate::store::{Dispatched, Doubt, Store, StoreError, WindowEntry};

#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// Time between passes.
    pub interval: Duration,
    /// How overdue a pending job must be before the probe checks it, so the
    /// normal path (INSERT, then index) is not raced.
    pub grace: Duration,
    /// Rows per query.
    pub batch: u32,
    /// Most overdue rows one pass examines; the rest wait for the next pass.
    pub max_per_pass: usize,
    /// Brokers and client settings to read topics back with.
    pub brokers: String,
    pub kafka_options: BTreeMap<String, String>,
    /// Longest one read-back may take; past it the claims stay in doubt
    /// until the next pass.
    pub readback_wait: Duration,
}

/// Longest one pass's read-back may take.
pub const READBACK_WAIT: Duration = Duration::from_secs(10);
/// Rows per query of a pass.
pub const BATCH: u32 = 1_000;
/// Most overdue rows one pass examines: a backlog of millions is worked
/// through over several passes, each short enough to keep the others going.
pub const MAX_PER_PASS: usize = 100_000;

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig::from_config(&Config::default())
    }
}

impl ReconcilerConfig {
    pub fn from_config(config: &Config) -> Self {
        ReconcilerConfig {
            interval: Duration::from_millis(config.reconciler.interval_ms),
            grace: Duration::from_millis(config.reconciler.grace_ms),
            batch: BATCH,
            max_per_pass: MAX_PER_PASS,
            brokers: config.kafka.brokers.clone(),
            kafka_options: config.kafka.options.clone(),
            readback_wait: READBACK_WAIT,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Claims in doubt whose record was not on Kafka: back to pending.
    pub rescued: usize,
    /// Claims in doubt whose record was found on Kafka: marked dispatched.
    pub found: usize,
    /// Claims in doubt that could not be settled this pass (Kafka not
    /// read in time): they stay in doubt.
    pub unsettled: usize,
    /// Overdue pending rows examined.
    pub overdue: usize,
    /// Of those, ids Redis had lost and got back.
    pub refed: u64,
    /// Dispatched jobs whose ack deadline passed: retried, or dead.
    pub ack_retried: usize,
    pub ack_dead: usize,
}

pub struct Reconciler {
    store: Store,
    index: Index,
    config: ReconcilerConfig,
    /// Wakes the local dispatcher when jobs were put back.
    wake: Arc<Notify>,
    resolver: Resolver,
    /// Topics whose read-back failed lately: until when each waits, and
    /// its current wait (doubling up to [`READBACK_BACKOFF_MAX`]), so that
    /// the others are read in the meantime.
    readback_backoff: std::sync::Mutex<HashMap<String, (tokio::time::Instant, Duration)>>,
    /// Where readings that ran out of time stopped: the next pass goes on.
    readback_resume: std::sync::Mutex<readback::Resume>,
}

/// Longest a topic whose read-back keeps failing waits between tries.
pub const READBACK_BACKOFF_MAX: Duration = Duration::from_secs(60);

impl Reconciler {
    pub fn new(
        store: Store,
        index: Index,
        config: ReconcilerConfig,
        wake: Arc<Notify>,
        resolver: Resolver,
    ) -> Self {
        Reconciler {
            store,
            index,
            config,
            wake,
            resolver,
            readback_backoff: std::sync::Mutex::new(HashMap::new()),
            readback_resume: std::sync::Mutex::new(readback::Resume::default()),
        }
    }

    fn readback_backoff_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, (tokio::time::Instant, Duration)>> {
        self.readback_backoff
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Settles the claims in doubt whose quiet time is over
    /// ([`doubts_settle`]).
    async fn doubts_settle(&self, report: &mut ReconcileReport) -> Result<(), ReconcileError> {
        let now = tokio::time::Instant::now();
        let skip: HashSet<String> = self
            .readback_backoff_lock()
            .iter()
            .filter(|(_, (until, _))| *until > now)
            .map(|(topic, _)| topic.clone())
            .collect();
        let settled = doubts_settle(
            &self.store,
            &self.index,
            &ReadBack {
                brokers: &self.config.brokers,
                options: &self.config.kafka_options,
                wait: self.config.readback_wait,
                resume: &self.readback_resume,
            },
            self.config.batch,
            &skip,
        )
        .await?;
        {
            let mut backoff = self.readback_backoff_lock();
            for topic in &settled.concluded {
                backoff.remove(topic);
            }
            // A reading that ran out of time goes on next pass: no backoff.
            for topic in settled
                .failed
                .keys()
                .filter(|t| !settled.resuming.contains(*t))
            {
                let wait = backoff
                    .get(topic)
                    .map_or(self.config.interval, |(_, wait)| *wait * 2)
                    .clamp(self.config.interval, READBACK_BACKOFF_MAX);
                backoff.insert(topic.clone(), (now + wait, wait));
            }
        }
        report.rescued = settled.absent;
        report.found = settled.produced;
        report.unsettled = settled.unsettled;
        Ok(())
    }
}

/// A failed pass is logged and the next one tries again.
impl Service for Reconciler {
    type Report = ReconcileReport;
    type Error = ReconcileError;
    const NAME: &'static str = "reconciler";
    const PASS: &'static str = "reconciler pass";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    /// Database time: the rows' times are compared with it.
    async fn now(&self) -> Result<DateTime<Utc>, ReconcileError> {
        Ok(self.store.db_now().await?)
    }

    /// One pass at database time `now`.
    async fn run_once(&mut self, now: DateTime<Utc>) -> Result<ReconcileReport, ReconcileError> {
        let mut report = ReconcileReport::default();

        let before = now - self.config.grace;
        let mut after: Option<WindowEntry> = None;
        while report.overdue < self.config.max_per_pass {
            let page = self
                .store
                .job_list_overdue(before, after, self.config.batch)
                .await?;
            let entries: Vec<_> = page.iter().map(|e| (e.id, e.schedule_time)).collect();
            match self.index.job_refeed_many(&entries).await {
                Ok(refed) => report.refed += refed,
                // Redis down: the probe waits for the next pass, but the
                // ack deadlines and the doubts below, which need only MySQL
                // and Kafka, go on.
                Err(err) => {
                    metrics::index_failed("overdue probe", entries.len(), &err);
                    break;
                }
            }
            report.overdue += page.len();
            after = page.last().copied();
            if page.len() < self.config.batch as usize {
                break;
            }
        }
        metrics::reconciler_refed(report.refed);

        // After the probe, so that a failure here never keeps it from
        // running; bounded per pass like the probe.
        while report.ack_retried + report.ack_dead < self.config.max_per_pass {
            match self.resolver.acks_expire(self.config.batch).await {
                Ok(settled) => {
                    report.ack_retried += settled.retried.len();
                    report.ack_dead += settled.dead;
                    if settled.retried.len() + settled.dead < self.config.batch as usize {
                        break;
                    }
                }
                Err(err) => {
                    metrics::store_failed("ack deadlines", &err);
                    break;
                }
            }
        }
        // Last: reading Kafka back may wait for a broker that is down
        // (`readback_wait`), which must not hold up the repairs above.
        self.doubts_settle(&mut report).await?;
        if report.refed > 0 || report.rescued > 0 {
            self.wake.notify_one();
        }
        Ok(report)
    }

    fn passed(&self, report: &ReconcileReport) -> bool {
        if report.rescued > 0 || report.refed > 0 || report.found > 0 {
            tracing::warn!(
                rescued = report.rescued,
                found = report.found,
                refed = report.refed,
                overdue = report.overdue,
                "reconciler repaired jobs"
            );
        } else if report.ack_retried > 0 || report.ack_dead > 0 {
            tracing::info!(
                retried = report.ack_retried,
                dead = report.ack_dead,
                "ack deadlines passed without a result"
            );
        }
        false
    }
}

impl PassError for ReconcileError {
    fn record(&self, pass: &'static str) {
        match self {
            ReconcileError::Index(err) => metrics::index_failed(pass, 0, err),
            ReconcileError::Store(err) => metrics::store_failed(pass, err),
        }
    }
}

/// Where and how long to read topics back.
pub struct ReadBack<'a> {
    pub brokers: &'a str,
    pub options: &'a BTreeMap<String, String>,
    pub wait: Duration,
    /// Where earlier readings that ran out of time stopped, kept between
    /// passes.
    pub resume: &'a std::sync::Mutex<readback::Resume>,
}

/// What settling claims in doubt did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DoubtsSettled {
    /// Found on Kafka: marked dispatched at the record's position.
    pub produced: usize,
    /// Not found: pending again, indexed.
    pub absent: usize,
    /// Kafka could not be read in time: still in doubt.
    pub unsettled: usize,
    /// Topics whose read failed, with why: their claims stay in doubt.
    pub failed: BTreeMap<String, String>,
    /// Topics whose doubts this pass concluded (found or absent).
    pub concluded: Vec<String>,
    /// Of the failed topics, those whose reading ran out of time and goes
    /// on where it stopped next pass.
    pub resuming: std::collections::BTreeSet<String>,
}

/// Most topics one pass reads back: the pass reads for at most three
/// topics' `wait`, and a topic read quickly leaves time for the next.
pub const READBACK_TOPICS_MAX: usize = 8;

/// Reads back the topics of claims in doubt whose quiet time is over, up to
/// `limit` claims of each of the [`READBACK_TOPICS_MAX`] topics with the
/// oldest doubts (but those in `skip`, whose reads failed lately), and
/// settles each: found, `dispatched` at its position; not found,
/// `pending` and indexed again. A row set `dispatching` by hand (no claim
/// token) is settled the same way. The reconciler runs it every pass;
/// `tickler doctor --repair` until none is left.
///
/// Long because it is one pass: read the doubts due, read their topics
/// back, and record the three verdicts (produced, absent, unsettled).
pub async fn doubts_settle(
    store: &Store,
    index: &Index,
    read_back: &ReadBack<'_>,
    limit: u32,
    skip: &HashSet<String>,
) -> Result<DoubtsSettled, ReconcileError> {
    let settled = DoubtsSettled::default();
    let topics = store.job_doubt_topics().await?;
    let mut doubts = Vec::new();
    for (topic, _) in topics
        .iter()
        .filter(|(topic, _)| !skip.contains(topic))
        .take(READBACK_TOPICS_MAX)
    {
        doubts.extend(store.job_doubts_due_on(topic, limit).await?);
    }
    if doubts.is_empty() {
        return Ok(settled);
    }
    // A claim no record can be stamped for yet (a row set `dispatching` by
    // hand ahead of its time: its record would be no older than its
    // schedule) is absent without a read: a read-back costs the broker and
    // the cores the dispatcher shares (docs/faults.md, the row nemesis).
    let now = store.db_now().await?;
    let (unstamped, doubts): (Vec<_>, Vec<_>) = doubts.into_iter().partition(|d| d.since > now);
    let sought: Vec<Sought> = doubts
        .iter()
        .map(|d| Sought {
            id: d.id,
            attempt: d.attempt,
            topic: d.topic.clone(),
            since: d.since,
        })
        .collect();
    let reading = std::time::Instant::now();
    let read = if sought.is_empty() {
        readback::ReadBack::default()
    } else {
        read_back_find(read_back, &sought, &doubts).await
    };
    tracing::debug!(
        num_jobs = doubts.len(),
        unstamped = unstamped.len(),
        found = read.found.len(),
        read_ms = reading.elapsed().as_millis() as u64,
        oldest_claim_age_ms = doubts
            .iter()
            .map(|d| (Utc::now() - d.since).num_milliseconds())
            .max()
            .unwrap_or(0),
        "claims in doubt read back"
    );
    settle_read(store, index, doubts, unstamped, read, now, settled).await
}

/// Reads the topics of `doubts` back for the records `sought`.
async fn read_back_find(
    read_back: &ReadBack<'_>,
    sought: &[Sought],
    doubts: &[Doubt],
) -> readback::ReadBack {
    let resume = std::mem::take(
        &mut *read_back
            .resume
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    match readback::records_find(
        read_back.brokers,
        read_back.options,
        sought,
        read_back.wait,
        resume,
    )
    .await
    {
        Ok((read, resume)) => {
            *read_back
                .resume
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = resume;
            read
        }
        Err(err) => {
            tracing::warn!(error = %err, "cannot make a kafka reader to settle claims in doubt");
            readback::ReadBack {
                unread: doubts.iter().map(|d| (d.id, d.attempt)).collect(),
                failed: doubts
                    .iter()
                    .map(|d| (d.topic.clone(), format!("no kafka reader: {err}")))
                    .collect(),
                ..readback::ReadBack::default()
            }
        }
    }
}

/// Settles `doubts` by what `read` found of them, and `unstamped` (no
/// record can exist yet) as absent.
async fn settle_read(
    store: &Store,
    index: &Index,
    doubts: Vec<Doubt>,
    unstamped: Vec<Doubt>,
    read: readback::ReadBack,
    now: DateTime<Utc>,
    mut settled: DoubtsSettled,
) -> Result<DoubtsSettled, ReconcileError> {
    // Claims of topics that could not be read stay in doubt (a cancel
    // answers in_flight) until a later pass reads them.
    let (doubts, unsettled): (Vec<_>, Vec<_>) = doubts
        .into_iter()
        .partition(|d| !read.unread.contains(&(d.id, d.attempt)));
    if !unsettled.is_empty() {
        metrics::doubts_unsettled(unsettled.len());
        settled.unsettled = unsettled.len();
    }
    for (topic, why) in &read.failed {
        tracing::warn!(topic, reason = %why, "claims in doubt stay dispatching: their topic could not be read back");
    }
    settled.failed = read.failed;
    settled.resuming = read.resuming;
    let mut concluded: Vec<String> = doubts
        .iter()
        .chain(&unstamped)
        .map(|d| d.topic.clone())
        .collect();
    concluded.sort_unstable();
    concluded.dedup();
    settled.concluded = concluded;
    let found = read.found;
    let (landed, mut absent): (Vec<_>, Vec<_>) = doubts
        .into_iter()
        .partition(|d| found.contains_key(&(d.id, d.attempt)));
    absent.extend(unstamped);
    let marks: Vec<Dispatched> = landed
        .iter()
        .filter_map(|d| {
            let at = found.get(&(d.id, d.attempt))?;
            Some(Dispatched {
                id: d.id,
                // A row set dispatching by hand has no token: marked as
                // the claim 0 ([`Store::job_mark_dispatched_many`]).
                token: d.token.unwrap_or(0),
                partition: at.partition,
                offset: at.offset,
                dispatched_at: at.dispatched_at.unwrap_or(now),
                schedule_time: d.schedule_time,
                attempt: d.attempt,
            })
        })
        .collect();
    if !marks.is_empty() {
        let marked = store.job_mark_dispatched_many(&marks).await?;
        settled.produced = marked.marked as usize;
        let done: Vec<_> = marks
            .iter()
            .map(|m| m.id)
            .filter(|id| !marked.retried_early.contains(id))
            .collect();
        index.job_remove_many(&done).await?;
    }
    let moved = store.job_doubt_absent(&absent).await?;
    settled.absent = moved.len();
    metrics::doubts_settled(settled.produced, settled.absent);
    if !moved.is_empty() {
        let entries: Vec<_> = moved.iter().map(|e| (e.id, e.schedule_time)).collect();
        index.job_refeed_many(&entries).await?;
    }
    Ok(settled)
}

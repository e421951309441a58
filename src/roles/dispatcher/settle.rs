//! Recording what became of sent records: marks produced jobs
//! `dispatched`, puts records the broker may have taken without saying so
//! (timed out, connection lost mid-request) in doubt for the reconciler to
//! read back, returns jobs never handed to the broker to `pending`, counts
//! refusals as failed attempts, and releases or moves the Redis claims.
//!
//! Under load the settler takes every group waiting for it at once (up to
//! [`SETTLE_JOBS_MAX`] jobs), so one mark statement covers several claims:
//! marks are batched across passes, and bounded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::pipeline::Pipeline;
use super::send::{Failure, Sent};
use crate::domain::delivery::Produced;
use crate::domain::job::JobId;
use crate::index::Index;
use crate::kafka::{Producer, Topics, TOPICS_REFRESH_MIN};
use crate::metrics;
use crate::roles::resolver::Resolver;
use crate::roles::verifier::Feed;
use crate::store::{Dispatched, Marked, Store};

/// Most jobs one settle records together.
pub const SETTLE_JOBS_MAX: usize = 5_000;

/// What a group of records left to record.
pub(super) struct Settle {
    /// Kept alive until every delivery resolved, even if replaced.
    pub producers: Vec<Producer>,
    pub outcomes: Vec<Sent>,
    /// Whether these jobs still count in the pipeline (stragglers left it
    /// when they were detached).
    pub counted: bool,
}

/// What settling did.
#[derive(Debug, Default)]
pub(super) struct Recorded {
    pub produced: usize,
    pub failed: usize,
    pub refused: usize,
}

#[derive(Clone)]
pub(super) struct Settler {
    pub store: Store,
    pub index: Index,
    /// Settled batches in a row in which every send failed (the settler
    /// counts; the dispatcher reads before each pass).
    pub failed_passes: Arc<AtomicU32>,
    pub topics: Topics,
    pub resolver: Resolver,
    pub window: Duration,
    pub pipeline: Arc<Pipeline>,
    /// How long a record the producer gave up on may still become visible.
    pub doubt_margin: Duration,
    /// Where produced records are handed to be read back (None:
    /// `dispatcher.verify = off`).
    pub verify: Option<Feed>,
}

impl Settler {
    /// Settles groups as they come, each time with all that waits.
    pub async fn settle_all(&self, mut settles: mpsc::Receiver<Settle>) {
        while let Some(first) = settles.recv().await {
            let mut jobs = first.outcomes.len();
            let mut group = vec![first];
            while jobs < SETTLE_JOBS_MAX {
                match settles.try_recv() {
                    Ok(more) => {
                        jobs += more.outcomes.len();
                        group.push(more);
                    }
                    Err(_) => break,
                }
            }
            fail_point!("dispatcher-settle");
            self.settle(group).await;
        }
    }

    /// Long because a settle is one sequence over one group's bookkeeping:
    /// sort the outcomes (dispatched, refused, failed, in doubt), then record
    /// each kind in MySQL and follow in Redis, counting as it goes; each step's
    /// rule is commented where it is.
    pub async fn settle(&self, group: Vec<Settle>) -> Recorded {
        let started = Instant::now();
        let mut outcomes = Vec::new();
        let mut counted = 0;
        for settle in group {
            drop(settle.producers);
            if settle.counted {
                counted += settle.outcomes.len();
            }
            outcomes.extend(settle.outcomes);
        }
        if outcomes.is_empty() {
            return Recorded::default();
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
        let mut produced = Vec::new();
        // By claim token.
        let mut refused: BTreeMap<u64, Vec<(JobId, String)>> = BTreeMap::new();
        let mut failed: BTreeMap<u64, (Vec<JobId>, i64)> = BTreeMap::new();
        // Payloads their topic's schema refused: by claim token, with why
        // and the topic.
        let mut held: BTreeMap<u64, Vec<(JobId, String, String)>> = BTreeMap::new();
        // Handed to the broker, fate unknown: by claim token.
        let mut doubted: BTreeMap<u64, Vec<JobId>> = BTreeMap::new();
        let mut doubt_error = None;
        let mut failed_count = 0usize;
        let mut refused_count = 0usize;
        let mut unchecked = 0usize;
        let mut first_error = None;
        for sent in outcomes {
            let failure = match sent.result {
                Ok((partition, offset)) => {
                    metrics::dispatch_lateness(sent.scheduled, sent.dispatched_at);
                    if sent.window_end.is_some_and(|end| sent.dispatched_at > end) {
                        metrics::window_missed(&sent.topic);
                    }
                    if self.verify.is_some() {
                        produced.push(Produced {
                            id: sent.id,
                            attempt: sent.attempt,
                            topic: sent.topic.clone(),
                            partition,
                            offset,
                            dispatched_at: sent.dispatched_at,
                        });
                    }
                    dispatched.push(Dispatched {
                        id: sent.id,
                        token: sent.token,
                        partition,
                        offset,
                        dispatched_at: sent.dispatched_at,
                        schedule_time: sent.scheduled,
                        attempt: sent.attempt,
                    });
                    continue;
                }
                // A send that timed out is in doubt even when the metadata
                // now says its topic is missing: the metadata may be late
                // (the topic made, or made again, meanwhile) and the record
                // on the broker, and counting it a refusal would send the
                // next attempt beside it. The read-back settles it (a topic
                // still missing a while later proves absence), and the
                // next send of a job whose topic is missing is refused
                // before it leaves.
                Err(failure) => failure,
            };
            match failure {
                Failure::Refused {
                    reason,
                    message,
                    from_broker,
                } => {
                    metrics::produce_refused(sent.id, &sent.topic, reason, &message);
                    // Only the broker's own answer drops the topic: a
                    // refusal made from the cached metadata is settled up
                    // to a second later, and dropping the topic then would
                    // undo a fetch made since that found it, and keep it
                    // "missing" on fresh metadata for another round of
                    // refusals (every job's attempts spent on a topic that
                    // exists).
                    if reason == "unknown_topic" && from_broker {
                        self.topics.forget(&sent.topic);
                    }
                    refused
                        .entry(sent.token)
                        .or_default()
                        .push((sent.id, message));
                    refused_count += 1;
                }
                Failure::TimedOut(message) | Failure::Broker(message) => {
                    // The broker may have taken it all the same: a cancel
                    // must not answer `cancelled` until it is known.
                    tracing::warn!(job_id = sent.id, error = %message, "produce failed; the record may be on the broker");
                    doubt_error.get_or_insert(message);
                    doubted.entry(sent.token).or_default().push(sent.id);
                    failed_count += 1;
                }
                Failure::Unsent(message) => {
                    tracing::debug!(job_id = sent.id, error = %message, "record not handed to the broker");
                    first_error.get_or_insert(message);
                    let entry = failed
                        .entry(sent.token)
                        .or_insert((Vec::new(), sent.retry_at_ms));
                    entry.0.push(sent.id);
                    failed_count += 1;
                }
                Failure::Held(why) => {
                    held.entry(sent.token)
                        .or_default()
                        .push((sent.id, sent.topic.clone(), why));
                }
                Failure::Unchecked(message) => {
                    tracing::debug!(job_id = sent.id, error = %message, "record not sent");
                    first_error.get_or_insert(message);
                    let entry = failed
                        .entry(sent.token)
                        .or_insert((Vec::new(), sent.retry_at_ms));
                    entry.0.push(sent.id);
                    failed_count += 1;
                    unchecked += 1;
                }
            }
        }
        if !dispatched.is_empty() {
            self.failed_passes.store(0, Ordering::Relaxed);
        } else if failed_count > unchecked {
            self.failed_passes.fetch_add(1, Ordering::Relaxed);
        }

        let retried_early = self.mark_dispatched(&dispatched).await;
        // Counted once the mark was tried: a mark that failed is the
        // reconciler's to make, and the job was produced all the same.
        metrics::dispatched(dispatched.len());
        if let Some(feed) = &self.verify {
            // Behind the dispatch path: never waits.
            feed.offer(produced);
        }
        if failed_count > 0 {
            metrics::produce_failed(failed_count - unchecked);
            let error = first_error.unwrap_or_default();
            for (token, (ids, retry_at_ms)) in &failed {
                match self.store.job_release_many(*token, ids, &error).await {
                    Ok(_) => {
                        let back: Vec<(JobId, i64)> =
                            ids.iter().map(|id| (*id, *retry_at_ms)).collect();
                        self.index_requeue(&back).await;
                    }
                    // The rows stay dispatching; the reconciler frees them
                    // when the lease expires.
                    Err(err) => tracing::warn!(error = %err, "cannot release failed claims"),
                }
            }
        }
        if !doubted.is_empty() {
            let error = format!(
                "not acknowledged ({}); its topic is read back before it is produced again",
                doubt_error.unwrap_or_default()
            );
            for (token, ids) in &doubted {
                match self
                    .store
                    .job_doubt_many(*token, ids, &error, self.doubt_margin)
                    .await
                {
                    // Out of Redis: the reconciler indexes them again if
                    // they were not produced.
                    Ok(_) => {
                        if let Err(err) = self.index.job_remove_many(ids).await {
                            metrics::index_failed("drop jobs in doubt", ids.len(), &err);
                        }
                    }
                    // The rows stay dispatching under their claim; the
                    // reconciler reads them back when the lease expires.
                    Err(err) => tracing::warn!(error = %err, "cannot put claims in doubt"),
                }
            }
        }
        for (token, refused) in &refused {
            self.refusals_record(*token, refused).await;
        }
        for (token, held) in &held {
            self.holds_record(*token, held).await;
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
            metrics::index_failed("release claims", done.len(), &err);
        }
        self.pipeline.settled(counted);
        metrics::dispatch_stage("mark", started.elapsed());
        Recorded {
            produced: dispatched.len(),
            failed: failed_count,
            refused: refused_count,
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

    /// Holds jobs whose payload no longer matches their topic's schema:
    /// back to `pending`, held (never claimed until released), out of
    /// Redis; logged and counted by topic. Failing, the rows stay
    /// dispatching and the lease brings them back to be checked again.
    async fn holds_record(&self, token: u64, held: &[(JobId, String, String)]) {
        let rows: Vec<(JobId, String)> =
            held.iter().map(|(id, _, why)| (*id, why.clone())).collect();
        match self.store.job_hold_many(token, &rows).await {
            Ok(_) => {
                for (id, topic, why) in held {
                    metrics::job_held(*id, topic, "payload_schema", why);
                }
                let ids: Vec<JobId> = rows.iter().map(|(id, _)| *id).collect();
                if let Err(err) = self.index.job_remove_many(&ids).await {
                    // Harmless: the claim refuses a held job and drops it.
                    metrics::index_failed("drop held jobs", ids.len(), &err);
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, num_jobs = held.len(), "cannot hold jobs whose payload fails their topic's schema; their lease returns them")
            }
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
    async fn mark_dispatched(&self, dispatched: &[Dispatched]) -> Vec<JobId> {
        if dispatched.is_empty() {
            return Vec::new();
        }
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=5 {
            match self.store.job_mark_dispatched_many(dispatched).await {
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

//! Holding claimed jobs until their time, sending their records, and
//! waiting for the broker's acknowledgements.
//!
//! The claimer (`Dispatcher::run`) wins jobs due within the lookahead and
//! hands them here with the database's clock as the compare-and-set read it.
//! The releaser keeps every job it holds in time order and sends each record
//! at the first local instant at which the database's clock is surely past
//! the job's `schedule_time` ([`DbClock::instant_of`]); the acknowledger
//! waits for the broker's answers and passes the outcomes to the settler.
//! Three tasks, so the database, Redis and the broker work at once: the
//! claimer runs the next compare-and-set while records of the last one are
//! in flight and the one before is being marked.
//!
//! Nothing is sent that this instance may no longer send: before each
//! record the releaser checks that its heartbeat is still fresh for the
//! others (a paused or partitioned instance that wakes sends nothing it may
//! have lost), that the claim is young enough for its record to land or be
//! given up before the claim's lease ends, and that the topic was not
//! paused since. A job withheld goes back to `pending`.
//!
//! What a crash leaves behind: held jobs are `dispatching` under this
//! instance, exactly as after a claim; they are put in doubt and settled
//! like any other.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

use chrono::{TimeZone, Utc};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_util::task::TaskTracker;

use super::pipeline::{Acks, TOPIC_SILENT_AFTER};
use super::send::{enqueue, kafka_failure, Delivery, Failure, Sent};
use super::settle::{Settle, Settler};
use super::TOPIC_MISSING_TRUST;
use crate::domain::job::Job;
use crate::kafka::{KafkaError, Producer, TopicState, Topics, TOPICS_REFRESH_MIN};
use crate::metrics;
use crate::roles::membership::Ownership;
use crate::roles::topic_controls::TopicControls;

/// Where the database's clock stood when a compare-and-set answered: it
/// read `db_now_ms` (truncated to the millisecond) at some moment before the
/// answer arrived at local `at`. So at any later local instant the
/// database's clock is at least `db_now_ms` plus the time elapsed since `at`.
#[derive(Debug, Clone, Copy)]
pub(super) struct DbClock {
    pub db_now_ms: i64,
    pub at: Instant,
}

impl DbClock {
    /// A lower bound of the database's clock now, in ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.db_now_ms + self.at.elapsed().as_millis() as i64
    }

    /// A local instant no earlier than the one at which the database's
    /// clock read `ms` (a time in the past, such as a row's `created_at`):
    /// `at` less how far the reading was past `ms`. None when the local
    /// clock cannot say (long ago, on some platforms).
    pub fn instant_after(&self, ms: i64) -> Option<Instant> {
        let back = self.db_now_ms.saturating_sub(ms).max(0) as u64;
        self.at.checked_sub(Duration::from_millis(back))
    }

    /// The first local instant at which the database's clock is surely at
    /// or past `ms`: a record sent then is never early by it.
    pub fn instant_of(&self, ms: i64) -> Instant {
        self.at + Duration::from_millis(ms.saturating_sub(self.db_now_ms).max(0) as u64)
    }
}

/// What one compare-and-set won.
pub(super) struct Claimed {
    pub token: u64,
    pub producer: Producer,
    /// No record of this claim is handed to the producer after this.
    pub send_by: Instant,
    /// When its compare-and-set was sent (the claim was decided after).
    pub claim_started: Instant,
    /// The instance's incarnation when it claimed: none of its records is
    /// sent once a lapse has started another ([`Ownership::may_send`]).
    pub incarnation: u64,
    pub clock: DbClock,
    /// When a job whose send failed for the broker's sake is tried again
    /// (Redis's clock, ms).
    pub retry_at_ms: i64,
    pub jobs: Vec<Job>,
}

/// One claim's context, shared by the jobs it holds.
struct Batch {
    token: u64,
    producer: Producer,
    send_by: Instant,
    claim_started: Instant,
    incarnation: u64,
    clock: DbClock,
    retry_at_ms: i64,
}

impl Batch {
    fn of(claim: &Claimed) -> Batch {
        Batch {
            token: claim.token,
            producer: claim.producer.clone(),
            send_by: claim.send_by,
            claim_started: claim.claim_started,
            incarnation: claim.incarnation,
            clock: claim.clock,
            retry_at_ms: claim.retry_at_ms,
        }
    }
}

/// Records handed to the producer together, and what is known of them.
pub(super) struct Released {
    producer: Producer,
    /// Outcomes known at once (not sent).
    outcomes: Vec<Sent>,
    pending: FuturesUnordered<Delivery>,
    /// Records not yet acknowledged, by topic.
    outstanding: HashMap<String, usize>,
    sent_at: Instant,
}

/// Sends records and collects the broker's answers.
#[derive(Clone)]
pub(super) struct Releaser {
    /// Whether this instance is still alive for the others.
    pub ownership: watch::Receiver<Ownership>,
    /// Whether a topic was paused since its jobs were claimed.
    pub controls: TopicControls,
    pub topics: Topics,
    pub acks: Arc<Acks>,
    pub ack_wait: Duration,
    pub straggler_permits: Arc<Semaphore>,
    pub stragglers: TaskTracker,
    pub settler: Settler,
}

impl Releaser {
    /// Holds the jobs of every claim until their time, then sends them.
    /// Ends once `claimed` is closed and every job held is sent.
    pub async fn hold(
        &self,
        mut claimed: mpsc::Receiver<Claimed>,
        to_acker: mpsc::UnboundedSender<Released>,
    ) {
        let mut held: BTreeMap<(Instant, u64), (Job, Arc<Batch>)> = BTreeMap::new();
        let mut seq = 0u64;
        let mut open = true;
        loop {
            let now = Instant::now();
            let mut due: Vec<(Arc<Batch>, Vec<Job>)> = Vec::new();
            while let Some(entry) = held.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let (job, batch) = entry.remove();
                match due.iter_mut().find(|(b, _)| Arc::ptr_eq(b, &batch)) {
                    Some((_, jobs)) => jobs.push(job),
                    None => due.push((batch, vec![job])),
                }
            }
            for (batch, jobs) in due {
                let released = self.send(&batch, jobs);
                // Unbounded: the pipeline bounds the jobs in flight, and
                // the releaser must never stop keeping time.
                if let Err(unsent) = to_acker.send(released) {
                    // The acknowledger is gone: settle here.
                    if let Some(settle) = self.acknowledge(unsent.0, false).await {
                        self.settler.settle(vec![settle]).await;
                    }
                }
            }
            if !open && held.is_empty() {
                return;
            }
            let next = held.first_key_value().map(|((at, _), _)| *at);
            tokio::select! {
                batch = claimed.recv(), if open => match batch {
                    Some(claim) => {
                        let batch = Arc::new(Batch::of(&claim));
                        for job in claim.jobs {
                            let at = batch.clock.instant_of(job.schedule_time.timestamp_millis());
                            metrics::dispatch_stage(
                                "hold",
                                at.saturating_duration_since(Instant::now()),
                            );
                            seq += 1;
                            held.insert((at, seq), (job, batch.clone()));
                        }
                    }
                    None => open = false,
                },
                _ = tokio::time::sleep_until(next.unwrap_or(now).into()), if next.is_some() => {}
            }
        }
    }

    /// Waits for the broker's answers to what [`Releaser::hold`] sent, one
    /// group after the other, and passes the outcomes on to the settler.
    pub async fn acknowledge_all(
        &self,
        mut released: mpsc::UnboundedReceiver<Released>,
        to_settler: mpsc::Sender<Settle>,
    ) {
        while let Some(group) = released.recv().await {
            if let Some(settle) = self.acknowledge(group, true).await {
                if let Err(unsent) = to_settler.send(settle).await {
                    self.settler.settle(vec![unsent.0]).await;
                }
            }
        }
    }

    /// Sends every job of `claimed` at its time, waits for every
    /// acknowledgement and records the outcomes (`Dispatcher::run_once`).
    pub async fn release_now(&self, claimed: Claimed) -> Settle {
        let batch = Batch::of(&claimed);
        let mut jobs = claimed.jobs;
        jobs.sort_by_key(|job| job.schedule_time);
        let latest = jobs
            .last()
            .map(|job| batch.clock.instant_of(job.schedule_time.timestamp_millis()));
        if let Some(latest) = latest {
            tokio::time::sleep_until(latest.into()).await;
        }
        let mut released = self.send(&batch, jobs);
        let mut outcomes = std::mem::take(&mut released.outcomes);
        outcomes.extend(released.pending.collect::<Vec<Sent>>().await);
        Settle {
            producers: vec![released.producer],
            outcomes,
            counted: true,
        }
    }

    /// Hands the jobs' records to the producer, stamped with the database's
    /// time now (never before their schedule: they are sent at or after
    /// their instant). A job whose topic the broker does not have is refused
    /// without being sent: librdkafka would hold it for
    /// `message.timeout.ms`.
    ///
    /// Long because it is one pass over the batch's jobs, each refused,
    /// withheld or handed to the producer, with the bookkeeping the settle
    /// needs.
    fn send(&self, batch: &Batch, jobs: Vec<Job>) -> Released {
        let mut outcomes = Vec::new();
        let pending: FuturesUnordered<Delivery> = FuturesUnordered::new();
        let mut outstanding: HashMap<String, usize> = HashMap::new();
        let dispatched_at_ms = batch.clock.now_ms();
        let dispatched_at = Utc
            .timestamp_millis_opt(dispatched_at_ms)
            .single()
            .unwrap_or_else(Utc::now);
        for job in jobs {
            // Asked for every record, right before it is handed over: the
            // gap in which a pause could slip a record past the check is
            // this loop's few instructions, not a group's sending.
            let now = Instant::now();
            let alive = self
                .ownership
                .borrow()
                .may_send(batch.incarnation, tokio::time::Instant::from_std(now));
            let in_time = now < batch.send_by;
            let sent = |job: &Job, result| Sent {
                id: job.id,
                token: batch.token,
                topic: job.topic.clone(),
                scheduled: job.schedule_time,
                window_end: job.window_end(),
                attempt: job.attempt,
                dispatched_at,
                retry_at_ms: batch.retry_at_ms,
                result,
            };
            if !alive || !in_time {
                // The others may have declared this instance dead (paused,
                // partitioned) and the claim in doubt: sending now could
                // land after the read-back that settles it.
                metrics::dispatch_withheld("lease", 1);
                let why = if alive {
                    "the claim is too old to send safely"
                } else {
                    "this instance's heartbeat is older than it may trust, or lapsed since the claim"
                };
                outcomes.push(sent(&job, Err(Failure::Unsent(format!("not sent: {why}")))));
                continue;
            }
            if !self.controls.send_allowed(&job.topic, batch.claim_started) {
                metrics::dispatch_withheld("paused", 1);
                outcomes.push(sent(
                    &job,
                    Err(Failure::Unsent("not sent: the topic is paused".to_owned())),
                ));
                continue;
            }
            if let Some(why) = self.schema_refusal(&job) {
                outcomes.push(sent(&job, Err(Failure::Held(why))));
                continue;
            }
            if self.topics.state(&job.topic) == TopicState::Missing {
                // Refused only on recent metadata fetched after the job was
                // created (and a margin for the broker to list a topic made
                // just before it), so a topic created since, or made a moment
                // before its jobs, is not held against a job. Other metadata
                // is fetched again in the background (sending never waits on
                // the broker for it) and the job tried again after
                // `retry_delay`, by when the metadata is recent.
                let trusted_from = batch
                    .clock
                    .instant_after(job.created_at.timestamp_millis())
                    .map(|at| at + TOPIC_CREATED_MARGIN);
                let after_create = trusted_from.is_none_or(|at| self.topics.fetched_after(at));
                let failure = if self.topics.fetched_within(TOPIC_MISSING_TRUST) && after_create {
                    Failure::Refused {
                        reason: "unknown_topic",
                        message: format!("topic {:?} does not exist on the broker", job.topic),
                        from_broker: false,
                    }
                } else {
                    // Fetched once the metadata can speak of the job's
                    // topic (at once, or at its create and margin), and
                    // never more than once a second: the jobs of one new
                    // topic wake together, and one fetch answers them all.
                    // A job the fetch came too early for is let through
                    // unchecked again, and its next try asks again.
                    let topics = self.topics.clone();
                    let from = trusted_from.unwrap_or_else(Instant::now);
                    tokio::spawn(async move {
                        tokio::time::sleep_until(from.into()).await;
                        topics.refresh_if_older(TOPICS_REFRESH_MIN).await
                    });
                    Failure::Unchecked(format!(
                        "topic {:?} is not in the broker's metadata; checking again",
                        job.topic
                    ))
                };
                outcomes.push(sent(&job, Err(failure)));
                continue;
            }
            match enqueue(&batch.producer, &job, dispatched_at_ms) {
                Ok(delivery) => {
                    let mut done = sent(&job, Err(Failure::Broker(String::new())));
                    *outstanding.entry(job.topic.clone()).or_insert(0) += 1;
                    let acks = self.acks.clone();
                    // From the hand-over to the broker's answer, in the
                    // trace of the request that made the job.
                    let span = produce_span(&job);
                    pending.push(
                        async move {
                            done.result = match delivery.await {
                                Ok(landed) => {
                                    acks.acked(&done.topic, Instant::now());
                                    tracing::Span::current()
                                        .record("kafka.partition", landed.0)
                                        .record("kafka.offset", landed.1);
                                    Ok(landed)
                                }
                                Err(KafkaError::Canceled) => Err(Failure::Broker(
                                    "the producer was dropped before delivery".to_owned(),
                                )),
                                Err(err) => Err(kafka_failure(&err)),
                            };
                            done
                        }
                        .instrument(span)
                        .boxed(),
                    );
                }
                // Not handed to the broker: a refusal of the record
                // itself counts against the job, anything else is retried.
                Err(err) => outcomes.push(sent(
                    &job,
                    Err(match kafka_failure(&err) {
                        refused @ Failure::Refused { .. } => refused,
                        _ => Failure::Unsent(err.to_string()),
                    }),
                )),
            }
        }
        Released {
            producer: batch.producer.clone(),
            outcomes,
            pending,
            outstanding,
            sent_at: Instant::now(),
        }
    }

    /// Why `job` must not be sent: its payload does not match its topic's
    /// payload schema in force now (None: it matches, the topic has none,
    /// or a forced release waived the check for this attempt). A topic
    /// without a schema costs one map lookup, none while no topic has one.
    fn schema_refusal(&self, job: &Job) -> Option<String> {
        if job.schema_waived_attempt == Some(job.attempt) {
            return None;
        }
        let schema = self.controls.payload_schema(&job.topic)?;
        schema
            .check(job.payload_kind, &job.payload)
            .err()
            .map(|mismatch| format!("payload_schema: {}", mismatch.without_values()))
    }

    /// Waits for a group's acknowledgements, at most `ack_wait`; past it,
    /// only the records of topics the broker has stopped answering for are
    /// left to settle in the background (when `detach` and there is room),
    /// the others are waited for, so that a broker slow for everyone slows
    /// claiming down too. Returns what is left to settle.
    ///
    /// Long because its waits (the group's, the detached topics', the
    /// deadline) are one loop over one set of pending records.
    async fn acknowledge(&self, group: Released, detach: bool) -> Option<Settle> {
        let Released {
            producer,
            mut outcomes,
            mut pending,
            mut outstanding,
            sent_at,
        } = group;
        let mut settled = |sent: Sent, outstanding: &mut HashMap<String, usize>| {
            if let Some(n) = outstanding.get_mut(&sent.topic) {
                *n -= 1;
            }
            outcomes.push(sent);
        };
        let deadline = tokio::time::sleep_until((sent_at + self.ack_wait).into());
        tokio::pin!(deadline);
        while !pending.is_empty() {
            tokio::select! {
                Some(sent) = pending.next() => settled(sent, &mut outstanding),
                _ = &mut deadline => break,
            }
        }
        let mut stalled = None;
        loop {
            // Asked again as time passes: a topic may fall silent meanwhile.
            let now = Instant::now();
            let waited_for = outstanding
                .iter()
                .any(|(topic, n)| *n > 0 && !self.acks.suspect(topic, now));
            if !waited_for || pending.is_empty() {
                break;
            }
            // The broker is slow for everyone: claiming waits too, until
            // this is dropped.
            stalled.get_or_insert_with(|| self.settler.pipeline.stall());
            tokio::select! {
                Some(sent) = pending.next() => settled(sent, &mut outstanding),
                _ = tokio::time::sleep(TOPIC_SILENT_AFTER / 4) => {}
            }
        }
        drop(stalled);
        if pending.is_empty() {
            metrics::dispatch_stage("ack", sent_at.elapsed());
        } else {
            let waiting = pending.len();
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
                    // The straggler permits bound these: they leave the
                    // pipeline now, so that one silent topic never stops
                    // claiming for the others.
                    self.settler.pipeline.settled(waiting);
                    let settler = self.settler.clone();
                    let producer = producer.clone();
                    self.stragglers.spawn(async move {
                        let outcomes: Vec<Sent> = pending.collect().await;
                        settler
                            .settle(vec![Settle {
                                producers: vec![producer],
                                outcomes,
                                counted: false,
                            }])
                            .await;
                        drop(permit);
                    });
                }
                // Too many already settling (the broker is down or slow for
                // everyone): wait, which also slows claiming.
                None => outcomes.extend(pending.collect::<Vec<Sent>>().await),
            }
        }
        if outcomes.is_empty() {
            return None;
        }
        Some(Settle {
            producers: vec![producer],
            outcomes,
            counted: true,
        })
    }
}

/// How long after a job's create metadata must have been fetched to refuse
/// the job for a topic it does not list: a topic created just before its
/// jobs may take the broker a moment to list.
const TOPIC_CREATED_MARGIN: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_time_maps_back_to_a_local_instant_no_earlier_than_it() {
        let at = Instant::now();
        let clock = DbClock {
            db_now_ms: 1_000_000,
            at,
        };
        assert_eq!(
            clock.instant_after(999_700),
            at.checked_sub(Duration::from_millis(300)),
            "300 ms before the reading: 300 ms before its answer arrived"
        );
        assert_eq!(
            clock.instant_after(1_000_500),
            Some(at),
            "never after the answer"
        );
        assert!(
            clock
                .instant_after(i64::MIN)
                .is_none_or(|long_ago| long_ago + Duration::from_secs(86_400) < at),
            "long ago: none, or an instant long before"
        );
    }

    #[test]
    fn a_job_is_released_no_sooner_than_the_database_says_it_is_due() {
        let at = Instant::now();
        let clock = DbClock {
            db_now_ms: 1_000_000,
            at,
        };
        assert_eq!(clock.instant_of(1_000_000), at, "due as read: at once");
        assert_eq!(clock.instant_of(999_000), at, "overdue: at once");
        assert_eq!(
            clock.instant_of(1_000_015),
            at + Duration::from_millis(15),
            "due 15 ms after the reading: 15 ms after the answer arrived"
        );
        assert!(clock.now_ms() >= 1_000_000);
    }
}

/// A job's produce span, when traces are exported (else none: the hot
/// path makes no span a job).
fn produce_span(job: &Job) -> tracing::Span {
    if !crate::telemetry::enabled() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "job.produce",
        otel.kind = "producer",
        job.id = job.id,
        job.topic = %job.topic,
        job.attempt = job.attempt,
        kafka.partition = tracing::field::Empty,
        kafka.offset = tracing::field::Empty,
    );
    crate::telemetry::parent_set(&span, job.trace_parent.as_deref());
    span
}

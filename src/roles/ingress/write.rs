//! The write side of the ingress: requests checked against their request
//! topic's targets and written to MySQL (and Redis) with the API's rules.
//! Cloned into the task that writes a pass, while the ingress reads the
//! next.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use super::pass::{Batch, IngressConfig, RequestOutcome, Taken};
use crate::config::TopicRules;
use crate::domain::job::{Expiry, NewJob, Status};
use crate::kafka::Topics;
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::topic_controls::TopicControls;
use crate::store::{BatchRow, Cancelled, Debounced, JobChanges, Modified, StoreError};

use super::request::{request_parse, target_allowed, Request, RequestError};

/// Failures other than "database unavailable" before a request is
/// answered `internal` and skipped.
const WRITE_FAILURES_MAX: u32 = 3;

/// Tries of a write that meets a payload dictionary not loaded yet.
const DICT_WAIT_TRIES: u32 = 8;
/// A run of creates is written as at most this many transactions at once:
/// two of 1,000 rows drained fastest on two cores; four of 500 cost MySQL
/// more per row, eight more again (docs/benchmarks-history.md, "Scheduling through
/// Kafka")…
pub const WRITES_AT_ONCE: usize = 2;
/// …of at least this many rows each: a smaller insert costs more per row
/// than waiting does.
const WRITE_ROWS_MIN: usize = 100;

/// A pass's requests, each checked (or refused).
pub type Requests = Vec<Result<Request, RequestError>>;

/// Writes requests; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    /// Writes as the ingress, making Redis follow.
    pub(super) jobs: Jobs,
    pub(super) topics: Topics,
    /// The policies of target topics, and the topics nobody may target.
    pub(super) rules: Arc<TopicRules>,
    pub(super) config: Arc<IngressConfig>,
    /// Payload schemas of target topics (None: not checked, as in tests
    /// that build an ingress alone).
    pub(super) controls: Option<TopicControls>,
}

impl Writer {
    /// The batch's records read and checked, in its order: the request
    /// each asks for, or why it is refused.
    pub async fn requests(&self, batch: &Batch) -> Requests {
        let now = self.jobs.clock().now();
        let mut requests: Requests = batch
            .records
            .iter()
            .map(|record| self.check(record, now))
            .collect();
        self.preflight(&mut requests).await;
        requests
    }

    /// Writes what the batch's requests ask for; one outcome per record,
    /// in the batch's order. Waits while MySQL is unavailable; None when
    /// cancelled meanwhile (what was written stays written: read again, it
    /// is found).
    pub async fn apply(
        &self,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        cancel: &CancellationToken,
    ) -> Option<Vec<RequestOutcome>> {
        // Each partition's requests in their order; the partitions side by
        // side, as many writes at once as MySQL's CPUs take (requests of
        // different partitions have no order to keep).
        // With traces exported: each create's span, in its requester's
        // trace, open while the batch is written.
        let _spans: Vec<tracing::Span> = if crate::telemetry::enabled() {
            requests
                .iter()
                .filter_map(|request| match request {
                    Ok(Request::Put(job)) => Some(job),
                    _ => None,
                })
                .map(|job| {
                    let span = tracing::info_span!(
                        "ingress.request",
                        otel.kind = "consumer",
                        job.topic = %job.topic,
                        job.key = job.key.as_deref().unwrap_or_default(),
                    );
                    crate::telemetry::parent_set(&span, job.trace_parent.as_deref());
                    span
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut partitions: BTreeMap<(&str, i32), Vec<usize>> = BTreeMap::new();
        for (at, record) in batch.records.iter().enumerate() {
            partitions
                .entry((&*record.topic, record.partition))
                .or_default()
                .push(at);
        }
        let applied = futures::future::join_all(
            partitions
                .values()
                .map(|ats| self.apply_in_order(batch, requests, ats, cancel)),
        )
        .await;
        let mut outcomes: Vec<Option<RequestOutcome>> = vec![None; requests.len()];
        for partition in applied {
            for (at, outcome) in partition? {
                outcomes[at] = Some(outcome);
            }
        }
        Some(
            outcomes
                .into_iter()
                .map(|outcome| outcome.unwrap_or(RequestOutcome::Refused(RequestError::Internal)))
                .collect(),
        )
    }

    /// The requests at `ats` (of one partition), in order: consecutive
    /// creates in one multi-row insert; a cancel, or a second request for
    /// the same (topic, key), ends the run, so that every request sees the
    /// ones before it applied.
    async fn apply_in_order(
        &self,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        ats: &[usize],
        cancel: &CancellationToken,
    ) -> Option<Vec<(usize, RequestOutcome)>> {
        let mut outcomes = Vec::with_capacity(ats.len());
        let mut run: Vec<usize> = Vec::new();
        let mut run_targets: HashSet<(&str, &str)> = HashSet::new();
        for &at in ats {
            let request = match &requests[at] {
                Err(err) => {
                    outcomes.push((at, RequestOutcome::Refused(err.clone())));
                    continue;
                }
                Ok(request) => request,
            };
            let target = request.target();
            let ends_run = matches!(request, Request::Cancel { .. } | Request::Debounce { .. })
                || run_targets.contains(&target);
            if ends_run && !run.is_empty() {
                self.run_apply(batch, requests, &run, &mut outcomes, cancel)
                    .await?;
                run.clear();
                run_targets.clear();
            }
            match request {
                Request::Put(_) => {
                    run.push(at);
                    run_targets.insert(target);
                }
                Request::Cancel { topic, key } => {
                    let request_topic = &batch.records[at].topic;
                    let outcome = self.cancel_apply(request_topic, topic, key, cancel).await?;
                    outcomes.push((at, outcome));
                }
                Request::Debounce { job, max_delay_ms } => {
                    let record = &batch.records[at];
                    let outcome = self
                        .debounce_apply(record, job, *max_delay_ms, cancel)
                        .await?;
                    outcomes.push((at, outcome));
                }
            }
        }
        if !run.is_empty() {
            self.run_apply(batch, requests, &run, &mut outcomes, cancel)
                .await?;
        }
        Some(outcomes)
    }

    /// A record read and checked against its request topic's targets and
    /// the reserved topics, as the API checks a token's topics.
    fn check(&self, record: &Taken, now: DateTime<Utc>) -> Result<Request, RequestError> {
        let request = request_parse(&record.as_request(), self.config.limits, now, |topic| {
            self.rules.defaults_for(topic)
        })?;
        let (topic, _) = request.target();
        let targets = self
            .config
            .topics
            .get(&*record.topic)
            .map(Vec::as_slice)
            .unwrap_or_default();
        if !target_allowed(targets, topic) {
            return Err(RequestError::Forbidden(format!(
                "request topic {:?} may not schedule onto topic {topic:?} (its targets: {})",
                record.topic,
                targets.join(", ")
            )));
        }
        if let Some(why) = self.rules.topic_reserved(topic) {
            return Err(RequestError::Reserved(why));
        }
        if let (Request::Put(job), Some(controls)) = (&request, &self.controls) {
            controls
                .payload_check(&job.topic, job.payload_kind, &job.payload)
                .map_err(|mismatch| RequestError::PayloadSchema(mismatch.to_string()))?;
        }
        Ok(request)
    }

    /// The `kafka.topic_check` pre-flight, once per distinct target topic of the
    /// creates (a cancel needs no topic on the broker).
    async fn preflight(&self, requests: &mut [Result<Request, RequestError>]) {
        let mut verdicts: HashMap<String, bool> = HashMap::new();
        for request in requests.iter_mut() {
            let (Ok(Request::Put(job)) | Ok(Request::Debounce { job, .. })) = request else {
                continue;
            };
            let admitted = match verdicts.get(&job.topic) {
                Some(admitted) => *admitted,
                None => {
                    let admitted = self
                        .topics
                        .preflight(self.config.topic_check, &job.topic)
                        .await;
                    verdicts.insert(job.topic.clone(), admitted);
                    admitted
                }
            };
            if !admitted {
                *request = Err(RequestError::UnknownTopic(job.topic.clone()));
            }
        }
    }

    /// The jobs service, writing as `ingress:<request topic>` in the
    /// history.
    fn jobs_for(&self, request_topic: &str) -> Jobs {
        let store = self
            .jobs
            .store()
            .with_actor(&format!("ingress:{request_topic}"));
        self.jobs.writing_as(store)
    }

    /// A run of creates from one partition: one multi-row insert, then the
    /// taken (topic, key)s settled one by one.
    async fn run_apply(
        &self,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        run: &[usize],
        outcomes: &mut Vec<(usize, RequestOutcome)>,
        cancel: &CancellationToken,
    ) -> Option<()> {
        let jobs = self.jobs_for(&batch.records[run[0]].topic);
        // A run's (topic, key)s are distinct, so its creates do not depend
        // on each other: a long run is written as two transactions at once,
        // as the API's concurrent batches are, to use more than one of
        // MySQL's CPUs.
        // In (topic, key) order: request keys arrive in hash order, and a
        // statement's rows in key order touch the unique index's pages one
        // after another rather than all over it.
        let mut run = run.to_vec();
        run.sort_by_key(|at| requests[*at].as_ref().ok().map(Request::target));
        // Whole hundreds in all but the last: the store writes a batch as
        // statements of whole hundreds and one of the rest, and each
        // statement text is prepared once a connection.
        let size = run
            .len()
            .div_ceil(WRITES_AT_ONCE)
            .next_multiple_of(100)
            .max(WRITE_ROWS_MIN);
        let written = futures::future::join_all(
            run.chunks(size)
                .map(|chunk| self.creates_apply(&jobs, batch, requests, chunk, cancel)),
        )
        .await;
        for part in written {
            outcomes.extend(part?);
        }
        Some(())
    }

    /// Creates in one multi-row insert; for a (topic, key) a job holds
    /// already, what [`Writer::put_taken`] says.
    async fn creates_apply(
        &self,
        service: &Jobs,
        batch: &Batch,
        requests: &[Result<Request, RequestError>],
        run: &[usize],
        cancel: &CancellationToken,
    ) -> Option<Vec<(usize, RequestOutcome)>> {
        let mut outcomes = Vec::with_capacity(run.len());
        let (jobs, records): (Vec<&NewJob>, Vec<&Taken>) = run
            .iter()
            .filter_map(|at| match &requests[*at] {
                Ok(Request::Put(job)) => Some((job, &batch.records[*at])),
                _ => None,
            })
            .unzip();
        let positions: Vec<String> = records.iter().map(|record| record.position()).collect();
        match write_retrying(cancel, || service.create_many(&jobs, Some(&positions))).await? {
            Ok(rows) => {
                for (((at, job), record), row) in run.iter().zip(&jobs).zip(&records).zip(rows) {
                    let outcome = match row {
                        BatchRow::Created(created) => RequestOutcome::Created(created),
                        BatchRow::Duplicate => self.put_taken(service, job, record, cancel).await?,
                    };
                    outcomes.push((*at, outcome));
                }
            }
            Err(err) => {
                // Each on its own, so one that cannot be written does not
                // hold up the others.
                tracing::warn!(error = %err, num_jobs = jobs.len(), "ingress insert failed; writing the requests one by one");
                for ((at, job), record) in run.iter().zip(&jobs).zip(&records) {
                    outcomes.push((*at, self.put_one(service, job, record, cancel).await?));
                }
            }
        }
        Some(outcomes)
    }

    /// One create, alone.
    async fn put_one(
        &self,
        service: &Jobs,
        job: &NewJob,
        record: &Taken,
        cancel: &CancellationToken,
    ) -> Option<RequestOutcome> {
        let jobs = [job];
        let positions = [record.position()];
        match write_retrying(cancel, || service.create_many(&jobs, Some(&positions))).await? {
            Ok(mut rows) => match rows.pop() {
                Some(BatchRow::Created(created)) => Some(RequestOutcome::Created(created)),
                _ => self.put_taken(service, job, record, cancel).await,
            },
            Err(err) => Some(internal(&err)),
        }
    }

    /// A create whose (topic, key) a job holds: the same request again
    /// (`existing`), a move of the pending job, or what the job's state
    /// says.
    async fn put_taken(
        &self,
        service: &Jobs,
        job: &NewJob,
        record: &Taken,
        cancel: &CancellationToken,
    ) -> Option<RequestOutcome> {
        let key = job.key.as_deref().unwrap_or_default();
        // A job changed between reading and moving it is read again.
        for _ in 0..WRITE_FAILURES_MAX {
            let (existing, position) = match write_retrying(cancel, || {
                service
                    .store()
                    .job_find_by_key_with_position(&job.topic, key)
            })
            .await?
            {
                Ok(Some(found)) => found,
                // Purged (or deleted by hand) since the insert found it.
                Ok(None) => return Box::pin(self.put_one(service, job, record, cancel)).await,
                Err(err) => return Some(internal(&err)),
            };
            // Read again after a crash: applied already (or a later request
            // of its partition was), so it changes nothing.
            let seen = position.as_deref().is_some_and(|at| record.seen_at(at));
            if seen || job.asks_for_same(&existing) {
                return Some(RequestOutcome::Existing(existing));
            }
            if existing.status != Status::Pending {
                return Some(RequestOutcome::of_settled(existing));
            }
            let position_now = record.position();
            let changes = JobChanges {
                schedule: Some(job.schedule),
                payload: Some((job.payload.clone(), job.payload_kind)),
                headers: Some(job.headers.clone()),
                // The request is the job as it should be: its expiry, or
                // none.
                expiry: Some(match (job.expires_at, job.expires_after_ms) {
                    (Some(at), _) => Some(Expiry::At(at)),
                    (None, Some(ttl_ms)) => Some(Expiry::AfterRun { ttl_ms }),
                    (None, None) => None,
                }),
                window: Some(job.window),
                wall: Some(job.wall.clone()),
                topic: None,
                // Only while it is still the job this request names: one
                // retargeted meanwhile no longer holds (topic, key).
                on_topic: Some(job.topic.clone()),
            };
            let modify =
                || service.modify(existing.id, existing.version, &changes, Some(&position_now));
            match write_retrying(cancel, modify).await? {
                // Crash after the commit: the row has its new time; an
                // earlier one is found by the loader's scan of edited rows.
                Ok(Modified::Applied(moved, _)) => return Some(RequestOutcome::Moved(moved)),
                Ok(Modified::NotPending(settled)) => {
                    return Some(RequestOutcome::of_settled(settled))
                }
                // `Occurrence` answers only a new topic, never asked here.
                Ok(Modified::VersionMismatch(_) | Modified::Occurrence(_)) => continue,
                Err(err) => return Some(internal(&err)),
            }
        }
        Some(RequestOutcome::Refused(RequestError::Internal))
    }

    /// A debounce (`tickler-on-conflict: debounce`), alone: creates the
    /// job, moves the pending one (never past its ceiling), or creates the
    /// next generation once it went out — unless the job holding the key
    /// notes this request or a later one of its partition (read again
    /// after a crash: applied already, so it changes nothing).
    async fn debounce_apply(
        &self,
        record: &Taken,
        job: &NewJob,
        max_delay_ms: Option<u64>,
        cancel: &CancellationToken,
    ) -> Option<RequestOutcome> {
        let service = self.jobs_for(&record.topic);
        let key = job.key.as_deref().unwrap_or_default();
        let found = write_retrying(cancel, || {
            service
                .store()
                .job_find_by_key_with_position(&job.topic, key)
        })
        .await?;
        match found {
            Ok(Some((existing, Some(position)))) if record.seen_at(&position) => {
                return Some(RequestOutcome::Existing(existing))
            }
            Ok(_) => {}
            Err(err) => return Some(internal(&err)),
        }
        let position = record.position();
        let debounce = || service.debounce(job, max_delay_ms, Some(&position));
        Some(match write_retrying(cancel, debounce).await? {
            Ok(Debounced::Created(job, _) | Debounced::Renewed(job, _)) => {
                RequestOutcome::Created(job)
            }
            Ok(Debounced::Moved { job, .. }) => RequestOutcome::Moved(job),
            Ok(Debounced::InFlight(job)) => RequestOutcome::InFlight(job),
            Err(err) => internal(&err),
        })
    }

    /// A tombstone: cancels the job holding (topic, key), with the same
    /// compare-and-set as the API's cancel — `cancelled` means never.
    async fn cancel_apply(
        &self,
        request_topic: &str,
        topic: &str,
        key: &str,
        cancel: &CancellationToken,
    ) -> Option<RequestOutcome> {
        let service = self.jobs_for(request_topic);
        let not_found = || {
            RequestOutcome::Refused(RequestError::NotFound {
                topic: topic.to_owned(),
                key: key.to_owned(),
            })
        };
        let job = match write_retrying(cancel, || service.find(topic, key)).await? {
            Ok(Some(job)) => job,
            Ok(None) => return Some(not_found()),
            Err(err) => return Some(internal(&err)),
        };
        Some(
            match write_retrying(cancel, || service.cancel(job.id)).await? {
                Ok(Cancelled::Applied(job)) => RequestOutcome::Cancelled(job),
                Ok(Cancelled::Already(job)) => RequestOutcome::Cancelled(job),
                Ok(Cancelled::InFlight(job)) => RequestOutcome::InFlight(job),
                Ok(Cancelled::TooLate(job)) => RequestOutcome::TooLate(job),
                Err(StoreError::NotFound(_)) => not_found(),
                Err(err) => internal(&err),
            },
        )
    }
}

/// Runs `write` until it is done, waiting while MySQL is unavailable or
/// rolls it back for contention; gives up after `WRITE_FAILURES_MAX` other
/// failures, at once on a row that does not decode, and after
/// `DICT_WAIT_TRIES` on a payload dictionary not loaded (about 11 s: two
/// loads of `payload_dicts`, after which an absent one is a broken row).
/// One request's row never holds up its pass without bound. None when
/// cancelled while waiting.
async fn write_retrying<T, F, Fut>(
    cancel: &CancellationToken,
    mut write: F,
) -> Option<Result<T, StoreError>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut delay = Duration::from_millis(100);
    let mut failures = 0;
    let mut dict_waits = 0;
    loop {
        match write().await {
            Ok(done) => return Some(Ok(done)),
            // Answers, not failures.
            Err(err @ (StoreError::DuplicateKey | StoreError::NotFound(_))) => {
                return Some(Err(err))
            }
            // The row's own problem: waiting changes nothing.
            Err(err @ (StoreError::Corrupt(_) | StoreError::KeyMissing { .. })) => {
                return Some(Err(err))
            }
            Err(err) => {
                if matches!(err, StoreError::DictionaryUnknown(_)) {
                    dict_waits += 1;
                    if dict_waits >= DICT_WAIT_TRIES {
                        return Some(Err(err));
                    }
                } else if !err.is_transient() {
                    failures += 1;
                    if failures >= WRITE_FAILURES_MAX {
                        return Some(Err(err));
                    }
                }
                tracing::warn!(error = %err, "ingress cannot write to mysql; retrying");
                tokio::select! {
                    _ = cancel.cancelled() => return None,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// A request the database keeps refusing: logged, answered `internal`;
/// one naming a row that does not decode, answered `unreadable_row`.
fn internal(err: &StoreError) -> RequestOutcome {
    let unreadable = match err {
        StoreError::Corrupt(why) => Some(why.clone()),
        StoreError::KeyMissing { .. } => Some(err.to_string()),
        StoreError::DictionaryUnknown(dict) => {
            Some(format!("payload dictionary {dict} is not in payload_dicts"))
        }
        _ => None,
    };
    if let Some(why) = unreadable {
        metrics::store_failed("ingress request", err);
        tracing::warn!(error = %err, "an ingress request names a row that does not decode; answered unreadable_row");
        return RequestOutcome::Refused(RequestError::Unreadable(why));
    }
    metrics::store_failed("ingress request", err);
    tracing::error!(error = %err, "cannot write an ingress request; skipping it");
    RequestOutcome::Refused(RequestError::Internal)
}

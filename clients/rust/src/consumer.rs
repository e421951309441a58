//! A consumer kit (feature `consumer`): the glue between tickler's records
//! and a business handler, written once.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use rdkafka::ClientConfig;
//! use tickler_client::consumer::{Kit, Outcome, Reporter};
//!
//! let mut kafka = ClientConfig::new();
//! kafka.set("bootstrap.servers", "127.0.0.1:9092").set("group.id", "billing");
//! let reporter = Reporter::topic("127.0.0.1:9092", "tickler.results")?;
//! let kit = Kit::new(&kafka, &["billing.charge"], reporter)?;
//! kit.run(
//!     |job| async move {
//!         match charge(&job.payload).await {
//!             Ok(()) => Outcome::Ok,
//!             Err(e) => Outcome::retry_after(e, Duration::from_secs(30)),
//!         }
//!     },
//!     std::future::pending(),
//! )
//! .await?;
//! # Ok(()) }
//! # async fn charge(_: &[u8]) -> Result<(), String> { Ok(()) }
//! ```
//!
//! For each record: its headers are parsed into a [`JobRecord`]; a
//! (job id, attempt) handled before is not handed to the handler again
//! (its first outcome is reported again, which tickler ignores as
//! `finished` or applies if the first report was lost); the handler's
//! [`Outcome`] is remembered, then reported for the record's own attempt
//! (on the results topic, acknowledged by every in-sync replica, or over
//! HTTP); and only then is the record's offset stored for the next commit.
//! A crash anywhere before the commit hands the record over again, and the
//! steps above make that harmless with a store that outlives the process
//! ([`SeenStore`]; the default [`MemorySeen`] forgets on restart).
//!
//! Records are handled one at a time, in order, per consumer: run more
//! consumers in the group for more throughput.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use reqwest::Method;
use serde_json::{json, Value};

use crate::{Client, Error as ApiError};

/// One delivery of a job: a record tickler produced, its headers parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRecord {
    /// `tickler-job-id`.
    pub id: u64,
    /// `tickler-attempt`, from 1: the attempt to report.
    pub attempt: u32,
    /// `tickler-scheduled-at`, ms since the epoch: the time asked for.
    pub scheduled_at_ms: i64,
    /// `tickler-dispatched-at`, ms since the epoch: when tickler sent it.
    pub dispatched_at_ms: i64,
    /// `tickler-correlation-id`, when the job carried one.
    pub correlation_id: Option<String>,
    /// `tickler-schedule-id`, on an occurrence of a recurring schedule.
    pub schedule_id: Option<u64>,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    /// The job's own headers (tickler's `tickler-…` ones are the fields
    /// above), in the record's order.
    pub headers: Vec<(String, Vec<u8>)>,
}

/// Why a record could not be read as one of tickler's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("header {header}: {problem}")]
pub struct RecordError {
    pub header: &'static str,
    pub problem: String,
}

impl JobRecord {
    /// The record as a job's delivery: `Ok(None)` for a record that is not
    /// tickler's (no `tickler-job-id`), an error for one whose tickler
    /// headers do not parse.
    pub fn parse(message: &impl Message) -> Result<Option<JobRecord>, RecordError> {
        let mut headers = Vec::new();
        if let Some(all) = message.headers() {
            for header in all.iter() {
                headers.push((
                    header.key.to_owned(),
                    header.value.unwrap_or_default().to_vec(),
                ));
            }
        }
        JobRecord::from_parts(
            message.topic(),
            message.partition(),
            message.offset(),
            message.key(),
            message.payload().unwrap_or_default(),
            headers,
        )
    }

    /// [`JobRecord::parse`] from a record's parts.
    pub fn from_parts(
        topic: &str,
        partition: i32,
        offset: i64,
        key: Option<&[u8]>,
        payload: &[u8],
        headers: Vec<(String, Vec<u8>)>,
    ) -> Result<Option<JobRecord>, RecordError> {
        let find = |name: &'static str| -> Result<Option<&str>, RecordError> {
            match headers.iter().find(|(key, _)| key == name) {
                None => Ok(None),
                Some((_, value)) => std::str::from_utf8(value)
                    .map(|text| Some(text.trim()))
                    .map_err(|_| RecordError {
                        header: name,
                        problem: "not UTF-8".to_owned(),
                    }),
            }
        };
        fn number<T: std::str::FromStr>(
            name: &'static str,
            text: Option<&str>,
        ) -> Result<Option<T>, RecordError> {
            text.map(|t| {
                t.parse::<T>().map_err(|_| RecordError {
                    header: name,
                    problem: format!("{t:?} is not a number"),
                })
            })
            .transpose()
        }
        let Some(id) = number::<u64>("tickler-job-id", find("tickler-job-id")?)? else {
            return Ok(None);
        };
        let required = |name: &'static str| RecordError {
            header: name,
            problem: "missing".to_owned(),
        };
        let attempt = number::<u32>("tickler-attempt", find("tickler-attempt")?)?
            .filter(|a| *a >= 1)
            .ok_or_else(|| required("tickler-attempt"))?;
        let scheduled_at_ms = number::<i64>("tickler-scheduled-at", find("tickler-scheduled-at")?)?
            .ok_or_else(|| required("tickler-scheduled-at"))?;
        let dispatched_at_ms =
            number::<i64>("tickler-dispatched-at", find("tickler-dispatched-at")?)?
                .ok_or_else(|| required("tickler-dispatched-at"))?;
        let correlation_id = find("tickler-correlation-id")?.map(str::to_owned);
        let schedule_id = number::<u64>("tickler-schedule-id", find("tickler-schedule-id")?)?;
        let own = headers
            .into_iter()
            .filter(|(name, _)| !TICKLER_HEADERS.contains(&name.as_str()))
            .collect();
        Ok(Some(JobRecord {
            id,
            attempt,
            scheduled_at_ms,
            dispatched_at_ms,
            correlation_id,
            schedule_id,
            topic: topic.to_owned(),
            partition,
            offset,
            key: key.map(<[u8]>::to_vec),
            payload: payload.to_vec(),
            headers: own,
        }))
    }

    /// The payload as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.payload)
    }

    /// One of the job's own headers, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }
}

/// The headers tickler adds; the rest are the job's own.
const TICKLER_HEADERS: [&str; 6] = [
    "tickler-job-id",
    "tickler-attempt",
    "tickler-scheduled-at",
    "tickler-dispatched-at",
    "tickler-correlation-id",
    "tickler-schedule-id",
];

/// What became of a delivery: the report the kit sends for its attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the job is `succeeded`.
    Ok,
    /// Again later: after `after`, or the job's backoff when `None`; `dead`
    /// when it has no attempt left.
    Retry {
        error: String,
        after: Option<Duration>,
    },
    /// Give up: the job is `dead` at once.
    Failed { error: String },
}

impl Outcome {
    /// Again after the job's backoff.
    pub fn retry(error: impl ToString) -> Outcome {
        Outcome::Retry {
            error: error.to_string(),
            after: None,
        }
    }

    /// Again after `after` (at most 30 days).
    pub fn retry_after(error: impl ToString, after: Duration) -> Outcome {
        Outcome::Retry {
            error: error.to_string(),
            after: Some(after),
        }
    }

    /// Dead at once, with `error` as its `last_error`.
    pub fn failed(error: impl ToString) -> Outcome {
        Outcome::Failed {
            error: error.to_string(),
        }
    }

    /// The report of `attempt` of job `id` (docs/results.md).
    pub fn report(&self, id: u64, attempt: u32) -> Value {
        match self {
            Outcome::Ok => json!({"job_id": id, "attempt": attempt, "outcome": "ok"}),
            Outcome::Retry { error, after } => {
                let mut report =
                    json!({"job_id": id, "attempt": attempt, "outcome": "retry", "error": error});
                if let Some(after) = after {
                    report["retry_after_ms"] =
                        json!(u64::try_from(after.as_millis()).unwrap_or(u64::MAX));
                }
                report
            }
            Outcome::Failed { error } => {
                json!({"job_id": id, "attempt": attempt, "outcome": "failed", "error": error})
            }
        }
    }

    /// A report read back (from a [`SeenStore`] that keeps them as text):
    /// `None` when it is not one.
    pub fn from_report(report: &Value) -> Option<Outcome> {
        let error = report["error"].as_str().unwrap_or_default().to_owned();
        match report["outcome"].as_str()? {
            "ok" => Some(Outcome::Ok),
            "retry" => Some(Outcome::Retry {
                error,
                after: report["retry_after_ms"].as_u64().map(Duration::from_millis),
            }),
            "failed" => Some(Outcome::Failed { error }),
            _ => None,
        }
    }
}

/// A store's failure (the kit waits and asks again: it never hands a
/// record to the handler without knowing whether it was handled).
pub type StoreError = Box<dyn std::error::Error + Send + Sync>;

/// Where the kit remembers which (job id, attempt) it handled, and how.
///
/// The default, [`MemorySeen`], forgets on restart: a record delivered
/// again after a crash is then handled again. A store that outlives the
/// process closes that gap — in Redis, `SET tickler:seen:{id}:{attempt}
/// <report> EX 604800` and `GET`; in SQL, a table keyed by
/// `(job_id, attempt)` holding the report, written with an
/// insert-or-ignore. Keep each entry at least as long as tickler may
/// deliver the attempt again (a claim lease; a week is plenty).
pub trait SeenStore: Send + Sync {
    /// The outcome recorded for this attempt, if it was handled.
    fn outcome(
        &self,
        id: u64,
        attempt: u32,
    ) -> impl Future<Output = Result<Option<Outcome>, StoreError>> + Send;

    /// Records the outcome of this attempt, before it is reported.
    fn remember(
        &self,
        id: u64,
        attempt: u32,
        outcome: &Outcome,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// The default store: the last `capacity` attempts handled, in memory,
/// the least recently used forgotten first.
#[derive(Debug)]
pub struct MemorySeen {
    capacity: usize,
    inner: Mutex<Lru>,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<(u64, u32), (Outcome, u64)>,
    /// Use order, oldest first; an entry used again leaves its old place
    /// behind, skipped at eviction by its stamp.
    order: VecDeque<((u64, u32), u64)>,
    stamp: u64,
}

impl MemorySeen {
    /// Remembers the last `capacity` attempts (at least one).
    pub fn new(capacity: usize) -> MemorySeen {
        MemorySeen {
            capacity: capacity.max(1),
            inner: Mutex::new(Lru::default()),
        }
    }

    /// How many attempts it holds.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, key: (u64, u32)) -> Option<Outcome> {
        let mut lru = self.lock();
        lru.stamp += 1;
        let stamp = lru.stamp;
        let outcome = {
            let (outcome, used) = lru.entries.get_mut(&key)?;
            *used = stamp;
            outcome.clone()
        };
        lru.order.push_back((key, stamp));
        lru.compact();
        Some(outcome)
    }

    fn put(&self, key: (u64, u32), outcome: Outcome) {
        let mut lru = self.lock();
        lru.stamp += 1;
        let stamp = lru.stamp;
        lru.entries.insert(key, (outcome, stamp));
        lru.order.push_back((key, stamp));
        while lru.entries.len() > self.capacity {
            let Some((old, at)) = lru.order.pop_front() else {
                break;
            };
            if lru.entries.get(&old).is_some_and(|(_, used)| *used == at) {
                lru.entries.remove(&old);
            }
        }
        lru.compact();
    }
}

impl Lru {
    /// Drops the places entries left behind once they outnumber the
    /// entries, so the order stays within twice the capacity.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 16 {
            let entries = &self.entries;
            self.order
                .retain(|(key, at)| entries.get(key).is_some_and(|(_, used)| used == at));
        }
    }
}

impl Default for MemorySeen {
    /// 100,000 attempts.
    fn default() -> MemorySeen {
        MemorySeen::new(100_000)
    }
}

impl SeenStore for MemorySeen {
    async fn outcome(&self, id: u64, attempt: u32) -> Result<Option<Outcome>, StoreError> {
        Ok(self.get((id, attempt)))
    }

    async fn remember(&self, id: u64, attempt: u32, outcome: &Outcome) -> Result<(), StoreError> {
        self.put((id, attempt), outcome.clone());
        Ok(())
    }
}

/// Where reports go.
pub enum Reporter {
    /// The results topic (`results.topic`, default `tickler.results`),
    /// each report keyed by its job id; durable once every in-sync replica
    /// has it.
    Topic {
        producer: FutureProducer,
        topic: String,
    },
    /// `POST /v1/jobs/{id}/result`, with a token holding `results`.
    Api(Client),
    /// No reports: for jobs that expect none (deduplication only).
    None,
}

impl Reporter {
    /// A reporter on `topic` through an idempotent producer to `brokers`.
    pub fn topic(brokers: &str, topic: &str) -> Result<Reporter, KafkaError> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", brokers);
        Reporter::topic_with(&config, topic)
    }

    /// A reporter on `topic` through a producer made from `config` (TLS,
    /// SASL…), made idempotent and acknowledged by all in-sync replicas.
    pub fn topic_with(config: &ClientConfig, topic: &str) -> Result<Reporter, KafkaError> {
        let producer = config
            .clone()
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .create()?;
        Ok(Reporter::Topic {
            producer,
            topic: topic.to_owned(),
        })
    }

    /// Sends `report` once; `Err` when it may not have arrived or may be
    /// accepted later (a token refused, tickler in trouble: worth sending
    /// again), `Ok(Some(why))` when tickler refused it for good (an unknown
    /// job: nothing to report to).
    async fn send(&self, id: u64, report: &Value) -> Result<Option<String>, String> {
        match self {
            Reporter::Topic { producer, topic } => {
                let key = id.to_string();
                let payload = report.to_string();
                producer
                    .send(
                        FutureRecord::to(topic).key(&key).payload(&payload),
                        Duration::from_secs(30),
                    )
                    .await
                    .map(|_| None)
                    .map_err(|(err, _)| format!("producing to {topic}: {err}"))
            }
            Reporter::Api(client) => {
                let path = format!("/v1/jobs/{id}/result");
                match client.request(Method::POST, &path, Some(report)).await {
                    Ok(_) => Ok(None),
                    // Only a job tickler does not know (404) or a report it
                    // cannot read (400) is refused for good; a token refused
                    // (401, 403) or a server in trouble is worth waiting
                    // for, never a report dropped and its record committed.
                    Err(err @ ApiError::Api { status, .. })
                        if status.as_u16() == 404 || status.as_u16() == 400 =>
                    {
                        Ok(Some(err.to_string()))
                    }
                    Err(err) => Err(format!("POST {path}: {err}")),
                }
            }
            Reporter::None => Ok(None),
        }
    }
}

/// What the kit did with a record, for logs and metrics ([`Kit::on_event`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handler ran and its outcome was reported.
    Handled {
        id: u64,
        attempt: u32,
        outcome: Outcome,
    },
    /// An attempt handled before, delivered again: not handed to the
    /// handler; its first outcome reported again.
    Duplicate { id: u64, attempt: u32 },
    /// A record that is not tickler's, or whose tickler headers do not
    /// parse: skipped (committed) without the handler.
    Skipped {
        topic: String,
        partition: i32,
        offset: i64,
        why: String,
    },
    /// tickler refused a report for good (an unknown job, say).
    Refused { id: u64, attempt: u32, why: String },
    /// A report or the store failed; tried again after `wait`.
    Trouble { what: String, wait: Duration },
}

/// Why [`Kit::run`] stopped.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
}

type Listener = Box<dyn Fn(&Event) + Send + Sync>;

/// A consumer of tickler's records around a handler: see the module.
pub struct Kit<S: SeenStore = MemorySeen> {
    consumer: StreamConsumer,
    reporter: Reporter,
    seen: S,
    listener: Option<Listener>,
}

impl Kit<MemorySeen> {
    /// A kit consuming `topics` with a consumer made from `config` (which
    /// names `bootstrap.servers` and `group.id`). The kit stores each
    /// offset itself once its record is reported (`enable.auto.offset.store
    /// = false`), so the periodic commit never passes an unreported record.
    pub fn new(
        config: &ClientConfig,
        topics: &[&str],
        reporter: Reporter,
    ) -> Result<Kit<MemorySeen>, KafkaError> {
        let consumer: StreamConsumer = config
            .clone()
            .set("enable.auto.offset.store", "false")
            .set("enable.auto.commit", "true")
            .create()?;
        consumer.subscribe(topics)?;
        Ok(Kit {
            consumer,
            reporter,
            seen: MemorySeen::default(),
            listener: None,
        })
    }
}

impl<S: SeenStore> Kit<S> {
    /// Another store for the attempts handled (one that outlives the
    /// process: see [`SeenStore`]).
    pub fn seen_store<T: SeenStore>(self, seen: T) -> Kit<T> {
        Kit {
            consumer: self.consumer,
            reporter: self.reporter,
            seen,
            listener: self.listener,
        }
    }

    /// Calls `listener` with what happens to each record.
    pub fn on_event(mut self, listener: impl Fn(&Event) + Send + Sync + 'static) -> Kit<S> {
        self.listener = Some(Box::new(listener));
        self
    }

    /// The store of attempts handled.
    pub fn seen(&self) -> &S {
        &self.seen
    }

    /// Hands each record to `handler` until `shutdown` completes, then
    /// commits what was reported. A record is finished (reported and its
    /// offset stored) before the next is read. A shutdown while the record
    /// in hand waits for its store or its report (a broker or tickler
    /// away) leaves it unreported and uncommitted: it is handed over again,
    /// and found in a store that outlives the process.
    pub async fn run<H, F>(
        &self,
        handler: H,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), KitError>
    where
        H: Fn(JobRecord) -> F,
        F: Future<Output = Outcome>,
    {
        tokio::pin!(shutdown);
        let stopping = AtomicBool::new(false);
        while !stopping.load(Ordering::Relaxed) {
            let message = tokio::select! {
                _ = &mut shutdown => break,
                message = self.consumer.recv() => message,
            };
            let message = match message {
                Ok(message) => message,
                // A broker away: the client reconnects by itself.
                Err(err) => {
                    self.emit(Event::Trouble {
                        what: format!("consuming: {err}"),
                        wait: Duration::from_millis(200),
                    });
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let work = self.process(&message, &handler, &stopping);
            tokio::pin!(work);
            let finished = tokio::select! {
                finished = &mut work => finished,
                _ = &mut shutdown => {
                    // The handler is never cut short; only waiting is.
                    stopping.store(true, Ordering::Relaxed);
                    work.await
                }
            };
            if !finished {
                break;
            }
            // A partition a rebalance took away refuses the offset: the
            // record goes to its new owner, which finds it in a shared
            // store (or handles it again with the default one).
            if let Err(err) = self.consumer.store_offset_from_message(&message) {
                self.emit(Event::Trouble {
                    what: format!("storing the offset: {err}"),
                    wait: Duration::ZERO,
                });
            }
        }
        match self.consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing stored since the last commit.
            Err(KafkaError::ConsumerCommit(rdkafka::types::RDKafkaErrorCode::NoOffset)) => Ok(()),
            other => Ok(other?),
        }
    }

    /// One record, to its end: handled (or recognised), remembered,
    /// reported. False when a shutdown stopped it waiting.
    async fn process<H, F>(
        &self,
        message: &BorrowedMessage<'_>,
        handler: &H,
        stopping: &AtomicBool,
    ) -> bool
    where
        H: Fn(JobRecord) -> F,
        F: Future<Output = Outcome>,
    {
        let job = match JobRecord::parse(message) {
            Ok(Some(job)) => job,
            Ok(None) => {
                self.skipped(message, "not a record of tickler's (no tickler-job-id)");
                return true;
            }
            Err(err) => {
                self.skipped(message, &err.to_string());
                return true;
            }
        };
        let (id, attempt) = (job.id, job.attempt);
        let read = self.patiently("reading the store", stopping, || {
            self.seen.outcome(id, attempt)
        });
        let Some(earlier) = read.await else {
            return false;
        };
        let duplicate = earlier.is_some();
        let outcome = match earlier {
            Some(outcome) => {
                self.emit(Event::Duplicate { id, attempt });
                outcome
            }
            None => {
                let outcome = handler(job).await;
                // Remembered before it is reported: a crash between the
                // two reports it again instead of handling it again.
                let written = self.patiently("writing the store", stopping, || {
                    self.seen.remember(id, attempt, &outcome)
                });
                if written.await.is_none() {
                    return false;
                }
                outcome
            }
        };
        let report = outcome.report(id, attempt);
        let sent = self.patiently("reporting", stopping, || async {
            self.reporter
                .send(id, &report)
                .await
                .map_err(StoreError::from)
        });
        match sent.await {
            None => return false,
            Some(Some(why)) => self.emit(Event::Refused { id, attempt, why }),
            Some(None) if !duplicate => self.emit(Event::Handled {
                id,
                attempt,
                outcome,
            }),
            Some(None) => {}
        }
        true
    }

    /// `step` until it succeeds, waiting longer each time (up to 5 s);
    /// `None` once `stopping` is set.
    async fn patiently<T, F, Fut>(&self, what: &str, stopping: &AtomicBool, step: F) -> Option<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut wait = Duration::from_millis(100);
        loop {
            match step().await {
                Ok(value) => return Some(value),
                Err(err) => {
                    self.emit(Event::Trouble {
                        what: format!("{what}: {err}"),
                        wait,
                    });
                    // Checked every 100 ms, so a shutdown is not kept
                    // waiting for the longest pause.
                    let until = tokio::time::Instant::now() + wait;
                    while tokio::time::Instant::now() < until {
                        if stopping.load(Ordering::Relaxed) {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    fn skipped(&self, message: &BorrowedMessage<'_>, why: &str) {
        self.emit(Event::Skipped {
            topic: message.topic().to_owned(),
            partition: message.partition(),
            offset: message.offset(),
            why: why.to_owned(),
        });
    }

    fn emit(&self, event: Event) {
        if let Some(listener) = &self.listener {
            listener(&event);
        }
    }
}

/// The headers of a record as tickler writes them, for tests that deliver
/// a job's record themselves (a duplicate, say).
pub fn headers_of(job: &JobRecord) -> OwnedHeaders {
    let mut headers = OwnedHeaders::new();
    for (name, value) in &job.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value),
        });
    }
    let numbers = [
        ("tickler-job-id", job.id.to_string()),
        ("tickler-attempt", job.attempt.to_string()),
        ("tickler-scheduled-at", job.scheduled_at_ms.to_string()),
        ("tickler-dispatched-at", job.dispatched_at_ms.to_string()),
    ];
    for (name, value) in &numbers {
        headers = headers.insert(Header {
            key: name,
            value: Some(value),
        });
    }
    if let Some(correlation) = &job.correlation_id {
        headers = headers.insert(Header {
            key: "tickler-correlation-id",
            value: Some(correlation),
        });
    }
    if let Some(schedule) = job.schedule_id {
        headers = headers.insert(Header {
            key: "tickler-schedule-id",
            value: Some(&schedule.to_string()),
        });
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn a_record_of_ticklers_parses_into_its_job() {
        let job = JobRecord::from_parts(
            "billing",
            1,
            42,
            Some(b"invoice-7"),
            b"{\"n\":7}",
            headers(&[
                ("h", "v"),
                ("tickler-job-id", "17"),
                ("tickler-attempt", "2"),
                ("tickler-scheduled-at", "1700000000000"),
                ("tickler-dispatched-at", "1700000000004"),
                ("tickler-correlation-id", "c-1"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((job.id, job.attempt), (17, 2));
        assert_eq!(job.scheduled_at_ms, 1_700_000_000_000);
        assert_eq!(job.dispatched_at_ms, 1_700_000_000_004);
        assert_eq!(job.correlation_id.as_deref(), Some("c-1"));
        assert_eq!(job.schedule_id, None);
        assert_eq!(job.headers, headers(&[("h", "v")]));
        assert_eq!(job.header("h"), Some("v"));
        assert_eq!(job.json::<Value>().unwrap(), json!({"n": 7}));
    }

    #[test]
    fn a_record_without_a_job_id_is_not_ticklers_and_bad_headers_are_errors() {
        let none = JobRecord::from_parts("t", 0, 0, None, b"", headers(&[("h", "v")]));
        assert_eq!(none, Ok(None));
        let bad = JobRecord::from_parts(
            "t",
            0,
            0,
            None,
            b"",
            headers(&[("tickler-job-id", "17"), ("tickler-attempt", "two")]),
        );
        assert_eq!(bad.unwrap_err().header, "tickler-attempt");
        let zero = JobRecord::from_parts(
            "t",
            0,
            0,
            None,
            b"",
            headers(&[
                ("tickler-job-id", "17"),
                ("tickler-attempt", "0"),
                ("tickler-scheduled-at", "1"),
                ("tickler-dispatched-at", "1"),
            ]),
        );
        assert_eq!(zero.unwrap_err().header, "tickler-attempt");
        let missing = JobRecord::from_parts(
            "t",
            0,
            0,
            None,
            b"",
            headers(&[("tickler-job-id", "17"), ("tickler-attempt", "1")]),
        );
        assert_eq!(missing.unwrap_err().header, "tickler-scheduled-at");
    }

    #[test]
    fn outcomes_are_reports_and_read_back() {
        let cases = [
            (
                Outcome::Ok,
                json!({"job_id": 5, "attempt": 3, "outcome": "ok"}),
            ),
            (
                Outcome::retry_after("busy", Duration::from_millis(1500)),
                json!({"job_id": 5, "attempt": 3, "outcome": "retry", "error": "busy", "retry_after_ms": 1500}),
            ),
            (
                Outcome::retry("busy"),
                json!({"job_id": 5, "attempt": 3, "outcome": "retry", "error": "busy"}),
            ),
            (
                Outcome::failed("bad card"),
                json!({"job_id": 5, "attempt": 3, "outcome": "failed", "error": "bad card"}),
            ),
        ];
        for (outcome, report) in cases {
            assert_eq!(outcome.report(5, 3), report);
            assert_eq!(Outcome::from_report(&report), Some(outcome));
        }
        assert_eq!(Outcome::from_report(&json!({"outcome": "maybe"})), None);
    }

    #[test]
    fn the_memory_store_forgets_the_least_recently_used_first() {
        let seen = MemorySeen::new(2);
        seen.put((1, 1), Outcome::Ok);
        seen.put((2, 1), Outcome::Ok);
        assert_eq!(seen.get((1, 1)), Some(Outcome::Ok));
        seen.put((3, 1), Outcome::failed("x"));
        assert_eq!(seen.get((2, 1)), None, "the least recently used goes");
        assert_eq!(seen.get((1, 1)), Some(Outcome::Ok));
        assert_eq!(seen.get((3, 1)), Some(Outcome::failed("x")));
        for _ in 0..1000 {
            seen.get((1, 1));
        }
        assert!(
            seen.lock().order.len() <= 2 * 2 + 16,
            "the order stays bounded"
        );
        assert_eq!(seen.len(), 2);
    }
}

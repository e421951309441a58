//! A typed client for [tickler](https://github.com/tickler/tickler)'s HTTP
//! API: schedule, read, move, retarget and cancel jobs (one or a batch, at
//! an instant or a local time in a zone, debounced), recurring schedules
//! (run now, backfilled), consumers' results, redrives and releases.
//!
//! ```no_run
//! # async fn run() -> Result<(), tickler_client::Error> {
//! use tickler_client::{Client, NewJob};
//! let client = Client::new("http://127.0.0.1:8080", Some("tkl_…"))?;
//! let job = client
//!     .job_create(&NewJob::new("billing.charge", serde_json::json!({"invoice": 7}))
//!         .key("invoice-7")
//!         .delay_ms(30 * 86_400_000))
//!     .await?;
//! client.job_cancel(job.id).await?;
//! # Ok(()) }
//! ```
//!
//! Every refusal is an [`Error::Api`] with the API's stable [`ErrorCode`];
//! a 429 or 503 (nothing was written) is tried again after its
//! `Retry-After`, up to [`ClientBuilder::retries`] times.

#[cfg(feature = "consumer")]
pub mod consumer;

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The API's stable error codes (docs/api.md, "Errors"); a code this
/// version does not know is [`ErrorCode::Other`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidJson,
    InvalidRequest,
    InvalidTopic,
    InvalidKey,
    InvalidPayload,
    InvalidHeaders,
    InvalidRunAt,
    /// `run_local` is not a local date and time (`2027-03-28T09:00:00`).
    InvalidRunLocal,
    /// `time_zone` is not an IANA zone tickler's tzdata knows.
    InvalidTimeZone,
    InvalidExpiry,
    InvalidPolicy,
    InvalidSchedule,
    /// A backfill's (or audit's) `from`/`to`: not RFC 3339, out of order,
    /// `to` in the future, or too many occurrences between them.
    InvalidInterval,
    InvalidReport,
    InvalidId,
    ScheduleTooFar,
    UnknownTopic,
    ReservedTopic,
    PayloadTooLarge,
    /// The payload does not match its topic's payload schema (400 on a
    /// create or change; 409 on a release without `force`).
    PayloadSchema,
    /// A topic's `payload_schema` that does not compile.
    InvalidSchema,
    UnsupportedMediaType,
    NotFound,
    /// No such route: e.g. `/v1/dev/clock` of `tickler serve`.
    NoRoute,
    MethodNotAllowed,
    UriTooLong,
    HeadersTooLarge,
    VersionConflict,
    KeyConflict,
    NotPending,
    NotDead,
    /// A release of a job that is not held.
    NotHeld,
    InFlight,
    TooLate,
    Unauthorized,
    ForbiddenScope,
    ForbiddenTopic,
    CrossOrigin,
    RateLimited,
    /// The token's quota of pending jobs or payload bytes (never retried).
    QuotaExceeded,
    BodyTimeout,
    /// `tickler dev`'s clock cannot move beside a live `tickler serve`.
    ClockNeighbour,
    /// A payload schema while a live instance is of a build before holds.
    OlderInstances,
    Unavailable,
    /// The job's stored row does not decode (that job only).
    UnreadableRow,
    Internal,
    Other(String),
}

impl ErrorCode {
    pub fn parse(code: &str) -> ErrorCode {
        use ErrorCode::*;
        match code {
            "invalid_json" => InvalidJson,
            "invalid_request" => InvalidRequest,
            "invalid_topic" => InvalidTopic,
            "invalid_key" => InvalidKey,
            "invalid_payload" => InvalidPayload,
            "invalid_headers" => InvalidHeaders,
            "invalid_run_at" => InvalidRunAt,
            "invalid_run_local" => InvalidRunLocal,
            "invalid_time_zone" => InvalidTimeZone,
            "invalid_expiry" => InvalidExpiry,
            "invalid_policy" => InvalidPolicy,
            "invalid_schedule" => InvalidSchedule,
            "invalid_interval" => InvalidInterval,
            "invalid_report" => InvalidReport,
            "invalid_id" => InvalidId,
            "schedule_too_far" => ScheduleTooFar,
            "unknown_topic" => UnknownTopic,
            "reserved_topic" => ReservedTopic,
            "payload_too_large" => PayloadTooLarge,
            "payload_schema" => PayloadSchema,
            "invalid_schema" => InvalidSchema,
            "unsupported_media_type" => UnsupportedMediaType,
            "not_found" => NotFound,
            "no_route" => NoRoute,
            "method_not_allowed" => MethodNotAllowed,
            "uri_too_long" => UriTooLong,
            "headers_too_large" => HeadersTooLarge,
            "version_conflict" => VersionConflict,
            "key_conflict" => KeyConflict,
            "not_pending" => NotPending,
            "not_dead" => NotDead,
            "not_held" => NotHeld,
            "in_flight" => InFlight,
            "too_late" => TooLate,
            "unauthorized" => Unauthorized,
            "forbidden_scope" => ForbiddenScope,
            "forbidden_topic" => ForbiddenTopic,
            "cross_origin" => CrossOrigin,
            "rate_limited" => RateLimited,
            "quota_exceeded" => QuotaExceeded,
            "body_timeout" => BodyTimeout,
            "clock_neighbour" => ClockNeighbour,
            "older_instances" => OlderInstances,
            "unavailable" => Unavailable,
            "unreadable_row" => UnreadableRow,
            "internal" => Internal,
            other => Other(other.to_owned()),
        }
    }
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API answered with an error: its status, stable code and message
    /// (and the whole answer, for the fields some errors add).
    #[error("{status} {code_text}: {message}")]
    Api {
        status: StatusCode,
        code: ErrorCode,
        code_text: String,
        message: String,
        body: Value,
    },
    /// tickler could not be reached or its answer read.
    #[error("{0}")]
    Unavailable(String),
    /// The client's own settings are wrong (an address, a token, a
    /// certificate).
    #[error("{0}")]
    Usage(String),
}

impl Error {
    /// The API's code, for a refusal.
    pub fn code(&self) -> Option<&ErrorCode> {
        match self {
            Error::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A job as the API shows it. Fields this version does not name are kept
/// in `extra`.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Job {
    pub id: u64,
    pub topic: String,
    pub key: Option<String>,
    /// `pending`, `dispatching`, `dispatched`, `succeeded`, `dead`,
    /// `cancelled` or `expired`.
    pub status: String,
    /// RFC 3339, ms, UTC: the time asked for.
    pub run_at: String,
    /// With a flexible window: the instant decided in it.
    #[serde(default)]
    pub produce_at: Option<String>,
    pub attempt: u32,
    pub version: u32,
    #[serde(default)]
    pub payload: Option<Value>,
    #[serde(default)]
    pub payload_base64: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub window_ms: Option<u32>,
    #[serde(default)]
    pub schedule_id: Option<u64>,
    /// Given a wall-clock time: the local time (`2027-03-28T09:00:00.000`)
    /// its `run_at` was computed from, in `time_zone`, with tzdata release
    /// `tzdata_version`. A newer tzdata moves `run_at` where it changes.
    #[serde(default)]
    pub run_local: Option<String>,
    #[serde(default)]
    pub time_zone: Option<String>,
    #[serde(default)]
    pub tzdata_version: Option<String>,
    /// Debounced with a ceiling: the latest a debounce may move it to.
    #[serde(default)]
    pub debounce_until: Option<String>,
    /// Its key's generation, from 1 for a job a debounce created after the
    /// one before went out (absent for the first), and that job's id.
    #[serde(default)]
    pub generation: Option<u32>,
    #[serde(default)]
    pub previous_id: Option<u64>,
    /// In a debounce's answer: `Some(true)` when the pending job was moved
    /// (`None` when it was created).
    #[serde(default)]
    pub debounced: Option<bool>,
    /// In a debounce's answer: the time asked for was past the ceiling, so
    /// the job was moved to `debounce_until` instead.
    #[serde(default)]
    pub capped: Option<bool>,
    /// Held back, still pending, because its payload no longer matched its
    /// topic's payload schema when it came due: since when, and where the
    /// payload failed. [`Client::job_release`] lets it go.
    #[serde(default)]
    pub held_at: Option<String>,
    #[serde(default)]
    pub held_reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A job to create: a topic, a payload and a time (`run_at` or
/// `delay_ms`), and whatever else the API takes (`set`).
#[derive(Debug, Clone, Serialize)]
pub struct NewJob(Map<String, Value>);

impl NewJob {
    /// A job on `topic` with a JSON `payload`, due now unless a time is set.
    pub fn new(topic: &str, payload: Value) -> NewJob {
        let mut fields = Map::new();
        fields.insert("topic".into(), topic.into());
        fields.insert("payload".into(), payload);
        NewJob(fields)
    }

    /// Its key: the idempotency key (one job per topic and key).
    pub fn key(self, key: &str) -> NewJob {
        self.set("key", key.into())
    }

    /// Due this long from now.
    pub fn delay_ms(self, ms: u64) -> NewJob {
        self.set("delay_ms", ms.into())
    }

    /// Due at this RFC 3339 time.
    pub fn run_at(self, at: &str) -> NewJob {
        self.set("run_at", at.into())
    }

    /// Due at a wall-clock time: a local date and time without offset
    /// (`2027-11-12T08:00:00`) in an IANA `time_zone`
    /// (`Australia/Melbourne`). tickler keeps both and moves the job if a
    /// newer tzdata changes the instant. The two go together.
    pub fn run_local(self, local: &str, time_zone: &str) -> NewJob {
        self.set("run_local", local.into())
            .set("time_zone", time_zone.into())
    }

    /// What a create does when a job holds its topic and key: `reject`
    /// (the default: the same request answers that job, another is
    /// [`ErrorCode::KeyConflict`]) or `debounce` (needs a key): a pending
    /// job is moved to this request's time and payload; one that went out
    /// is followed by a new job, its next generation.
    pub fn on_conflict(self, on_conflict: &str) -> NewJob {
        self.set("on_conflict", on_conflict.into())
    }

    /// With `debounce`: the longest a job may be moved past its
    /// generation's first request (left out: no ceiling).
    pub fn max_delay_ms(self, ms: u64) -> NewJob {
        self.set("max_delay_ms", ms.into())
    }

    /// Any other field of `POST /v1/jobs` (`headers`, `max_attempts`,
    /// `expects_result`, `window_ms`, `expires_at`, …).
    pub fn set(mut self, field: &str, value: Value) -> NewJob {
        self.0.insert(field.to_owned(), value);
        self
    }
}

/// A change of a job (`PATCH /v1/jobs/{id}`): the version read, and the
/// fields to change.
#[derive(Debug, Clone, Serialize)]
pub struct JobChange(Map<String, Value>);

impl JobChange {
    pub fn at_version(version: u32) -> JobChange {
        let mut fields = Map::new();
        fields.insert("version".into(), version.into());
        JobChange(fields)
    }

    /// Retarget: the job moves to another Kafka topic, keeping its id,
    /// key, payload and time ([`ErrorCode::KeyConflict`] when a job there
    /// holds its key).
    pub fn topic(self, topic: &str) -> JobChange {
        self.set("topic", topic.into())
    }

    /// A new wall-clock time (as [`NewJob::run_local`]); a new `run_at` or
    /// `delay_ms` ends the job's wall-clock time instead.
    pub fn run_local(self, local: &str, time_zone: &str) -> JobChange {
        self.set("run_local", local.into())
            .set("time_zone", time_zone.into())
    }

    /// Any field of `PATCH /v1/jobs/{id}` (`run_at`, `delay_ms`,
    /// `payload`, `headers`, `expires_at`, `window_ms`, …).
    pub fn set(mut self, field: &str, value: Value) -> JobChange {
        self.0.insert(field.to_owned(), value);
        self
    }
}

/// One more occurrence of a schedule (`POST /v1/schedules/{id}/trigger`):
/// now under a fresh key unless told otherwise.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Trigger(Map<String, Value>);

impl Trigger {
    /// Now, under a fresh `<schedule key>@trigger-<hex>`.
    pub fn now() -> Trigger {
        Trigger::default()
    }

    /// Its key, which makes the trigger idempotent: sent again, the same
    /// job is answered. Not of an occurrence's form (`…@<instant>`).
    pub fn key(mut self, key: &str) -> Trigger {
        self.0.insert("key".into(), key.into());
        self
    }

    /// Due at this RFC 3339 time instead of now.
    pub fn run_at(mut self, at: &str) -> Trigger {
        self.0.insert("run_at".into(), at.into());
        self
    }

    /// Due this long from now.
    pub fn delay_ms(mut self, ms: u64) -> Trigger {
        self.0.insert("delay_ms".into(), ms.into());
        self
    }
}

/// What a backfill created (with `dry_run`: would create) in [`from`,
/// `to`).
#[derive(Debug, Clone, Deserialize)]
pub struct Backfill {
    pub schedule_id: u64,
    pub from: String,
    pub to: String,
    /// Whether nothing was written (a preview).
    pub dry_run: bool,
    /// Occurrences the schedule's timing gives in the interval.
    pub expected: usize,
    /// Occurrences created (with `dry_run`: that would be).
    pub created: usize,
    /// Occurrences whose job exists already, in any status: left alone.
    pub existing: usize,
    /// The first 100 instants of `created`, in order.
    #[serde(default)]
    pub preview: Vec<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a batch create did with each item, in order.
#[derive(Debug, Clone, Deserialize)]
pub struct BatchItem {
    /// `created`, `existing`, `debounced` (a debounce moved the pending
    /// job) or `error`.
    pub result: String,
    #[serde(default)]
    pub id: Option<u64>,
    /// With `debounced`: the time the job was moved to.
    #[serde(default)]
    pub run_at: Option<String>,
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

#[derive(Debug, Clone, Deserialize)]
struct BatchAnswer {
    results: Vec<BatchItem>,
}

/// The answer of a cancel.
#[derive(Debug, Clone, Deserialize)]
pub struct Cancelled {
    /// `cancelled` (now or already).
    pub outcome: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `tickler dev`'s virtual clock.
#[derive(Debug, Clone, Deserialize)]
pub struct DevClock {
    /// tickler's now (RFC 3339, UTC): the database's clock plus `offset_ms`.
    pub now: String,
    /// How far the clock has been moved since `tickler dev` started.
    pub offset_ms: i64,
}

/// What falls due, bucket by bucket (`GET /v1/forecast`).
#[derive(Debug, Clone, Deserialize)]
pub struct Forecast {
    /// The range, RFC 3339: `from` included, `to` excluded.
    pub from: String,
    pub to: String,
    pub bucket_ms: u64,
    /// The database's clock when it was read.
    pub at: String,
    /// Every bucket of the range, in order, empty ones included.
    pub buckets: Vec<ForecastBucket>,
    /// The range's totals per topic, the busiest first.
    pub topics: Vec<ForecastTopic>,
    /// False when a cron schedule fires so often that its projection
    /// stopped after 100,000 occurrences.
    pub projected_complete: bool,
}

/// One bucket of a [`Forecast`].
#[derive(Debug, Clone, Deserialize)]
pub struct ForecastBucket {
    pub at: String,
    /// Pending jobs due in the bucket.
    pub jobs: u64,
    /// Occurrences schedules will create there, not yet jobs.
    pub projected: u64,
}

/// One topic's totals in a [`Forecast`].
#[derive(Debug, Clone, Deserialize)]
pub struct ForecastTopic {
    pub topic: String,
    pub jobs: u64,
    pub projected: u64,
    /// Its busiest bucket (jobs and projected), if any.
    #[serde(default)]
    pub peak_at: Option<String>,
    #[serde(default)]
    pub peak: u64,
}

/// Settings of a [`Client`].
pub struct ClientBuilder {
    url: String,
    token: Option<String>,
    ca_pem: Option<Vec<u8>>,
    retries: u32,
    timeout: Duration,
    user_agent: String,
}

impl ClientBuilder {
    /// The bearer token (`tickler token create`).
    pub fn token(mut self, token: &str) -> ClientBuilder {
        self.token = Some(token.to_owned()).filter(|t| !t.is_empty());
        self
    }

    /// A CA certificate (PEM) to trust besides the system's.
    pub fn ca_pem(mut self, pem: Vec<u8>) -> ClientBuilder {
        self.ca_pem = Some(pem);
        self
    }

    /// How many times a 429 or 503 is tried again after its Retry-After
    /// (3; 0 never).
    pub fn retries(mut self, retries: u32) -> ClientBuilder {
        self.retries = retries;
        self
    }

    /// Longest one call may take (60 s).
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    pub fn user_agent(mut self, agent: &str) -> ClientBuilder {
        self.user_agent = agent.to_owned();
        self
    }

    pub fn build(self) -> Result<Client, Error> {
        let base = self.url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Usage(format!(
                "the API address {:?} must start with http:// or https://",
                self.url
            )));
        }
        let mut headers = HeaderMap::new();
        if let Some(token) = &self.token {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Usage("the token is not a valid header value".to_owned()))?;
            headers.insert(AUTHORIZATION, value);
        }
        let mut builder = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(5))
            .timeout(self.timeout)
            .user_agent(self.user_agent);
        if let Some(pem) = &self.ca_pem {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|err| Error::Usage(format!("not a PEM certificate: {err}")))?;
            builder = builder.add_root_certificate(cert);
        }
        let http = builder
            .build()
            .map_err(|err| Error::Usage(format!("cannot make an HTTP client: {err}")))?;
        Ok(Client {
            base,
            http,
            retries: self.retries,
        })
    }
}

/// A client of one tickler API. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    retries: u32,
}

/// Longest a Retry-After is waited for; a longer one is returned as the
/// error.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(30);

impl Client {
    /// A client of the API at `url` with a bearer `token`, and the
    /// defaults of [`Client::builder`].
    pub fn new(url: &str, token: Option<&str>) -> Result<Client, Error> {
        let builder = Client::builder(url);
        match token {
            Some(token) => builder.token(token),
            None => builder,
        }
        .build()
    }

    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            url: url.to_owned(),
            token: None,
            ca_pem: None,
            retries: 3,
            timeout: Duration::from_secs(60),
            user_agent: concat!("tickler-client/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `POST /v1/jobs`: the job made, or the existing one of its topic
    /// and key when it asks for the same.
    pub async fn job_create(&self, job: &NewJob) -> Result<Job, Error> {
        self.json(Method::POST, "/v1/jobs", Some(&job.0)).await
    }

    /// `POST /v1/jobs/batch`: each item's result, in order.
    pub async fn jobs_create(&self, jobs: &[NewJob]) -> Result<Vec<BatchItem>, Error> {
        let body = serde_json::json!({"jobs": jobs.iter().map(|j| &j.0).collect::<Vec<_>>()});
        let answer: BatchAnswer = self
            .json(Method::POST, "/v1/jobs/batch", Some(&body))
            .await?;
        Ok(answer.results)
    }

    /// `GET /v1/jobs/{id}`.
    pub async fn job_get(&self, id: u64) -> Result<Job, Error> {
        self.json::<(), _>(Method::GET, &format!("/v1/jobs/{id}"), None)
            .await
    }

    /// `PATCH /v1/jobs/{id}`: a [`ErrorCode::VersionConflict`] when it
    /// changed since `version`.
    pub async fn job_modify(&self, id: u64, change: &JobChange) -> Result<Job, Error> {
        self.json(Method::PATCH, &format!("/v1/jobs/{id}"), Some(&change.0))
            .await
    }

    /// `DELETE /v1/jobs/{id}`: a [`ErrorCode::InFlight`] when it is being
    /// produced at this moment.
    pub async fn job_cancel(&self, id: u64) -> Result<Cancelled, Error> {
        self.json::<(), _>(Method::DELETE, &format!("/v1/jobs/{id}"), None)
            .await
    }

    /// `POST /v1/jobs/{id}/result`: a consumer's report of `attempt`
    /// (`succeeded` or `failed`, with an error).
    pub async fn result_report(
        &self,
        id: u64,
        attempt: u32,
        outcome: &str,
        error: Option<&str>,
    ) -> Result<Value, Error> {
        let body = serde_json::json!({"attempt": attempt, "outcome": outcome, "error": error});
        self.json(Method::POST, &format!("/v1/jobs/{id}/result"), Some(&body))
            .await
    }

    /// `POST /v1/jobs/{id}/redrive`: a dead job back to pending.
    pub async fn job_redrive(&self, id: u64) -> Result<Job, Error> {
        self.json(
            Method::POST,
            &format!("/v1/jobs/{id}/redrive"),
            Some(&serde_json::json!({})),
        )
        .await
    }

    /// `POST /v1/jobs/{id}/release`: a job held by its topic's payload
    /// schema is due again (at once, or at its `run_at` if later). Its
    /// payload is checked against the schema first
    /// ([`ErrorCode::PayloadSchema`] while it still fails) unless `force`
    /// (needs the `admin` scope: this attempt is sent unchecked);
    /// [`ErrorCode::NotHeld`] when it is not held.
    pub async fn job_release(&self, id: u64, force: bool) -> Result<Job, Error> {
        let body = serde_json::json!({ "force": force });
        self.json(Method::POST, &format!("/v1/jobs/{id}/release"), Some(&body))
            .await
    }

    /// `POST /v1/schedules` with its fields (`topic`, `key`, `cron` and
    /// `time_zone` or `every_ms`, `payload`, …): the schedule.
    pub async fn schedule_create(&self, schedule: &Value) -> Result<Value, Error> {
        self.json(Method::POST, "/v1/schedules", Some(schedule))
            .await
    }

    /// `GET /v1/schedules/{id}`.
    pub async fn schedule_get(&self, id: u64) -> Result<Value, Error> {
        self.json::<(), _>(Method::GET, &format!("/v1/schedules/{id}"), None)
            .await
    }

    /// `DELETE /v1/schedules/{id}`, its pending occurrences cancelled.
    pub async fn schedule_delete(&self, id: u64) -> Result<Value, Error> {
        self.json::<(), _>(Method::DELETE, &format!("/v1/schedules/{id}"), None)
            .await
    }

    /// `POST /v1/schedules/{id}/trigger`: one more occurrence of the
    /// schedule (its topic, payload, headers and policy), a job of its own
    /// key; with a key given, the same job when sent again
    /// ([`ErrorCode::KeyConflict`] when another job holds it).
    pub async fn schedule_trigger(&self, id: u64, trigger: &Trigger) -> Result<Job, Error> {
        self.json(
            Method::POST,
            &format!("/v1/schedules/{id}/trigger"),
            Some(&trigger.0),
        )
        .await
    }

    /// `POST /v1/schedules/{id}/backfill`: the schedule's nominal
    /// occurrences in [`from`, `to`) (RFC 3339, `to` not after now) that
    /// have no job, created due at once, under the keys the schedule gives
    /// them (so a rerun creates nothing). With `dry_run` nothing is
    /// written: the answer says what would be. More than 10,000
    /// occurrences: [`ErrorCode::InvalidInterval`].
    pub async fn schedule_backfill(
        &self,
        id: u64,
        from: &str,
        to: &str,
        dry_run: bool,
    ) -> Result<Backfill, Error> {
        let body = serde_json::json!({"from": from, "to": to, "dry_run": dry_run});
        self.json(
            Method::POST,
            &format!("/v1/schedules/{id}/backfill"),
            Some(&body),
        )
        .await
    }

    /// `GET /v1/dev/clock`: `tickler dev`'s clock ([`ErrorCode::NoRoute`]
    /// from `tickler serve`, which has none).
    pub async fn dev_clock(&self) -> Result<DevClock, Error> {
        self.json::<(), _>(Method::GET, "/v1/dev/clock", None).await
    }

    /// `POST /v1/dev/clock`: moves `tickler dev`'s clock forward by `by`
    /// (to the millisecond); what was due by then is produced within about
    /// a second.
    pub async fn dev_clock_advance(&self, by: std::time::Duration) -> Result<DevClock, Error> {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let body = serde_json::json!({"advance_ms": ms});
        self.json(Method::POST, "/v1/dev/clock", Some(&body)).await
    }

    /// `GET /v1/forecast`: what falls due on `topic` (or on every topic
    /// the token may read), from `from` (default now) to `to` (default a
    /// day later), by `bucket` (`1m`, `1h`, `1h30m`…; default `1h`). Needs
    /// `read`; a topic outside the token's is [`ErrorCode::ForbiddenTopic`].
    pub async fn forecast(
        &self,
        topic: Option<&str>,
        from: Option<&str>,
        to: Option<&str>,
        bucket: Option<&str>,
    ) -> Result<Forecast, Error> {
        let query: Vec<(&str, &str)> = [
            ("topic", topic),
            ("from", from),
            ("to", to),
            ("bucket", bucket),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.map(|v| (name, v)))
        .collect();
        let query = serde_urlencoded::to_string(&query)
            .map_err(|err| Error::Usage(format!("forecast parameters: {err}")))?;
        let path = if query.is_empty() {
            "/v1/forecast".to_owned()
        } else {
            format!("/v1/forecast?{query}")
        };
        self.json::<(), _>(Method::GET, &path, None).await
    }

    /// `GET /v1/topics/{topic}`: a topic's controls (`paused`,
    /// `max_per_second`, `group_by`…) and its `watermark`. Needs `read`.
    pub async fn topic_get(&self, topic: &str) -> Result<Value, Error> {
        let topic = percent_encode_segment(topic);
        self.json::<(), _>(Method::GET, &format!("/v1/topics/{topic}"), None)
            .await
    }

    /// Any call: `path` with its query, a JSON body, the JSON answer.
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Value), Error> {
        let mut tries = 0;
        loop {
            let url = format!("{}{path}", self.base);
            let mut request = self.http.request(method.clone(), &url);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.map_err(|err| {
                Error::Unavailable(format!(
                    "cannot reach tickler at {}: {}",
                    self.base,
                    error_chain(&err)
                ))
            })?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let text = response.text().await.map_err(|err| {
                Error::Unavailable(format!("reading the answer from {url}: {err}"))
            })?;
            let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            if status.is_success() {
                return Ok((status, value));
            }
            // 429 and 503 write nothing: try again after Retry-After. A
            // quota passed is not a matter of seconds: said at once.
            let again = matches!(
                status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ) && value["error"]["code"] != "quota_exceeded";
            let wait = retry_after.unwrap_or(Duration::from_secs(1));
            if again && tries < self.retries && wait <= RETRY_AFTER_MAX {
                tries += 1;
                tokio::time::sleep(wait).await;
                continue;
            }
            let code_text = value["error"]["code"].as_str().unwrap_or("").to_owned();
            let message = value["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(Error::Api {
                status,
                code: ErrorCode::parse(&code_text),
                code_text,
                message,
                body: value,
            });
        }
    }

    async fn json<B: Serialize, T: for<'de> Deserialize<'de>>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, Error> {
        let body = body
            .map(serde_json::to_value)
            .transpose()
            .map_err(|err| Error::Usage(format!("the request does not serialise: {err}")))?;
        let (_, value) = self.request(method, path, body.as_ref()).await?;
        serde_json::from_value(value).map_err(|err| {
            Error::Unavailable(format!(
                "an answer of {path} this client cannot read: {err}"
            ))
        })
    }
}

/// An error with its causes, one line.
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `segment` with everything but unreserved characters percent-encoded.
fn percent_encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_parse_and_an_unknown_one_is_kept() {
        assert_eq!(
            ErrorCode::parse("version_conflict"),
            ErrorCode::VersionConflict
        );
        assert_eq!(ErrorCode::parse("in_flight"), ErrorCode::InFlight);
        assert_eq!(ErrorCode::parse("quota_exceeded"), ErrorCode::QuotaExceeded);
        assert_eq!(
            ErrorCode::parse("a_code_of_tomorrow"),
            ErrorCode::Other("a_code_of_tomorrow".into())
        );
    }

    #[test]
    fn a_bad_address_is_a_usage_error() {
        assert!(matches!(
            Client::new("localhost:8080", None),
            Err(Error::Usage(_))
        ));
        let job = NewJob::new("t", serde_json::json!(1)).key("k").delay_ms(5);
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({"topic": "t", "payload": 1, "key": "k", "delay_ms": 5})
        );
    }

    #[test]
    fn the_codes_of_wall_clock_jobs_schemas_holds_and_backfills_parse() {
        for (text, code) in [
            ("invalid_run_local", ErrorCode::InvalidRunLocal),
            ("invalid_time_zone", ErrorCode::InvalidTimeZone),
            ("invalid_interval", ErrorCode::InvalidInterval),
            ("payload_schema", ErrorCode::PayloadSchema),
            ("invalid_schema", ErrorCode::InvalidSchema),
            ("not_held", ErrorCode::NotHeld),
        ] {
            assert_eq!(ErrorCode::parse(text), code, "{text}");
        }
    }

    /// The codes docs/api.md's table of errors lists: the backticked words
    /// of its second column.
    fn documented_codes(page: &str) -> Vec<String> {
        let table = page
            .split("\n## Errors\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_default();
        table
            .lines()
            .filter_map(|line| line.split('|').nth(2))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn every_code_the_api_documents_has_a_variant() {
        // Only in tickler's repository: a published crate has no page.
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/api.md");
        let Ok(page) = std::fs::read_to_string(page) else {
            return;
        };
        let codes = documented_codes(&page);
        assert!(codes.len() > 30, "the table was read: {codes:?}");
        let unknown: Vec<&String> = codes
            .iter()
            .filter(|code| matches!(ErrorCode::parse(code), ErrorCode::Other(_)))
            .collect();
        assert!(unknown.is_empty(), "codes without a variant: {unknown:?}");
    }

    #[test]
    fn wall_clock_debounce_and_retarget_requests_serialise_as_the_api_reads_them() {
        let job = NewJob::new("t", serde_json::json!({"n": 1}))
            .key("digest")
            .run_local("2027-11-12T08:00:00", "Australia/Melbourne")
            .on_conflict("debounce")
            .max_delay_ms(300_000);
        assert_eq!(
            serde_json::to_value(&job).unwrap(),
            serde_json::json!({"topic": "t", "payload": {"n": 1}, "key": "digest",
                "run_local": "2027-11-12T08:00:00", "time_zone": "Australia/Melbourne",
                "on_conflict": "debounce", "max_delay_ms": 300_000})
        );
        let change = JobChange::at_version(3).topic("billing.v2");
        assert_eq!(
            serde_json::to_value(&change).unwrap(),
            serde_json::json!({"version": 3, "topic": "billing.v2"})
        );
        assert_eq!(
            serde_json::to_value(Trigger::now()).unwrap(),
            serde_json::json!({})
        );
        assert_eq!(
            serde_json::to_value(Trigger::now().key("rerun").delay_ms(5)).unwrap(),
            serde_json::json!({"key": "rerun", "delay_ms": 5})
        );
    }

    #[test]
    fn a_job_reads_with_or_without_the_fields_of_wall_clock_debounce_and_holds() {
        let plain = serde_json::json!({"id": 7, "topic": "t", "key": null, "status": "pending",
            "run_at": "2027-11-11T21:00:00.000Z", "attempt": 0, "version": 1});
        let job: Job = serde_json::from_value(plain.clone()).unwrap();
        assert_eq!(
            (
                &job.run_local,
                &job.time_zone,
                &job.debounced,
                &job.held_at,
                &job.generation
            ),
            (&None, &None, &None, &None, &None)
        );
        let mut full = plain;
        for (field, value) in [
            ("run_local", serde_json::json!("2027-11-12T08:00:00.000")),
            ("time_zone", serde_json::json!("Australia/Melbourne")),
            ("tzdata_version", serde_json::json!("2026a")),
            (
                "debounce_until",
                serde_json::json!("2027-11-11T21:05:00.000Z"),
            ),
            ("generation", serde_json::json!(2)),
            ("previous_id", serde_json::json!(6)),
            ("debounced", serde_json::json!(true)),
            ("capped", serde_json::json!(false)),
            ("held_at", serde_json::json!("2027-11-11T21:00:00.010Z")),
            ("held_reason", serde_json::json!("/amount: required")),
        ] {
            full[field] = value;
        }
        let job: Job = serde_json::from_value(full).unwrap();
        assert_eq!(job.run_local.as_deref(), Some("2027-11-12T08:00:00.000"));
        assert_eq!(job.time_zone.as_deref(), Some("Australia/Melbourne"));
        assert_eq!(job.tzdata_version.as_deref(), Some("2026a"));
        assert_eq!((job.generation, job.previous_id), (Some(2), Some(6)));
        assert_eq!((job.debounced, job.capped), (Some(true), Some(false)));
        assert_eq!(job.held_reason.as_deref(), Some("/amount: required"));
        assert!(
            job.extra.is_empty(),
            "named, not left in extra: {:?}",
            job.extra
        );
    }

    #[test]
    fn a_backfill_answer_reads() {
        // docs/api.md's example answer.
        let answer: Backfill = serde_json::from_value(serde_json::json!({
            "schedule_id": 7, "from": "2026-10-01T00:00:00.000Z",
            "to": "2026-11-01T00:00:00.000Z", "dry_run": true, "expected": 31,
            "created": 2, "existing": 29,
            "preview": ["2026-10-14T07:00:00.000Z", "2026-10-22T07:00:00.000Z"]}))
        .unwrap();
        assert!(answer.dry_run);
        assert_eq!(
            (answer.expected, answer.created, answer.existing),
            (31, 2, 29)
        );
        assert_eq!(answer.preview.len(), 2);
    }
}

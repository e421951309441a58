//! `/v1/jobs`: create (single and batch), read, reschedule or modify, and
//! cancel jobs. Every request is validated completely before anything is
//! written.

use std::collections::{BTreeMap, HashMap};
use tracing::Instrument;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::auth::Caller;
use super::error::Conflict;
use super::view::{ConsumedView, JobView};
use super::{ApiError, ApiJson, ApiState, JobIdPath};
use crate::domain::job::{
    self, time_format, Expiry, InvalidJob, Job, JobId, NewJob, PayloadKind, Schedule, Window,
};
use crate::domain::policy::PolicyOverrides;
use crate::domain::request::{JobRequest, Limits, OnConflict, TopicDefaults};
use crate::domain::zones::{self, WallClock};
use crate::roles::auth::Scope;
use crate::roles::jobs::Jobs;
use crate::store::{BatchRow, Cancelled, Debounced, JobChanges, Modified, StoreError};

/// Body of `POST /v1/jobs`, and each item of `POST /v1/jobs/batch`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    pub topic: Option<String>,
    pub key: Option<String>,
    /// Any JSON value but null; produced as its JSON text.
    #[serde(default, deserialize_with = "raw_present")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    /// Raw bytes, base64 (standard alphabet, padded).
    pub payload_base64: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    /// RFC 3339 time; any offset, normalised to UTC.
    pub run_at: Option<String>,
    /// Delay from now (the database's now), in milliseconds.
    pub delay_ms: Option<i64>,
    /// Or a wall-clock time, with `time_zone`: a local date and time
    /// without offset (`2027-03-28T09:00:00`). tickler keeps it, the zone
    /// and the tzdata release beside the instant it computes, and moves
    /// the job if a newer tzdata changes that instant.
    pub run_local: Option<String>,
    /// The IANA zone `run_local` is read in (`Europe/Berlin`).
    pub time_zone: Option<String>,
    /// RFC 3339 time after run_at: a job not produced by then expires
    /// (status `expired`) and is never produced.
    pub expires_at: Option<String>,
    /// Or: how long after its run_at (the end of its window, with one) the
    /// job may still be produced, in milliseconds.
    pub ttl_ms: Option<i64>,
    /// A flexible window: the job may be produced at any instant of
    /// [run_at, run_at + window_ms]; tickler spreads what falls due
    /// together over it (0 to 86400000; 0: none).
    pub window_ms: Option<i64>,
    /// Result policy; what is left out comes from the topic's
    /// configuration, then the defaults. (Listed, not flattened: serde's
    /// `flatten` would disable `deny_unknown_fields`.)
    pub expects_result: Option<bool>,
    pub max_attempts: Option<u32>,
    pub backoff_base_ms: Option<u32>,
    pub backoff_cap_ms: Option<u32>,
    pub ack_timeout_ms: Option<u32>,
    /// When a job holds this topic and key already: `reject` (the
    /// default: the same request answers that job, another is refused
    /// `key_conflict`) or `debounce` (needs a key): a pending job is moved
    /// to this request's time with its payload and headers, never past
    /// the first request of its generation + `max_delay_ms`; one that went
    /// out is followed by a new job, its next generation.
    pub on_conflict: Option<String>,
    /// With `debounce`: the longest a job may be moved past its
    /// generation's first request, in milliseconds (1 to
    /// `jobs.max_schedule_ahead_days`); left out, no ceiling.
    pub max_delay_ms: Option<i64>,
}

/// Body of `PATCH /v1/jobs/{id}`: the version read, and what to change.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchJob {
    pub version: Option<u32>,
    #[serde(default, deserialize_with = "raw_present")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    pub payload_base64: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub run_at: Option<String>,
    pub delay_ms: Option<i64>,
    /// Or a new wall-clock time, with `time_zone` (as on create). A new
    /// `run_at` or `delay_ms` ends a job's wall-clock time.
    pub run_local: Option<String>,
    pub time_zone: Option<String>,
    /// A new expiry (RFC 3339, after the run_at), or null: none. Left out,
    /// the job keeps its expiry, which must then come after a new run_at.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<Option<String>>,
    /// Or a new expiry this long after the (new) run_at.
    pub ttl_ms: Option<i64>,
    /// A new flexible window, or null (or 0): none. Left out, the job keeps
    /// its window through a move.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>)]
    pub window_ms: Option<Option<i64>>,
    /// Move the job to another Kafka topic (retarget): it keeps its id,
    /// key, payload, time and attempt. The topic must exist on the broker
    /// (as for a new job) and be within the caller's topics; a job there
    /// holding the same key refuses it (409 `key_conflict`).
    pub topic: Option<String>,
}

/// A field that is present, even as `null`: `Option<Box<RawValue>>` alone
/// reads `null` as absent, which would make `"payload": null` mean "empty"
/// on create and "unchanged" on PATCH. Present-but-null is refused instead.
pub(super) fn raw_present<'de, D>(deserializer: D) -> Result<Option<Box<RawValue>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Box::<RawValue>::deserialize(deserializer).map(Some)
}

/// A field that may be present as `null` (`Some(None)`: remove it), told
/// apart from absent (`None`: leave it).
pub(super) fn present<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// The limits of this deployment's jobs.
pub fn limits_of(state: &ApiState) -> Limits {
    Limits {
        payload_max_bytes: state.config.jobs.payload_max_bytes,
        max_schedule_ahead_days: state.config.jobs.max_schedule_ahead_days,
    }
}

/// `run_at` or `delay_ms`, checked. None when neither is given; both is an
/// error. `now` only bounds the horizon: due-ness is the database's call.
pub(super) fn schedule_parse(
    run_at: Option<String>,
    delay_ms: Option<i64>,
    limits: Limits,
    now: DateTime<Utc>,
) -> Result<Option<Schedule>, ApiError> {
    let schedule = match (run_at, delay_ms) {
        (Some(_), Some(_)) => {
            return Err(ApiError::InvalidSchedule(
                "give run_at (RFC 3339 time) or delay_ms, not both".to_owned(),
            ))
        }
        (None, None) => return Ok(None),
        (None, Some(delay_ms)) => {
            let delay_ms = u64::try_from(delay_ms).map_err(|_| {
                ApiError::InvalidSchedule("delay_ms must be zero or more".to_owned())
            })?;
            Schedule::After { delay_ms }
        }
        (Some(run_at), None) => {
            let at = DateTime::parse_from_rfc3339(&run_at)
                .map_err(|err| {
                    ApiError::InvalidRunAt(format!(
                        "run_at {run_at:?} is not an RFC 3339 time ({err}), e.g. 2030-01-31T09:00:00.000Z"
                    ))
                })?
                .with_timezone(&Utc);
            if at.timestamp_millis() < 0 {
                return Err(InvalidJob::TooEarly.into());
            }
            if !job::time_in_range(at) {
                return Err(ApiError::InvalidRunAt(format!(
                    "run_at {run_at:?} is after 9999-12-31T23:59:59.999Z"
                )));
            }
            Schedule::At(job::truncate_to_ms(at))
        }
    };
    limits.horizon_check(&schedule, now)?;
    Ok(Some(schedule))
}

/// Decides where a moved (or re-windowed) job goes out in its window: the
/// new time asked for (or the job's own) is the window's start, the window
/// the new one (or the job's own), and the instant in it decided again —
/// the same offset for a keyed job, whose offset comes from its key, and
/// for an unkeyed one whose window did not change.
fn window_patched(job: &Job, changes: &mut JobChanges, window: Option<Option<u32>>) {
    if changes.schedule.is_none() && window.is_none() {
        return;
    }
    let start = changes
        .schedule
        .unwrap_or(Schedule::At(job.window_start.unwrap_or(job.schedule_time)));
    let ms = match window {
        Some(ms) => ms,
        None => job.window_ms,
    };
    let Some(ms) = ms else {
        changes.schedule = Some(start);
        changes.window = Some(None);
        return;
    };
    let offset = match (&job.key, job.window_start) {
        (None, Some(old_start)) if Some(ms) == job.window_ms => {
            (job.schedule_time - old_start).num_milliseconds().max(0) as u64
        }
        _ => job::window_offset_ms(&job.topic, job.key.as_deref(), ms),
    };
    changes.schedule = Some(start.later_by(offset));
    changes.window = Some(Some(Window { ms, start }));
}

/// Whether `job`, changed by `changes`, expires after it is due: a new
/// expiry is checked against the new run_at (or the job's own), a kept
/// one — a job's own, not an occurrence's misfire expiry, which a move
/// drops — against a new run_at.
fn expiry_check_patched(
    job: &Job,
    changes: &JobChanges,
    now: DateTime<Utc>,
) -> Result<(), ApiError> {
    let schedule = changes.schedule.unwrap_or(Schedule::At(job.schedule_time));
    let expiry = match changes.expiry {
        Some(Some(expiry)) => expiry,
        Some(None) => return Ok(()),
        None => match job.expires_at {
            Some(at) if job.schedule_id.is_none() && changes.schedule.is_some() => Expiry::At(at),
            _ => return Ok(()),
        },
    };
    job::expiry_resolve(expiry, &schedule, now)
        .map(|_| ())
        .map_err(|err| match changes.expiry {
            Some(_) => ApiError::InvalidExpiry(err),
            None => ApiError::InvalidExpiry(format!(
                "{err}; give a new expires_at or ttl_ms with the new time, or expires_at: null"
            )),
        })
}

/// `window_ms`, checked: None for none (or 0).
pub(super) fn window_parse(window_ms: Option<i64>) -> Result<Option<u32>, ApiError> {
    match window_ms {
        None | Some(0) => Ok(None),
        Some(ms) => u32::try_from(ms)
            .ok()
            .filter(|ms| *ms <= job::WINDOW_MAX_MS)
            .map(Some)
            .ok_or_else(|| {
                ApiError::InvalidSchedule(format!(
                    "window_ms must be 0 to {} (a day)",
                    job::WINDOW_MAX_MS
                ))
            }),
    }
}

/// `run_local` with `time_zone`, resolved with the loaded tzdata: the
/// instant and the wall clock to keep. None when neither is given; one
/// without the other, or either beside `run_at`/`delay_ms`, is an error.
pub(super) fn wall_parse(
    run_local: Option<String>,
    time_zone: Option<String>,
    run_at: &Option<String>,
    delay_ms: Option<i64>,
) -> Result<Option<(DateTime<Utc>, WallClock)>, ApiError> {
    let (local, zone) =
        match (run_local, time_zone) {
            (None, None) => return Ok(None),
            (Some(local), Some(zone)) => (local, zone),
            _ => return Err(ApiError::InvalidSchedule(
                "run_local and time_zone go together: a local time and the IANA zone it is read in"
                    .to_owned(),
            )),
        };
    if run_at.is_some() || delay_ms.is_some() {
        return Err(ApiError::InvalidSchedule(
            "give run_at, delay_ms or run_local with time_zone: one of them".to_owned(),
        ));
    }
    let local = zones::local_parse(&local).map_err(ApiError::InvalidWallClock)?;
    let (at, wall) =
        zones::wall_resolve(&zones::current(), local, &zone).map_err(ApiError::InvalidWallClock)?;
    if at.timestamp_millis() < 0 {
        return Err(InvalidJob::TooEarly.into());
    }
    if !job::time_in_range(at) {
        return Err(ApiError::InvalidRunAt(format!(
            "run_local {} in {zone} is after 9999-12-31T23:59:59.999Z",
            wall.local
        )));
    }
    Ok(Some((at, wall)))
}

/// `expires_at` (Some(None): null, no expiry) or `ttl_ms`, parsed. None
/// when neither is given; both is an error.
pub(super) fn expiry_parse(
    expires_at: Option<Option<String>>,
    ttl_ms: Option<i64>,
) -> Result<Option<Option<Expiry>>, ApiError> {
    match (expires_at, ttl_ms) {
        (Some(_), Some(_)) => Err(ApiError::InvalidExpiry(
            "give expires_at (RFC 3339 time) or ttl_ms, not both".to_owned(),
        )),
        (None, None) => Ok(None),
        (Some(None), None) => Ok(Some(None)),
        (None, Some(ttl_ms)) => {
            let ttl_ms = u64::try_from(ttl_ms)
                .map_err(|_| ApiError::InvalidExpiry("ttl_ms must be 1 or more".to_owned()))?;
            Ok(Some(Some(Expiry::AfterRun { ttl_ms })))
        }
        (Some(Some(at)), None) => {
            let parsed = DateTime::parse_from_rfc3339(&at).map_err(|err| {
                ApiError::InvalidExpiry(format!(
                    "expires_at {at:?} is not an RFC 3339 time ({err}), e.g. 2030-01-31T09:05:00.000Z"
                ))
            })?;
            Ok(Some(Some(Expiry::At(parsed.with_timezone(&Utc)))))
        }
    }
}

/// `payload` or `payload_base64`, decoded and checked. None when neither is
/// given; both is an error.
pub(super) fn payload_parse(
    payload: Option<Box<RawValue>>,
    payload_base64: Option<String>,
    limits: Limits,
) -> Result<Option<(Vec<u8>, PayloadKind)>, ApiError> {
    let parsed = match (payload, payload_base64) {
        (Some(_), Some(_)) => {
            return Err(ApiError::InvalidPayload(
                "give payload or payload_base64, not both".to_owned(),
            ))
        }
        (Some(json), None) => {
            let text = json.get();
            if text == "null" {
                return Err(InvalidJob::PayloadNull.into());
            }
            if job::json_depth(text) > job::JSON_DEPTH_MAX {
                return Err(InvalidJob::PayloadTooDeep.into());
            }
            (text.as_bytes().to_vec(), PayloadKind::Json)
        }
        (None, Some(encoded)) => {
            let bytes = BASE64.decode(encoded.as_bytes()).map_err(|err| {
                ApiError::InvalidPayload(format!("payload_base64 is not valid base64: {err}"))
            })?;
            (bytes, PayloadKind::Bytes)
        }
        (None, None) => return Ok(None),
    };
    if parsed.0.len() > limits.payload_max_bytes {
        return Err(InvalidJob::PayloadTooLarge {
            size: parsed.0.len(),
            limit: limits.payload_max_bytes,
        }
        .into());
    }
    Ok(Some(parsed))
}

impl CreateJob {
    /// The request as typed fields, for [`JobRequest::build`]: what is
    /// the JSON form's own (a payload as JSON or base64, `run_at` or
    /// `delay_ms`, `expires_at` or `ttl_ms`) is read here.
    pub fn request(self, limits: Limits, now: DateTime<Utc>) -> Result<JobRequest, ApiError> {
        let topic = self.topic.ok_or(InvalidJob::Topic)?;
        let headers = self.headers.unwrap_or_default();
        let wall = wall_parse(self.run_local, self.time_zone, &self.run_at, self.delay_ms)?;
        let schedule = match &wall {
            Some((at, _)) => Schedule::At(*at),
            None => schedule_parse(self.run_at, self.delay_ms, limits, now)?.ok_or_else(|| {
                ApiError::InvalidSchedule(
                    "give run_at (RFC 3339 time), delay_ms, or run_local with time_zone".to_owned(),
                )
            })?,
        };
        let window_ms = window_parse(self.window_ms)?.unwrap_or(0);
        let expiry = expiry_parse(self.expires_at.map(Some), self.ttl_ms)?.flatten();
        let (payload, payload_kind) = payload_parse(self.payload, self.payload_base64, limits)?
            .unwrap_or((Vec::new(), PayloadKind::Bytes));
        Ok(JobRequest {
            topic,
            key: self.key,
            payload,
            payload_kind,
            headers,
            schedule,
            window_ms,
            expiry,
            policy: PolicyOverrides {
                expects_result: self.expects_result,
                max_attempts: self.max_attempts,
                backoff_base_ms: self.backoff_base_ms,
                backoff_cap_ms: self.backoff_cap_ms,
                ack_timeout_ms: self.ack_timeout_ms,
            },
            trace_parent: None,
            wall: wall.map(|(_, wall)| wall),
            on_conflict: OnConflict::parse(self.on_conflict.as_deref(), self.max_delay_ms)?,
        })
    }

    /// Checks every rule and builds the job to write, with what to do
    /// when its key is taken; `topic_defaults` gives what the job inherits
    /// from its topic.
    pub fn validate<D: Into<TopicDefaults>>(
        self,
        limits: Limits,
        now: DateTime<Utc>,
        topic_defaults: impl FnOnce(&str) -> D,
    ) -> Result<(NewJob, OnConflict), ApiError> {
        let request = self.request(limits, now)?;
        let on_conflict = request.on_conflict;
        let job = request
            .build(limits, now, topic_defaults)
            .map_err(ApiError::from)?;
        Ok((job, on_conflict))
    }
}

impl PatchJob {
    /// Checks every rule; returns the version the caller read and the
    /// changes.
    pub fn validate(
        self,
        limits: Limits,
        now: DateTime<Utc>,
    ) -> Result<(u32, JobChanges, Option<Option<u32>>), ApiError> {
        let version = self.version.ok_or_else(|| {
            ApiError::InvalidRequest(
                "version is required: send the version you read, to change nothing you have not seen"
                    .to_owned(),
            )
        })?;
        if let Some(headers) = &self.headers {
            job::headers_validate(headers)?;
        }
        let wall = wall_parse(self.run_local, self.time_zone, &self.run_at, self.delay_ms)?;
        let schedule = match &wall {
            Some((at, _)) => Some(Schedule::At(*at)),
            None => schedule_parse(self.run_at, self.delay_ms, limits, now)?,
        };
        if let Some(topic) = &self.topic {
            job::topic_validate(topic)?;
        }
        let changes = JobChanges {
            wall: schedule.map(|_| wall.map(|(_, wall)| wall)),
            schedule,
            payload: payload_parse(self.payload, self.payload_base64, limits)?,
            headers: self.headers,
            expiry: expiry_parse(self.expires_at, self.ttl_ms)?,
            window: None,
            topic: self.topic,
            on_topic: None,
        };
        let window = match self.window_ms {
            None => None,
            Some(ms) => Some(window_parse(ms)?),
        };
        if changes == JobChanges::default() && window.is_none() {
            return Err(ApiError::InvalidRequest(
                "nothing to change: give run_at, delay_ms, payload, payload_base64, headers, \
                 expires_at, ttl_ms, window_ms or topic"
                    .to_owned(),
            ));
        }
        Ok((version, changes, window))
    }
}

impl BatchItem {
    fn found(result: &'static str, job: &Job) -> BatchItem {
        BatchItem {
            result,
            id: Some(job.id),
            run_at: Some(time_format(job.schedule_time)),
            error: None,
        }
    }

    fn error(err: ApiError) -> BatchItem {
        BatchItem {
            result: "error",
            id: None,
            run_at: None,
            error: Some(err.detail()),
        }
    }
}

/// A job id as the API writes it: decimal digits without sign or leading
/// zeros, from 1. One spelling per job, so `/v1/jobs/+5` or `/v1/jobs/05`
/// never reach job 5 by accident.
pub(super) fn id_parse(id: &str) -> Result<JobId, ApiError> {
    let canonical =
        !id.is_empty() && !id.starts_with('0') && id.bytes().all(|b| b.is_ascii_digit());
    canonical
        .then(|| id.parse::<JobId>().ok())
        .flatten()
        .ok_or_else(|| {
            ApiError::InvalidId(format!(
                "job id {id:?} is not a job id: a decimal number from 1 to {}, without sign or leading zeros",
                JobId::MAX
            ))
        })
}

/// Whether jobs may be created for `topic`: never for a reserved topic
/// (tickler's results and dead-letter topics, Kafka's `__*`, anything
/// outside `jobs.topics_allowed`). Then the pre-flight check of `kafka.topic_check`: a
/// topic the broker does not have
/// is refused (`reject`) or let through with a warning (`warn`), months
/// before the job is due rather than when it is. When the broker cannot be
/// asked, the job is accepted: creating never depends on the broker being
/// up, and the dispatcher deals with a topic that turns out missing.
pub(super) async fn topic_preflight(state: &ApiState, topic: &str) -> Result<(), ApiError> {
    if let Some(why) = state.rules.topic_reserved(topic) {
        return Err(ApiError::ReservedTopic(why));
    }
    if state
        .topics
        .preflight(state.config.kafka.topic_check, topic)
        .await
    {
        Ok(())
    } else {
        Err(ApiError::UnknownTopic(topic.to_owned()))
    }
}

/// Refuses a payload its topic's payload schema does not match (400
/// `payload_schema`, naming where and the keyword); a topic without a
/// schema checks nothing. This instance's copy of the topic controls
/// decides (a schema set through another instance holds here within a
/// second; the dispatcher checks again before it sends).
pub(super) fn payload_schema_check(
    state: &ApiState,
    topic: &str,
    kind: job::PayloadKind,
    payload: &[u8],
) -> Result<(), ApiError> {
    state
        .controls
        .payload_check(topic, kind, payload)
        .map_err(|mismatch| ApiError::PayloadSchema(mismatch.to_string()))
}

/// `POST /v1/jobs` — 201 with the new job. With a key already used on the
/// topic: 200 with the existing job when the request is the same, 409
/// otherwise.
///
/// Crash after the INSERT and before indexing: the job is in MySQL and is
/// indexed by the reconciler's overdue probe; nothing is lost.
#[utoipa::path(
    post, path = "/v1/jobs", operation_id = "job_create", tag = "jobs",
    request_body = CreateJob,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context, kept with the job and put on its record")),
    responses(
        (status = 201, description = "Created", body = JobView),
        (status = 200, description = "A job with this topic and key exists and asks for the same: returned as it is", body = JobView),
    )
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateJob>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Scope::Write)?;
    let rules = state.rules.clone();
    let (mut new_job, on_conflict) =
        body.validate(limits_of(&state), state.index.clock().now(), |topic| {
            rules.defaults_for(topic)
        })?;
    new_job.trace_parent = trace_parent_of(&headers);
    caller.topic(&new_job.topic)?;
    payload_schema_check(
        &state,
        &new_job.topic,
        new_job.payload_kind,
        &new_job.payload,
    )?;
    topic_preflight(&state, &new_job.topic).await?;
    caller.jobs_admit(&state, 1).await?;
    let span = if crate::telemetry::enabled() {
        tracing::info_span!(
            "job.create",
            otel.kind = "server",
            job.topic = %new_job.topic,
            job.id = tracing::field::Empty,
        )
    } else {
        tracing::Span::none()
    };
    crate::telemetry::parent_set(&span, new_job.trace_parent.as_deref());
    let jobs = caller.jobs_creating(&state, std::iter::once(new_job.topic.as_str()));
    if let OnConflict::Debounce { max_delay_ms } = on_conflict {
        let debounced = jobs
            .debounce(&new_job, max_delay_ms, None)
            .instrument(span.clone())
            .await?;
        let (status, view) = debounced_answer(debounced)?;
        span.record("job.id", view.id);
        return Ok((status, Json(view)));
    }
    let created = jobs.create(&new_job).instrument(span.clone()).await?;
    let Some(job) = created else {
        let existing = existing_for(&jobs, &new_job).await?;
        return Ok((StatusCode::OK, Json(JobView::from(existing))));
    };
    span.record("job.id", job.id);
    Ok((StatusCode::CREATED, Json(JobView::from(job))))
}

/// A debounce's answer: 201 with the job it created (the first of its key,
/// or the next generation, naming the one before in `previous_id`), 200
/// with the pending job it moved (`debounced`, and `capped` when held to
/// its ceiling); 409 `in_flight` while a dispatcher holds the job.
fn debounced_answer(debounced: Debounced) -> Result<(StatusCode, JobView), ApiError> {
    match debounced {
        Debounced::Created(job, _) | Debounced::Renewed(job, _) => {
            Ok((StatusCode::CREATED, JobView::from(job)))
        }
        Debounced::Moved { job, capped, .. } => {
            let mut view = JobView::from(job);
            view.debounced = Some(true);
            view.capped = Some(capped);
            Ok((StatusCode::OK, view))
        }
        Debounced::InFlight(job) => Err(ApiError::Conflict {
            conflict: Conflict::InFlight,
            message: format!(
                "job {} is being dispatched this instant; try again: it will be debounced or followed by a new one",
                job.id
            ),
            job: Box::new(JobView::from(job)),
        }),
    }
}

/// The request's W3C `traceparent`, when valid (an invalid one is
/// dropped, as the W3C recommends).
fn trace_parent_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(job::HEADER_TRACEPARENT)
        .and_then(|value| value.to_str().ok())
        .and_then(job::traceparent_parse)
}

/// The job already holding (topic, key), if the request matches it.
async fn existing_for(jobs: &Jobs, new_job: &NewJob) -> Result<Job, ApiError> {
    let key = new_job.key.as_deref().unwrap_or_default();
    let existing = jobs
        .find(&new_job.topic, key)
        .await?
        .ok_or(ApiError::Internal)?;
    if new_job.asks_for_same(&existing) {
        Ok(existing)
    } else {
        Err(ApiError::KeyConflict {
            existing_id: existing.id,
        })
    }
}

/// Body of `POST /v1/jobs/batch`. Items stay raw text until each is read
/// on its own: a payload is kept byte for byte as sent (as on single
/// create), and one bad item is that item's error, not the batch's.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBatch {
    #[schema(value_type = Vec<CreateJob>)]
    pub jobs: Vec<Box<RawValue>>,
}

/// Answer of `POST /v1/jobs/batch`: one result per item, in order.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchAnswer {
    pub results: Vec<BatchItem>,
}

/// One item's result: `created`, `existing`, `debounced` (a debounce that
/// moved the pending job; with `id` and `run_at`) or `error` (with
/// `error`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BatchItem {
    pub result: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<JobId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<super::error::ErrorDetail>,
}

/// Answer of a cancel that applied (or had applied before).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CancelAnswer {
    /// `cancelled`.
    pub outcome: &'static str,
    pub job: JobView,
}

/// `POST /v1/jobs/batch` — up to `jobs.batch_max` jobs in one transaction; 200
/// with one result per item, in order: `created`, `existing` (same key, same
/// request) or `error` (with the code and message a single create would
/// give). Invalid items do not stop the valid ones.
#[utoipa::path(
    post, path = "/v1/jobs/batch", operation_id = "jobs_batch_create", tag = "jobs",
    request_body = CreateBatch,
    params(("traceparent" = Option<String>, Header, description = "W3C trace context for every job of the batch")),
    responses((status = 200, description = "One result per item, in order", body = BatchAnswer))
)]
// Long because it validates every item before anything is written, then
// writes and answers item by item, in order.
pub async fn create_batch(
    State(state): State<ApiState>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CreateBatch>,
) -> Result<impl IntoResponse, ApiError> {
    caller.require(Scope::Write)?;
    let max = state.config.jobs.batch_max;
    if body.jobs.is_empty() || body.jobs.len() > max {
        return Err(ApiError::InvalidRequest(format!(
            "a batch holds 1 to {max} jobs, this one {}",
            body.jobs.len()
        )));
    }
    let limits = limits_of(&state);
    let now = state.index.clock().now();
    let trace_parent = trace_parent_of(&headers);
    let mut checked: Vec<Result<(NewJob, OnConflict), ApiError>> = body
        .jobs
        .into_iter()
        .map(|item| {
            let request: CreateJob = serde_json::from_str(item.get())
                .map_err(|err| ApiError::InvalidRequest(err.to_string()))?;
            let (mut new_job, on_conflict) =
                request.validate(limits, now, |topic| state.rules.defaults_for(topic))?;
            caller.topic(&new_job.topic)?;
            payload_schema_check(
                &state,
                &new_job.topic,
                new_job.payload_kind,
                &new_job.payload,
            )?;
            new_job.trace_parent = trace_parent.clone();
            Ok((new_job, on_conflict))
        })
        .collect();
    // Each distinct topic is checked (and warned about) once, however many
    // items name it.
    let mut verdicts: HashMap<String, Result<(), ApiError>> = HashMap::new();
    for item in &mut checked {
        let Ok((new_job, _)) = item else { continue };
        if !verdicts.contains_key(&new_job.topic) {
            let verdict = topic_preflight(&state, &new_job.topic).await;
            verdicts.insert(new_job.topic.clone(), verdict);
        }
        if let Some(Err(err)) = verdicts.get(&new_job.topic) {
            *item = Err(err.clone());
        }
    }
    // Debounces are written one by one after the one insert of the rest.
    let valid: Vec<NewJob> = checked
        .iter()
        .filter_map(|c| match c {
            Ok((job, OnConflict::Reject)) => Some(job.clone()),
            _ => None,
        })
        .collect();
    let debounces = checked
        .iter()
        .filter(|c| matches!(c, Ok((_, OnConflict::Debounce { .. }))))
        .count();
    let jobs = caller.jobs_creating(
        &state,
        checked
            .iter()
            .filter_map(|c| c.as_ref().ok())
            .map(|(job, _)| job.topic.as_str()),
    );
    if valid.len() + debounces > 0 {
        caller.jobs_admit(&state, valid.len() + debounces).await?;
    }
    let rows = if valid.is_empty() {
        Vec::new()
    } else {
        let valid: Vec<&NewJob> = valid.iter().collect();
        jobs.create_many(&valid, None).await?
    };

    let mut rows = rows.into_iter().zip(valid.iter());
    let mut results = Vec::with_capacity(checked.len());
    for item in checked {
        let result = match item {
            Err(err) => BatchItem::error(err),
            Ok((new_job, OnConflict::Debounce { max_delay_ms })) => {
                match jobs.debounce(&new_job, max_delay_ms, None).await {
                    Err(err) => BatchItem::error(err.into()),
                    Ok(debounced) => match debounced_answer(debounced) {
                        Err(err) => BatchItem::error(err),
                        Ok((status, view)) => BatchItem {
                            result: if status == StatusCode::CREATED {
                                "created"
                            } else {
                                "debounced"
                            },
                            id: Some(view.id),
                            run_at: Some(view.run_at),
                            error: None,
                        },
                    },
                }
            }
            Ok(_) => match rows.next() {
                Some((BatchRow::Created(job), _)) => BatchItem::found("created", &job),
                Some((BatchRow::Duplicate, new_job)) => match existing_for(&jobs, new_job).await {
                    Ok(job) => BatchItem::found("existing", &job),
                    Err(err) => BatchItem::error(err),
                },
                None => return Err(ApiError::Internal),
            },
        };
        results.push(result);
    }
    Ok(Json(BatchAnswer { results }))
}

/// `GET /v1/jobs/{id}`.
#[utoipa::path(
    get, path = "/v1/jobs/{id}", operation_id = "job_get", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses((status = 200, description = "The job", body = JobView))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
) -> Result<Json<JobView>, ApiError> {
    caller.require(Scope::Read)?;
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    let followed = state
        .config
        .topics
        .get(&job.topic)
        .and_then(|topic| topic.consumer_groups.clone())
        .unwrap_or_default();
    let consumed = state.store.job_consumed(&job, &followed).await?;
    let mut view = JobView::from(job);
    view.consumed = consumed.into_iter().map(ConsumedView::from).collect();
    Ok(Json(view))
}

/// `PATCH /v1/jobs/{id}` — reschedule, modify or retarget a pending job
/// whose version is still the one the caller read. 200 with the job; 409
/// `version_conflict` or `not_pending` with the job as it is; a new topic
/// whose key a job there holds: 409 `key_conflict`, nothing changed.
#[utoipa::path(
    patch, path = "/v1/jobs/{id}", operation_id = "job_modify", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    request_body = PatchJob,
    responses((status = 200, description = "Changed", body = JobView))
)]
pub async fn patch(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    ApiJson(body): ApiJson<PatchJob>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let (version, mut changes, window) =
        body.validate(limits_of(&state), state.index.clock().now())?;
    if let Some(topic) = &changes.topic {
        caller.topic(topic)?;
        topic_preflight(&state, topic).await?;
    }
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    // The payload the job will have, on the topic it will be on, matches
    // that topic's schema (a new payload that does releases a held job).
    if changes.payload.is_some() || changes.topic.is_some() {
        let (payload, kind) = match &changes.payload {
            Some((payload, kind)) => (payload.as_slice(), *kind),
            None => (job.payload.as_slice(), job.payload_kind),
        };
        let topic = changes.topic.as_deref().unwrap_or(&job.topic);
        payload_schema_check(&state, topic, kind, payload)?;
    }
    // The write holds only while the job is on the topic just checked: a
    // retarget meanwhile answers a version conflict.
    changes.on_topic = Some(job.topic.clone());
    window_patched(&job, &mut changes, window);
    // Checked against the job read: a change to it since moves its version,
    // and the write below then refuses the caller's.
    expiry_check_patched(&job, &changes, state.index.clock().now())?;
    let modified = match caller
        .jobs(&state)
        .modify(id, version, &changes, None)
        .await
    {
        Ok(modified) => modified,
        Err(StoreError::DuplicateKey) => {
            // Only a new topic can take a key: the job there holding it.
            let topic = changes.topic.as_deref().unwrap_or(&job.topic);
            let key = job.key.as_deref().unwrap_or_default();
            let existing = state
                .store
                .job_find_by_key(topic, key)
                .await?
                // Gone since (purged): nothing was written; again, it moves.
                .ok_or(ApiError::Unavailable)?;
            return Err(ApiError::KeyConflict {
                existing_id: existing.id,
            });
        }
        Err(err) => return Err(err.into()),
    };
    match modified {
        Modified::Applied(job, _) => Ok(Json(JobView::from(job)).into_response()),
        Modified::Occurrence(job) => Err(ApiError::InvalidRequest(format!(
            "job {id} is an occurrence of schedule {}: it keeps its schedule's topic",
            job.schedule_id.unwrap_or_default()
        ))),
        Modified::VersionMismatch(job) => Err(ApiError::Conflict {
            conflict: Conflict::Version,
            message: format!(
                "job {id} is at version {}, not {version}: read it again",
                job.version
            ),
            job: Box::new(job.into()),
        }),
        Modified::NotPending(job) => Err(ApiError::Conflict {
            conflict: Conflict::NotPending,
            message: format!("job {id} is {}: only pending jobs can change", job.status),
            job: Box::new(job.into()),
        }),
    }
}

/// `DELETE /v1/jobs/{id}` — cancel. `outcome` says what happened:
/// `cancelled` (200: it will never be produced), `too_late` (409: it was
/// produced; `kafka` says where), `in_flight` (409: a dispatcher holds it
/// this instant; GET it again for the final state).
#[utoipa::path(
    delete, path = "/v1/jobs/{id}", operation_id = "job_cancel", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses((status = 200, description = "Cancelled: it will never be produced", body = CancelAnswer))
)]
pub async fn cancel(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    // The topic alone: a row whose payload does not decode is cancelled
    // all the same.
    caller.topic(&state.store.job_topic(id).await?)?;
    // Once the cancel has committed, nothing after it fails the answer: it
    // is definitive, and says so.
    let job = match caller.jobs(&state).cancel(id).await? {
        Cancelled::Applied(job) => job,
        Cancelled::Already(job) => job,
        Cancelled::InFlight(job) => {
            return Err(ApiError::Conflict {
                conflict: Conflict::InFlight,
                message: format!(
                    "job {id} is being dispatched this instant; GET it for the final state"
                ),
                job: Box::new(job.into()),
            })
        }
        Cancelled::TooLate(job) => {
            return Err(ApiError::Conflict {
                conflict: Conflict::TooLate,
                message: format!("job {id} was already produced"),
                job: Box::new(job.into()),
            })
        }
    };
    Ok(Json(CancelAnswer {
        outcome: "cancelled",
        job: JobView::from(job),
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::policy::Policy;

    const LIMITS: Limits = Limits {
        payload_max_bytes: 16,
        max_schedule_ahead_days: 10,
    };

    fn parse(body: &str) -> Result<NewJob, ApiError> {
        let now = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let request: CreateJob = serde_json::from_str(body).expect("well-formed test body");
        request
            .validate(LIMITS, now, |_| Policy {
                max_attempts: 3,
                ..Policy::default()
            })
            .map(|(job, _)| job)
    }

    fn code(body: &str) -> &'static str {
        parse(body).expect_err("should be refused").code()
    }

    #[test]
    fn a_json_payload_is_kept_as_sent() {
        let job = parse(r#"{"topic":"t","payload":{"a": [1, 2]},"delay_ms":5}"#).unwrap();
        assert_eq!(job.payload, br#"{"a": [1, 2]}"#);
        assert_eq!(job.payload_kind, PayloadKind::Json);
        assert_eq!(job.schedule, Schedule::After { delay_ms: 5 });
        assert_eq!(job.policy.max_attempts, 3, "from the topic");
        assert!(!job.policy.expects_result);
        let job = parse(
            r#"{"topic":"t","delay_ms":5,"expects_result":true,"max_attempts":7,"ack_timeout_ms":2000}"#,
        )
        .unwrap();
        assert_eq!(
            (
                job.policy.expects_result,
                job.policy.max_attempts,
                job.policy.ack_timeout_ms
            ),
            (true, 7, 2_000)
        );
    }

    #[test]
    fn an_expiry_is_an_instant_after_run_at_or_a_span_after_it() {
        let job = parse(
            r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","expires_at":"2030-01-02T01:00:00.5009+01:00"}"#,
        )
        .unwrap();
        assert_eq!(
            job.expires_at.map(time_format).as_deref(),
            Some("2030-01-02T00:00:00.500Z")
        );
        let job = parse(r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","ttl_ms":90000}"#).unwrap();
        assert_eq!(
            (
                job.expires_at.map(time_format).as_deref(),
                job.expires_after_ms
            ),
            (Some("2030-01-02T00:01:30.000Z"), None)
        );
        // After a delay, the database's clock sets both.
        let job = parse(r#"{"topic":"t","delay_ms":5,"ttl_ms":100}"#).unwrap();
        assert_eq!((job.expires_at, job.expires_after_ms), (None, Some(100)));
        let job = parse(r#"{"topic":"t","delay_ms":5}"#).unwrap();
        assert_eq!((job.expires_at, job.expires_after_ms), (None, None));
    }

    #[test]
    fn a_window_decides_an_instant_in_it_once_from_the_key() {
        let body = r#"{"topic":"t","key":"k1","run_at":"2030-01-02T00:00:00Z","window_ms":600000}"#;
        let job = parse(body).unwrap();
        let window = job.window.expect("a window");
        assert_eq!(window.ms, 600_000);
        let start = DateTime::parse_from_rfc3339("2030-01-02T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(window.start, Schedule::At(start));
        let Schedule::At(at) = job.schedule else {
            panic!("absolute")
        };
        assert!(
            at >= start && at <= start + chrono::Duration::minutes(10),
            "{at}"
        );
        assert_eq!(
            parse(body).unwrap().schedule,
            job.schedule,
            "the same key, the same instant"
        );
        // Keys spread over the window.
        let instants: std::collections::BTreeSet<String> = (0..50)
            .map(|i| {
                let job = parse(&format!(
                    r#"{{"topic":"t","key":"k{i}","run_at":"2030-01-02T00:00:00Z","window_ms":600000}}"#
                ))
                .unwrap();
                format!("{:?}", job.schedule)
            })
            .collect();
        assert!(instants.len() > 45, "{} distinct of 50", instants.len());
        // No window: the time itself.
        let plain =
            parse(r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","window_ms":0}"#).unwrap();
        assert_eq!((plain.schedule, plain.window), (Schedule::At(start), None));
        for bad in [-1, 86_400_001] {
            assert_eq!(
                code(&format!(
                    r#"{{"topic":"t","delay_ms":5,"window_ms":{bad}}}"#
                )),
                "invalid_schedule"
            );
        }
        // An expiry must come after the window's end.
        assert_eq!(
            code(
                r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","window_ms":600000,"expires_at":"2030-01-02T00:09:00Z"}"#
            ),
            "invalid_expiry"
        );
        let job = parse(
            r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","window_ms":600000,"ttl_ms":60000}"#,
        )
        .unwrap();
        assert_eq!(
            job.expires_at,
            Some(start + chrono::Duration::minutes(11)),
            "a ttl counts from the window's end"
        );
    }

    #[test]
    fn an_expiry_at_or_before_run_at_or_malformed_is_refused() {
        for body in [
            r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","expires_at":"2030-01-02T00:00:00Z"}"#,
            r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","expires_at":"2030-01-01T23:00:00Z"}"#,
            r#"{"topic":"t","delay_ms":60000,"expires_at":"2030-01-01T00:00:30Z"}"#,
            r#"{"topic":"t","delay_ms":5,"expires_at":"soon"}"#,
            r#"{"topic":"t","delay_ms":5,"ttl_ms":0}"#,
            r#"{"topic":"t","delay_ms":5,"ttl_ms":-1}"#,
            r#"{"topic":"t","delay_ms":5,"ttl_ms":10,"expires_at":"2031-01-01T00:00:00Z"}"#,
            r#"{"topic":"t","run_at":"2030-01-02T00:00:00Z","ttl_ms":9000000000000000}"#,
        ] {
            assert_eq!(code(body), "invalid_expiry", "{body}");
        }
    }

    #[test]
    fn run_at_is_normalised_to_utc_milliseconds() {
        let job = parse(
            r#"{"topic":"t","payload_base64":"AAE=","run_at":"2030-01-02T01:00:00.1239+01:00"}"#,
        )
        .unwrap();
        let Schedule::At(at) = job.schedule else {
            panic!("absolute")
        };
        assert_eq!(time_format(at), "2030-01-02T00:00:00.123Z");
        assert_eq!(job.payload, vec![0, 1]);
    }

    #[test]
    fn the_past_is_accepted() {
        assert!(parse(r#"{"topic":"t","run_at":"2020-01-01T00:00:00Z"}"#).is_ok());
    }

    #[test]
    fn each_mistake_has_its_code() {
        assert_eq!(code(r#"{"delay_ms":1}"#), "invalid_topic");
        assert_eq!(code(r#"{"topic":"a b","delay_ms":1}"#), "invalid_topic");
        assert_eq!(code(r#"{"topic":"t"}"#), "invalid_schedule");
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"run_at":"2030-01-01T00:00:00Z"}"#),
            "invalid_schedule"
        );
        assert_eq!(code(r#"{"topic":"t","delay_ms":-1}"#), "invalid_schedule");
        assert_eq!(
            code(r#"{"topic":"t","run_at":"tomorrow"}"#),
            "invalid_run_at"
        );
        assert_eq!(
            code(r#"{"topic":"t","run_at":"2030-01-01 00:00:00"}"#),
            "invalid_run_at"
        );
        assert_eq!(
            code(r#"{"topic":"t","run_at":"1969-12-31T23:59:59Z"}"#),
            "invalid_run_at"
        );
        assert_eq!(
            code(r#"{"topic":"t","run_at":"2030-01-11T00:00:01Z"}"#),
            "schedule_too_far"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":864000001}"#),
            "schedule_too_far"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"payload":"x","payload_base64":"eA=="}"#),
            "invalid_payload"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"payload_base64":"not base64!"}"#),
            "invalid_payload"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"payload":"0123456789abcdef"}"#),
            "payload_too_large"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"key":""}"#),
            "invalid_key"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"headers":{"tickler-attempt":"9"}}"#),
            "invalid_headers"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"max_attempts":0}"#),
            "invalid_policy"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"ack_timeout_ms":10}"#),
            "invalid_policy"
        );
        assert_eq!(
            code(r#"{"topic":"t","delay_ms":1,"backoff_base_ms":10,"backoff_cap_ms":5}"#),
            "invalid_policy"
        );
    }

    #[test]
    fn the_payload_limit_counts_decoded_bytes() {
        // 16 bytes exactly, as 24 characters of base64.
        assert!(
            parse(r#"{"topic":"t","delay_ms":1,"payload_base64":"MDEyMzQ1Njc4OWFiY2RlZg=="}"#)
                .is_ok()
        );
    }
}

//! `/v1/schedules`: recurring schedules. Each occurrence becomes an ordinary
//! job (key `<schedule key>@<instant>`), created ahead of time by the
//! materializer; see docs/schedules.md.

use std::collections::BTreeMap;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::auth::Caller;
use super::jobs::{limits_of, payload_parse, present, raw_present, topic_preflight};
use super::{ApiError, ApiJson, ApiState};
use crate::domain::job::time_format;
use crate::domain::job::{self, InvalidJob, JobId, PayloadKind};
use crate::domain::policy::PolicyOverrides;
use crate::domain::schedule::{self, InvalidTiming, Misfire, Timing};
use crate::roles::auth::Scope;
use crate::roles::materializer;
use crate::store::{
    NewSchedule, PendingOccurrences, ScheduleDef, ScheduleRow, ScheduleStatus, ScheduleUpdate,
    StoreError,
};

/// Default `misfire_grace_ms`.
pub const MISFIRE_GRACE_DEFAULT_MS: u32 = 60_000;
/// Pending occurrences shown with a schedule.
const PENDING_SHOWN: u32 = 5;

/// Body of `POST /v1/schedules`: a job's fields (but its time) and when it
/// repeats.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSchedule {
    pub topic: Option<String>,
    /// The schedule's key: unique per topic, and the start of each
    /// occurrence's job key (`<key>@<instant>`). At most 230 characters.
    pub key: Option<String>,
    #[serde(default, deserialize_with = "raw_present")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    pub payload_base64: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    /// Cron: 5 fields (minute hour day-of-month month day-of-week) or 6
    /// (seconds first), read on the clock of `time_zone`.
    pub cron: Option<String>,
    /// IANA time zone of `cron` (default `UTC`).
    pub time_zone: Option<String>,
    /// Or a fixed period in milliseconds (at least 1000), from `start_at`.
    pub every_ms: Option<u64>,
    /// No occurrence before this (RFC 3339; default now).
    pub start_at: Option<String>,
    /// No occurrence after this (inclusive).
    pub end_at: Option<String>,
    /// Stop after creating this many occurrences.
    pub max_occurrences: Option<u32>,
    /// Occurrences missed while no tickler ran: `skip`, `fire_once`
    /// (default) or `fire_all`.
    pub misfire: Option<Misfire>,
    /// How late an occurrence may be and still count as on time (default
    /// 60000).
    pub misfire_grace_ms: Option<u32>,
    /// Each occurrence's flexible window, as a job's `window_ms` (0 to
    /// 86400000; 0: none).
    pub window_ms: Option<u32>,
    /// Each occurrence moved later by up to this many milliseconds,
    /// decided from its key (0 to 86400000; 0: none).
    pub jitter_ms: Option<u32>,
    pub expects_result: Option<bool>,
    pub max_attempts: Option<u32>,
    pub backoff_base_ms: Option<u32>,
    pub backoff_cap_ms: Option<u32>,
    pub ack_timeout_ms: Option<u32>,
}

/// Body of `PATCH /v1/schedules/{id}`: the version read, and what to
/// change. `cron` replaces `every_ms` and the reverse; `end_at` and
/// `max_occurrences` take `null` to remove the bound.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchSchedule {
    pub version: Option<u32>,
    #[serde(default, deserialize_with = "raw_present")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    pub payload_base64: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub every_ms: Option<u64>,
    pub start_at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub end_at: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>)]
    pub max_occurrences: Option<Option<u32>>,
    pub misfire: Option<Misfire>,
    pub misfire_grace_ms: Option<u32>,
    /// 0 removes the window.
    pub window_ms: Option<u32>,
    /// 0 removes the jitter.
    pub jitter_ms: Option<u32>,
    pub expects_result: Option<bool>,
    pub max_attempts: Option<u32>,
    pub backoff_base_ms: Option<u32>,
    pub backoff_cap_ms: Option<u32>,
    pub ack_timeout_ms: Option<u32>,
}

/// Body of `POST /v1/schedules/preview`: a timing to try, without storing
/// anything.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PreviewSchedule {
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub every_ms: Option<u64>,
    pub start_at: Option<String>,
    pub end_at: Option<String>,
    /// Occurrences after this time (default now).
    pub after: Option<String>,
    /// How many (default 10, at most 100).
    pub count: Option<usize>,
}

/// A schedule as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleView {
    pub id: u64,
    pub topic: String,
    pub key: String,
    /// `active`, `paused` or `ended`.
    pub status: ScheduleStatus,
    pub version: u32,
    pub cron: Option<String>,
    pub time_zone: Option<String>,
    pub every_ms: Option<u64>,
    pub start_at: String,
    pub end_at: Option<String>,
    pub max_occurrences: Option<u32>,
    pub misfire: Misfire,
    pub misfire_grace_ms: u32,
    /// Each occurrence's flexible window.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_ms: Option<u32>,
    /// Each occurrence moved later by up to this.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub jitter_ms: Option<u32>,
    /// The next occurrence not yet created as a job; null once ended.
    pub next_at: Option<String>,
    /// The latest occurrence created as a job.
    pub last_at: Option<String>,
    /// Occurrences created as jobs so far.
    pub occurrences: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<serde_json::Value>)]
    pub payload: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_base64: Option<String>,
    pub headers: BTreeMap<String, String>,
    pub expects_result: bool,
    pub max_attempts: u32,
    pub backoff_base_ms: u32,
    pub backoff_cap_ms: u32,
    pub ack_timeout_ms: u32,
    pub created_by: String,
    pub created_at: String,
    pub updated_at: String,
    /// Its pending occurrences, soonest first (at most 5; on single reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<Vec<OccurrenceView>>,
}

/// A pending occurrence: a job.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OccurrenceView {
    pub job_id: JobId,
    pub key: Option<String>,
    pub run_at: String,
}

impl ScheduleView {
    fn of(row: ScheduleRow, pending: Option<Vec<OccurrenceView>>) -> ScheduleView {
        let def = row.def;
        let (payload, payload_base64) = super::view::payload_shown(def.payload_kind, def.payload);
        ScheduleView {
            id: row.id,
            topic: row.topic,
            key: row.key,
            status: row.status,
            version: row.version,
            cron: def.cron,
            time_zone: def.time_zone,
            every_ms: def.every_ms,
            start_at: time_format(def.start_at),
            end_at: def.end_at.map(time_format),
            max_occurrences: def.max_occurrences,
            misfire: def.misfire,
            misfire_grace_ms: def.misfire_grace_ms,
            window_ms: def.window_ms,
            jitter_ms: def.jitter_ms,
            next_at: row.next_at.map(time_format),
            last_at: row.last_at.map(time_format),
            occurrences: row.occurrences,
            payload,
            payload_base64,
            headers: def.headers,
            expects_result: def.policy.expects_result,
            max_attempts: def.policy.max_attempts,
            backoff_base_ms: def.policy.backoff_base_ms,
            backoff_cap_ms: def.policy.backoff_cap_ms,
            ack_timeout_ms: def.policy.ack_timeout_ms,
            created_by: row.created_by,
            created_at: time_format(row.created_at),
            updated_at: time_format(row.updated_at),
            pending,
        }
    }
}

/// A page of `GET /v1/schedules`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SchedulePage {
    pub schedules: Vec<ScheduleView>,
    /// Pass back as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// Answer of a preview.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Preview {
    /// UTC instants, RFC 3339.
    pub occurrences: Vec<String>,
    /// The same instants on the wall clock of `time_zone` (cron only).
    pub local: Vec<String>,
}

/// Answer of a change that may have replaced pending occurrences.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleChanged {
    pub schedule: ScheduleView,
    /// Pending occurrences deleted (not yet due; created again from the
    /// new definition).
    pub replaced: u64,
    /// Pending occurrences whose payload, headers and policy were updated
    /// in place.
    pub updated: u64,
}

/// Answer of `DELETE /v1/schedules/{id}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleDeleted {
    pub id: u64,
    /// Pending occurrences cancelled or deleted (0 with `occurrences=keep`).
    pub occurrences_cancelled: u64,
}

fn time_parse(name: &str, value: &str) -> Result<DateTime<Utc>, ApiError> {
    let at = DateTime::parse_from_rfc3339(value)
        .map_err(|err| {
            ApiError::InvalidSchedule(format!(
                "{name} {value:?} is not an RFC 3339 time ({err}), e.g. 2030-01-31T09:00:00Z"
            ))
        })?
        .with_timezone(&Utc);
    if !job::time_in_range(at) {
        return Err(ApiError::InvalidSchedule(format!(
            "{name} {value:?} is outside 1970-01-01 .. 9999-12-31"
        )));
    }
    Ok(job::truncate_to_ms(at))
}

fn timing_error(err: InvalidTiming) -> ApiError {
    ApiError::InvalidSchedule(err.to_string())
}

/// Checks a definition as a whole: a readable timing, bounds in order, and
/// at least one occurrence to come.
fn def_check(def: &ScheduleDef, now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, ApiError> {
    let timing = def.timing().map_err(timing_error)?;
    if let Some(end) = def.end_at {
        if end < def.start_at {
            return Err(ApiError::InvalidSchedule(
                "end_at is before start_at".to_owned(),
            ));
        }
    }
    if def.max_occurrences == Some(0) {
        return Err(ApiError::InvalidSchedule(
            "max_occurrences must be at least 1 (leave it out for no limit)".to_owned(),
        ));
    }
    if def.misfire_grace_ms < 1_000 {
        return Err(ApiError::InvalidSchedule(
            "misfire_grace_ms must be at least 1000".to_owned(),
        ));
    }
    for (name, value) in [("window_ms", def.window_ms), ("jitter_ms", def.jitter_ms)] {
        if value.is_some_and(|ms| ms > crate::domain::job::WINDOW_MAX_MS) {
            return Err(ApiError::InvalidSchedule(format!(
                "{name} must be 0 to {} (a day)",
                crate::domain::job::WINDOW_MAX_MS
            )));
        }
    }
    if let Timing::Cron { .. } = timing {
        if timing.next_after(now.max(def.start_at)).is_none() {
            return Err(timing_error(InvalidTiming::Never(
                def.cron.clone().unwrap_or_default(),
            )));
        }
    }
    Ok(def.first_after(now.max(def.start_at - Duration::milliseconds(1))))
}

impl CreateSchedule {
    fn validate(
        self,
        state: &ApiState,
        now: DateTime<Utc>,
        created_by: String,
    ) -> Result<NewSchedule, ApiError> {
        let topic = self.topic.ok_or(InvalidJob::Topic)?;
        job::topic_validate(&topic)?;
        let key = self.key.ok_or_else(|| {
            ApiError::InvalidSchedule(
                "key is required: it names the schedule and its occurrences".to_owned(),
            )
        })?;
        job::key_validate(&key)?;
        if key.chars().count() > schedule::SCHEDULE_KEY_MAX_CHARS || key.contains('@') {
            return Err(ApiError::InvalidSchedule(format!(
                "key must be at most {} characters without '@' (each occurrence's key is <key>@<instant>)",
                schedule::SCHEDULE_KEY_MAX_CHARS
            )));
        }
        let headers = self.headers.unwrap_or_default();
        job::headers_validate(&headers)?;
        let (payload, payload_kind) =
            payload_parse(self.payload, self.payload_base64, limits_of(state))?
                .unwrap_or((Vec::new(), PayloadKind::Bytes));
        let policy = PolicyOverrides {
            expects_result: self.expects_result,
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base_ms,
            backoff_cap_ms: self.backoff_cap_ms,
            ack_timeout_ms: self.ack_timeout_ms,
        }
        .over(state.rules.policy_for(&topic));
        policy.validate().map_err(ApiError::InvalidPolicy)?;
        let start_at = match &self.start_at {
            Some(at) => time_parse("start_at", at)?,
            None => now,
        };
        let end_at = self
            .end_at
            .as_deref()
            .map(|at| time_parse("end_at", at))
            .transpose()?;
        Ok(NewSchedule {
            topic,
            key,
            def: ScheduleDef {
                payload,
                payload_kind,
                headers,
                policy,
                cron: self.cron,
                time_zone: self.time_zone,
                every_ms: self.every_ms,
                start_at,
                end_at,
                max_occurrences: self.max_occurrences,
                misfire: self.misfire.unwrap_or(Misfire::FireOnce),
                misfire_grace_ms: self.misfire_grace_ms.unwrap_or(MISFIRE_GRACE_DEFAULT_MS),
                window_ms: self.window_ms.filter(|ms| *ms > 0),
                jitter_ms: self.jitter_ms.filter(|ms| *ms > 0),
            },
            created_by,
        })
    }
}

impl PatchSchedule {
    /// The version read, and the definition after the change.
    fn apply(
        self,
        state: &ApiState,
        current: &ScheduleDef,
    ) -> Result<(u32, ScheduleDef), ApiError> {
        let version = self.version.ok_or_else(|| {
            ApiError::InvalidRequest(
                "version is required: send the version you read, to change nothing you have not seen"
                    .to_owned(),
            )
        })?;
        let mut def = current.clone();
        if let Some(parsed) = payload_parse(self.payload, self.payload_base64, limits_of(state))? {
            (def.payload, def.payload_kind) = parsed;
        }
        if let Some(headers) = self.headers {
            job::headers_validate(&headers)?;
            def.headers = headers;
        }
        match (self.cron, self.every_ms) {
            (Some(_), Some(_)) => return Err(timing_error(InvalidTiming::Both)),
            (Some(cron), None) => {
                def.cron = Some(cron);
                def.every_ms = None;
                def.time_zone = self.time_zone.or(def.time_zone);
            }
            (None, Some(every_ms)) => {
                def.every_ms = Some(every_ms);
                def.cron = None;
                def.time_zone = self.time_zone;
            }
            (None, None) => {
                if self.time_zone.is_some() {
                    def.time_zone = self.time_zone;
                }
            }
        }
        if let Some(at) = &self.start_at {
            def.start_at = time_parse("start_at", at)?;
        }
        if let Some(end) = self.end_at {
            def.end_at = end
                .as_deref()
                .map(|at| time_parse("end_at", at))
                .transpose()?;
        }
        if let Some(max) = self.max_occurrences {
            def.max_occurrences = max;
        }
        if let Some(misfire) = self.misfire {
            def.misfire = misfire;
        }
        if let Some(grace) = self.misfire_grace_ms {
            def.misfire_grace_ms = grace;
        }
        if let Some(ms) = self.window_ms {
            def.window_ms = (ms > 0).then_some(ms);
        }
        if let Some(ms) = self.jitter_ms {
            def.jitter_ms = (ms > 0).then_some(ms);
        }
        def.policy = PolicyOverrides {
            expects_result: self.expects_result,
            max_attempts: self.max_attempts,
            backoff_base_ms: self.backoff_base_ms,
            backoff_cap_ms: self.backoff_cap_ms,
            ack_timeout_ms: self.ack_timeout_ms,
        }
        .over(def.policy);
        def.policy.validate().map_err(ApiError::InvalidPolicy)?;
        if def == *current {
            return Err(ApiError::InvalidRequest(
                "nothing to change: give a field with a new value".to_owned(),
            ));
        }
        Ok((version, def))
    }
}

/// The schedule, if the caller may see its topic (404 otherwise, as if it
/// did not exist).
pub(super) async fn schedule_visible(
    state: &ApiState,
    caller: &Caller,
    id: u64,
) -> Result<ScheduleRow, ApiError> {
    match state.store.schedule_get(id).await {
        Ok(row) if caller.0.topic_allowed(&row.topic) => Ok(row),
        Ok(_) | Err(StoreError::NotFound(_)) => Err(ApiError::ScheduleNotFound(id)),
        Err(err) => Err(err.into()),
    }
}

pub(super) fn id_parse(id: &str) -> Result<u64, ApiError> {
    super::jobs::id_parse(id)
        .map_err(|_| ApiError::InvalidId(format!("schedule id {id:?} is not a positive integer")))
}

/// Creates the occurrences now due to exist (rather than waiting for the
/// materializer's next pass) and indexes them.
async fn materialize_now(state: &ApiState, caller: &Caller, id: u64) {
    let lookahead = std::time::Duration::from_millis(state.config.schedules.lookahead_ms);
    match caller
        .store(state)
        .schedule_materialize(id, lookahead)
        .await
    {
        Ok(done) => materializer::follow(&state.jobs(), &done).await,
        // The materializer's next pass does it.
        Err(err) => tracing::warn!(schedule_id = id, error = %err, "cannot create occurrences now"),
    }
}

/// The schedule as `GET` shows it (the audit log's "before").
pub(super) async fn shown(state: &ApiState, id: &str) -> Option<serde_json::Value> {
    let row = state.store.schedule_get(id.parse().ok()?).await.ok()?;
    serde_json::to_value(view_with_pending(state, row).await.ok()?).ok()
}

async fn view_with_pending(state: &ApiState, row: ScheduleRow) -> Result<ScheduleView, ApiError> {
    let pending = state
        .store
        .schedule_pending(row.id, PENDING_SHOWN)
        .await?
        .into_iter()
        .map(|job| OccurrenceView {
            job_id: job.id,
            key: job.key,
            run_at: time_format(job.schedule_time),
        })
        .collect();
    Ok(ScheduleView::of(row, Some(pending)))
}

/// `POST /v1/schedules` — 201 with the schedule and its first pending
/// occurrence(s). With a key already used on the topic: 200 with the
/// existing schedule when the request is the same, 409 `key_conflict`
/// otherwise.
#[utoipa::path(
    post, path = "/v1/schedules", operation_id = "schedule_create", tag = "schedules",
    request_body = CreateSchedule,
    responses(
        (status = 201, description = "Created", body = ScheduleView),
        (status = 200, description = "A schedule with this topic and key exists and asks for the same", body = ScheduleView),
    )
)]
pub async fn create(
    State(state): State<ApiState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateSchedule>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let now = state.store.db_now().await?;
    let new = body.validate(&state, now, caller.0.actor())?;
    caller.topic(&new.topic)?;
    let next_at = def_check(&new.def, now)?;
    topic_preflight(&state, &new.topic).await?;
    let row = match caller.store(&state).schedule_insert(&new, next_at).await {
        Ok(row) => row,
        Err(StoreError::DuplicateKey) => {
            let existing = state
                .store
                .schedule_find_by_key(&new.topic, &new.key)
                .await?
                .ok_or(ApiError::Internal)?;
            let mut asked = new.def.clone();
            // A retried request without start_at asks for "now", later.
            asked.start_at = existing.def.start_at;
            if existing.def == asked {
                let view = view_with_pending(&state, existing).await?;
                return Ok((StatusCode::OK, Json(view)).into_response());
            }
            return Err(ApiError::ScheduleConflict {
                code: "key_conflict",
                message: format!(
                    "schedule {} has this topic and key, with a different definition",
                    existing.id
                ),
            });
        }
        Err(err) => return Err(err.into()),
    };
    tracing::info!(schedule_id = row.id, topic = %row.topic, "schedule created");
    materialize_now(&state, &caller, row.id).await;
    let row = state.store.schedule_get(row.id).await?;
    Ok((
        StatusCode::CREATED,
        Json(view_with_pending(&state, row).await?),
    )
        .into_response())
}

#[utoipa::path(
    get, path = "/v1/schedules/{id}", operation_id = "schedule_get", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    responses((status = 200, description = "The schedule, with its pending occurrences", body = ScheduleView))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleView>, ApiError> {
    caller.require(Scope::Read)?;
    let row = schedule_visible(&state, &caller, id_parse(&id)?).await?;
    Ok(Json(view_with_pending(&state, row).await?))
}

/// Query of `GET /v1/schedules`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    pub topic: Option<String>,
    /// `active`, `paused` or `ended`.
    pub status: Option<String>,
    /// From the previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    pub limit: Option<u32>,
}

#[utoipa::path(
    get, path = "/v1/schedules", operation_id = "schedules_list", tag = "schedules",
    params(ListQuery),
    responses((status = 200, description = "Schedules by id", body = SchedulePage))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SchedulePage>, ApiError> {
    caller.require(Scope::Read)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    let status = match query.status.as_deref() {
        None => None,
        Some("active") => Some(ScheduleStatus::Active),
        Some("paused") => Some(ScheduleStatus::Paused),
        Some("ended") => Some(ScheduleStatus::Ended),
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "status {other:?} is not one of active, paused, ended"
            )))
        }
    };
    // A topic no job can have is the caller's mistake (and never reaches
    // SQL, where a non-ASCII one is a collation error).
    if let Some(topic) = &query.topic {
        job::topic_validate(topic)?;
    }
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::InvalidRequest(
            "limit must be 1 to 1000".to_owned(),
        ));
    }
    let after = match query.cursor.as_deref() {
        None | Some("") => 0,
        Some(cursor) => cursor.parse::<u64>().map_err(|_| {
            ApiError::InvalidRequest(format!("cursor {cursor:?} is not one this API gave"))
        })?,
    };
    let rows = state
        .store
        .schedule_list(
            query.topic.as_deref(),
            status,
            caller.0.topics.as_deref(),
            after,
            limit,
        )
        .await?;
    let next_cursor = (rows.len() == limit as usize)
        .then(|| rows.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(Json(SchedulePage {
        schedules: rows
            .into_iter()
            .map(|r| ScheduleView::of(r, None))
            .collect(),
        next_cursor,
    }))
}

/// `PATCH /v1/schedules/{id}` — changes a schedule whose version is still
/// the one the caller read. Future occurrences follow the change; pending
/// ones are updated in place, or replaced when the times or bounds change
/// (docs/schedules.md).
#[utoipa::path(
    patch, path = "/v1/schedules/{id}", operation_id = "schedule_modify", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    request_body = PatchSchedule,
    responses((status = 200, description = "Changed", body = ScheduleChanged))
)]
pub async fn patch(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<PatchSchedule>,
) -> Result<Json<ScheduleChanged>, ApiError> {
    caller.require(Scope::Write)?;
    let id = id_parse(&id)?;
    let current = schedule_visible(&state, &caller, id).await?;
    let (version, def) = body.apply(&state, &current.def)?;
    let now = state.store.db_now().await?;
    def_check(&def, now)?;
    match caller
        .store(&state)
        .schedule_update(id, version, &def)
        .await
    {
        Ok(ScheduleUpdate::Applied {
            schedule,
            replaced,
            updated,
        }) => {
            materialize_now(&state, &caller, id).await;
            let row = state.store.schedule_get(schedule.id).await?;
            Ok(Json(ScheduleChanged {
                schedule: view_with_pending(&state, row).await?,
                replaced,
                updated,
            }))
        }
        Ok(ScheduleUpdate::VersionMismatch(row)) => Err(ApiError::ScheduleConflict {
            code: "version_conflict",
            message: format!(
                "schedule {id} is at version {}, not {version}: read it again",
                row.version
            ),
        }),
        Err(StoreError::NotFound(_)) => Err(ApiError::ScheduleNotFound(id)),
        Err(err) => Err(err.into()),
    }
}

async fn pause_or_resume(
    state: ApiState,
    caller: Caller,
    id: String,
    pause: bool,
) -> Result<Json<ScheduleChanged>, ApiError> {
    caller.require(Scope::Write)?;
    let id = id_parse(&id)?;
    schedule_visible(&state, &caller, id).await?;
    let (row, deleted) = caller.store(&state).schedule_pause(id, pause).await?;
    if !pause {
        materialize_now(&state, &caller, id).await;
    }
    let row = if pause {
        row
    } else {
        state.store.schedule_get(row.id).await?
    };
    Ok(Json(ScheduleChanged {
        schedule: view_with_pending(&state, row).await?,
        replaced: deleted,
        updated: 0,
    }))
}

/// `POST /v1/schedules/{id}/pause` — creates nothing more; its pending
/// occurrences not yet due are deleted. Idempotent.
#[utoipa::path(
    post, path = "/v1/schedules/{id}/pause", operation_id = "schedule_pause", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    responses((status = 200, description = "Paused", body = ScheduleChanged))
)]
pub async fn pause(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleChanged>, ApiError> {
    pause_or_resume(state, caller, id, true).await
}

/// `POST /v1/schedules/{id}/resume` — goes on from now: occurrences that
/// fell during the pause are not misfires. Idempotent.
#[utoipa::path(
    post, path = "/v1/schedules/{id}/resume", operation_id = "schedule_resume", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    responses((status = 200, description = "Active again", body = ScheduleChanged))
)]
pub async fn resume(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<ScheduleChanged>, ApiError> {
    pause_or_resume(state, caller, id, false).await
}

/// Query of `DELETE /v1/schedules/{id}`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteQuery {
    /// `cancel` (default): its pending occurrences never run; `keep`: they
    /// run as ordinary jobs.
    pub occurrences: Option<String>,
}

#[utoipa::path(
    delete, path = "/v1/schedules/{id}", operation_id = "schedule_delete", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id"), DeleteQuery),
    responses((status = 200, description = "Deleted", body = ScheduleDeleted))
)]
pub async fn delete(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<DeleteQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ScheduleDeleted>, ApiError> {
    caller.require(Scope::Write)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    let id = id_parse(&id)?;
    let pending = match query.occurrences.as_deref() {
        None | Some("cancel") => PendingOccurrences::Cancel,
        Some("keep") => PendingOccurrences::Keep,
        Some(other) => {
            return Err(ApiError::InvalidRequest(format!(
                "occurrences {other:?} is not one of cancel, keep"
            )))
        }
    };
    schedule_visible(&state, &caller, id).await?;
    let cancelled = match caller.store(&state).schedule_delete(id, pending).await {
        Ok(n) => n,
        Err(StoreError::NotFound(_)) => return Err(ApiError::ScheduleNotFound(id)),
        Err(err) => return Err(err.into()),
    };
    tracing::info!(schedule_id = id, cancelled, "schedule deleted");
    Ok(Json(ScheduleDeleted {
        id,
        occurrences_cancelled: cancelled,
    }))
}

/// `POST /v1/schedules/preview` — the occurrences a timing gives, with the
/// time-zone rules applied; nothing is stored.
#[utoipa::path(
    post, path = "/v1/schedules/preview", operation_id = "schedule_preview", tag = "schedules",
    request_body = PreviewSchedule,
    responses((status = 200, description = "The next occurrences", body = Preview))
)]
pub async fn preview(
    State(state): State<ApiState>,
    caller: Caller,
    ApiJson(body): ApiJson<PreviewSchedule>,
) -> Result<Json<Preview>, ApiError> {
    caller.require(Scope::Read)?;
    let now = state.store.db_now().await?;
    let start_at = body
        .start_at
        .as_deref()
        .map(|at| time_parse("start_at", at))
        .transpose()?
        .unwrap_or(now);
    let end_at = body
        .end_at
        .as_deref()
        .map(|at| time_parse("end_at", at))
        .transpose()?;
    let after = body
        .after
        .as_deref()
        .map(|at| time_parse("after", at))
        .transpose()?
        .unwrap_or(now);
    let count = body.count.unwrap_or(10);
    if !(1..=100).contains(&count) {
        return Err(ApiError::InvalidRequest(
            "count must be 1 to 100".to_owned(),
        ));
    }
    let timing = Timing::from_parts(
        body.cron.as_deref(),
        body.time_zone.as_deref(),
        body.every_ms,
        start_at,
    )
    .map_err(timing_error)?;
    let from = after.max(start_at - Duration::milliseconds(1));
    let occurrences: Vec<DateTime<Utc>> = timing
        .preview(from, count)
        .into_iter()
        .filter(|at| end_at.is_none_or(|end| *at <= end))
        .collect();
    let local = match &timing {
        Timing::Cron { zone, .. } => occurrences
            .iter()
            .map(|at| {
                at.with_timezone(zone)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
            })
            .collect(),
        Timing::Every { .. } => Vec::new(),
    };
    Ok(Json(Preview {
        occurrences: occurrences.into_iter().map(time_format).collect(),
        local,
    }))
}

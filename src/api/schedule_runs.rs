//! `POST /v1/schedules/{id}/trigger` (one more occurrence, now) and
//! `POST /v1/schedules/{id}/backfill` (the missing nominal occurrences of
//! a past interval): occurrences a person asks for (docs/schedules.md,
//! "Run now, and backfill"). The work is the occurrences service's
//! ([`crate::roles::occurrences`]); this parses, checks and words it.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::jobs::{limits_of, schedule_parse, topic_preflight};
use super::schedules::{id_parse, schedule_visible};
use super::view::JobView;
use super::{ApiError, ApiState};
use crate::domain::fires::TooMany;
use crate::domain::job::{self, time_format, Schedule};
use crate::roles::auth::Scope;
use crate::roles::occurrences::{self, BackfillRefused, Triggered};

/// Instants an answer of a backfill lists.
pub const BACKFILL_SHOWN: usize = 100;

/// Body of `POST /v1/schedules/{id}/trigger`; all optional.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TriggerSchedule {
    /// The job's key, which makes the trigger idempotent: sent again, the
    /// same job is answered (200). Not of an occurrence's form
    /// (`…@<instant>`). Default: a fresh `<schedule key>@trigger-<hex>`.
    pub key: Option<String>,
    /// When it runs, RFC 3339 (default: now).
    pub run_at: Option<String>,
    /// Or after this many milliseconds.
    pub delay_ms: Option<i64>,
}

/// Body of `POST /v1/schedules/{id}/backfill`.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillSchedule {
    /// Start, RFC 3339, inclusive.
    pub from: Option<String>,
    /// End, RFC 3339, exclusive; not after now.
    pub to: Option<String>,
    /// `true` (the default): say what would be created, create nothing.
    pub dry_run: Option<bool>,
}

/// Answer of `POST /v1/schedules/{id}/backfill`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BackfillAnswer {
    pub schedule_id: u64,
    pub from: String,
    pub to: String,
    /// Whether nothing was written (a preview).
    pub dry_run: bool,
    /// Occurrences the timing gives in the interval.
    pub expected: usize,
    /// Occurrences created (with `dry_run`: that would be).
    pub created: usize,
    /// Occurrences whose job exists already (any status): left alone.
    pub existing: usize,
    /// The first 100 instants of `created`, in order.
    pub preview: Vec<String>,
}

/// An optional JSON body: empty (or blank) is `T::default()`.
fn body_optional<T: DeserializeOwned + Default>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let body = body?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&body).map_err(|err| {
        if err.is_data() {
            ApiError::InvalidRequest(err.to_string())
        } else {
            ApiError::InvalidJson(err.to_string())
        }
    })
}

/// `POST /v1/schedules/{id}/trigger` — one more occurrence of the
/// schedule, now (or at `run_at` / after `delay_ms`): its topic, payload,
/// headers and policy, its own key. A paused schedule is triggered too (a
/// person asked); its pause, or a change of its times, leaves the job
/// alone; deleting the schedule cancels it with its other pending
/// occurrences. Needs `write` and the schedule's topic.
#[utoipa::path(
    post, path = "/v1/schedules/{id}/trigger", operation_id = "schedule_trigger", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    request_body(content = Option<TriggerSchedule>, description = "All optional; an empty body runs it now under a fresh key"),
    responses(
        (status = 201, description = "The occurrence created: a job", body = JobView),
        (status = 200, description = "The schedule's job with this key exists: returned as it is", body = JobView),
    )
)]
pub async fn trigger(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let id = id_parse(&id)?;
    let body: TriggerSchedule = body_optional(body)?;
    if let Some(key) = &body.key {
        job::key_validate_unreserved(key)?;
    }
    let at = schedule_parse(
        body.run_at,
        body.delay_ms,
        limits_of(&state),
        state.index.clock().now(),
    )?
    .unwrap_or(Schedule::After { delay_ms: 0 });
    let row = schedule_visible(&state, &caller, id).await?;
    topic_preflight(&state, &row.topic).await?;
    caller.jobs_admit(&state, 1).await?;
    let jobs = caller.jobs_creating(&state, std::iter::once(row.topic.as_str()));
    match occurrences::trigger(&jobs, &row, body.key, at).await? {
        Triggered::Created(job) => {
            Ok((StatusCode::CREATED, Json(JobView::from(job))).into_response())
        }
        Triggered::Existing(job) => Ok((StatusCode::OK, Json(JobView::from(job))).into_response()),
        Triggered::Taken(job) => Err(ApiError::KeyConflict {
            existing_id: job.id,
        }),
    }
}

/// The interval of a backfill: both ends given, in order, and `to` not
/// after `now`.
fn interval(
    body: &BackfillSchedule,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
    let parse = |name: &str, value: &Option<String>| {
        let text = value
            .as_deref()
            .ok_or_else(|| ApiError::InvalidInterval(format!("{name} is required (RFC 3339)")))?;
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|at| at.with_timezone(&Utc))
            .filter(|at| job::time_in_range(*at))
            .map(job::truncate_to_ms)
            .ok_or_else(|| {
                ApiError::InvalidInterval(format!(
                    "{name} {text:?} is not an RFC 3339 time from 1970 to 9999, e.g. 2027-03-01T00:00:00Z"
                ))
            })
    };
    let (from, to) = (parse("from", &body.from)?, parse("to", &body.to)?);
    if to <= from {
        return Err(ApiError::InvalidInterval(format!(
            "to {} is not after from {}",
            time_format(to),
            time_format(from)
        )));
    }
    if to > now {
        return Err(ApiError::InvalidInterval(format!(
            "to {} is after now ({}): a backfill fills the past; the schedule creates what is to come",
            time_format(to),
            time_format(now)
        )));
    }
    Ok((from, to))
}

/// `POST /v1/schedules/{id}/backfill` — the schedule's nominal occurrences
/// in [from, to) that have no job, created as the materializer would have
/// (the same keys: one that exists, in any status, is left alone), due at
/// once. `dry_run` (the default) only counts them. At most 10,000
/// occurrences in the interval. Needs `write` and the schedule's topic.
#[utoipa::path(
    post, path = "/v1/schedules/{id}/backfill", operation_id = "schedule_backfill", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id")),
    request_body = BackfillSchedule,
    responses((status = 200, description = "What was (or, with dry_run, would be) created, and what exists", body = BackfillAnswer))
)]
pub async fn backfill(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<BackfillAnswer>, ApiError> {
    caller.require(Scope::Write)?;
    let id = id_parse(&id)?;
    let body: BackfillSchedule = body_optional(body)?;
    let dry_run = body.dry_run.unwrap_or(true);
    let now = state.store.db_now().await?;
    let (from, to) = interval(&body, now)?;
    let row = schedule_visible(&state, &caller, id).await?;
    let plan = occurrences::backfill_plan(&state.store, &row, from, to)
        .await
        .map_err(|err| match err {
            BackfillRefused::TooMany(TooMany { max }) => ApiError::InvalidInterval(format!(
                "schedule {id} has more than {max} occurrences from {} to {}: ask for a shorter interval",
                time_format(from),
                time_format(to)
            )),
            BackfillRefused::Timing(err) => {
                tracing::warn!(schedule_id = id, error = %err, "a schedule's timing does not read");
                ApiError::Unreadable(format!("schedule {id}: {err}"))
            }
            BackfillRefused::Store(err) => err.into(),
        })?;
    let missing = plan.missing();
    let mut existing = plan.existing.len();
    let created = if dry_run || missing.is_empty() {
        missing
    } else {
        topic_preflight(&state, &row.topic).await?;
        caller.jobs_admit(&state, missing.len()).await?;
        let jobs = caller.jobs_creating(&state, std::iter::once(row.topic.as_str()));
        let done = occurrences::backfill_apply(&jobs, &row, &missing).await?;
        existing += done.existing;
        done.created
    };
    Ok(Json(BackfillAnswer {
        schedule_id: id,
        from: time_format(from),
        to: time_format(to),
        dry_run,
        expected: plan.expected.len(),
        created: created.len(),
        existing,
        preview: created
            .iter()
            .take(BACKFILL_SHOWN)
            .map(|at| time_format(*at))
            .collect(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(from: Option<&str>, to: Option<&str>) -> BackfillSchedule {
        BackfillSchedule {
            from: from.map(str::to_owned),
            to: to.map(str::to_owned),
            dry_run: None,
        }
    }

    fn code(result: Result<(DateTime<Utc>, DateTime<Utc>), ApiError>) -> &'static str {
        result.map(|_| "ok").unwrap_or_else(|err| err.code())
    }

    #[test]
    fn a_backfill_interval_is_given_in_order_and_in_the_past() {
        let now = DateTime::parse_from_rfc3339("2027-03-08T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let (from, to) = interval(
            &body(Some("2027-03-01T00:00:00Z"), Some("2027-03-08T12:00:00Z")),
            now,
        )
        .unwrap();
        assert_eq!(time_format(from), "2027-03-01T00:00:00.000Z");
        assert_eq!(time_format(to), "2027-03-08T12:00:00.000Z");
        for (from, to) in [
            (None, Some("2027-03-02T00:00:00Z")),
            (Some("2027-03-01T00:00:00Z"), None),
            (Some("yesterday"), Some("2027-03-02T00:00:00Z")),
            (Some("2027-03-02T00:00:00Z"), Some("2027-03-02T00:00:00Z")),
            (Some("2027-03-02T00:00:00Z"), Some("2027-03-01T00:00:00Z")),
            (
                Some("2027-03-01T00:00:00Z"),
                Some("2027-03-08T12:00:00.001Z"),
            ),
        ] {
            assert_eq!(
                code(interval(&body(from, to), now)),
                "invalid_interval",
                "{from:?} {to:?}"
            );
        }
    }
}

//! `POST /v1/jobs/{id}/result` — a consumer's report, with the semantics of
//! the results topic — and `POST /v1/jobs/{id}/redrive`, which sends a dead
//! job back to pending.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use tracing::Instrument;

use super::auth::Caller;
use super::error::Conflict;
use super::jobs::{limits_of, schedule_parse};
use super::view::JobView;
use super::{ApiError, ApiJson, ApiState, JobIdPath};
use crate::domain::outcome::{Ignored, ReportBody};
use crate::domain::policy::ATTEMPTS_MAX;
use crate::roles::auth::Scope;
use crate::roles::resolver::CHANNEL_HTTP;
use crate::store::{Disposition, Redriven};

/// 200 `{"applied": true, "job"}` when the report moved the job;
/// 200 `{"applied": false, "ignored": reason, "message", "job"}` when it
/// changed nothing (stale attempt, repeated, not expected...) — the same
/// report on the results topic would be skipped and counted; 404 when there
/// is no such job; 400 `invalid_report` for a malformed body.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/result", operation_id = "job_result_report", tag = "results",
    params(("id" = u64, Path, description = "The job's id")),
    request_body = crate::domain::outcome::ReportBody,
    responses((status = 200, description = "Applied, or ignored with the reason", body = ReportAnswer))
)]
pub async fn report(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    ApiJson(body): ApiJson<ReportBody>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Results)?;
    let report = body.check(Some(id)).map_err(ApiError::InvalidReport)?;
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    let span = if crate::telemetry::enabled() {
        tracing::info_span!(
            "job.result",
            otel.kind = "server",
            job.id = id,
            job.topic = %job.topic,
            job.attempt = report.attempt,
        )
    } else {
        tracing::Span::none()
    };
    crate::telemetry::parent_set(&span, job.trace_parent.as_deref());
    let settled = caller
        .resolver(&state)
        .reports_apply(std::slice::from_ref(&report), CHANNEL_HTTP)
        .instrument(span)
        .await?;
    let disposition = settled
        .dispositions
        .first()
        .copied()
        .ok_or(ApiError::Internal)?;
    if disposition == Disposition::Ignored(Ignored::UnknownJob) {
        return Err(ApiError::NotFound(id));
    }
    let job = state.store.job_get(id).await?;
    let body = match disposition {
        Disposition::Applied(_) => ReportAnswer {
            applied: true,
            ignored: None,
            message: None,
            job: JobView::from(job),
        },
        Disposition::Ignored(why) => {
            let message = match why {
                Ignored::StaleAttempt => format!(
                    "job {id} is at attempt {}, not {}: this report is late or repeated",
                    job.attempt, report.attempt
                ),
                Ignored::Finished => format!("job {id} is {} already", job.status),
                Ignored::NotExpected => format!(
                    "job {id} does not expect a result (expects_result is false): it finished when dispatched"
                ),
                Ignored::NotDispatched => format!(
                    "job {id} attempt {} has not been produced yet",
                    job.attempt
                ),
                Ignored::UnknownJob => format!("job {id} not found"),
            };
            ReportAnswer {
                applied: false,
                ignored: Some(why.as_str()),
                message: Some(message),
                job: JobView::from(job),
            }
        }
    };
    Ok((StatusCode::OK, Json(body)).into_response())
}

/// Answer of `POST /v1/jobs/{id}/result`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ReportAnswer {
    /// Whether the report changed the job.
    pub applied: bool,
    /// Why not: `stale_attempt`, `finished`, `not_expected`,
    /// `not_dispatched`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ignored: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub job: JobView,
}

/// Body of `POST /v1/jobs/{id}/redrive`; all optional.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveJob {
    /// Attempts the job gets from now; default: its topic's `max_attempts`.
    pub max_attempts: Option<u32>,
    pub run_at: Option<String>,
    pub delay_ms: Option<i64>,
}

/// `POST /v1/jobs/{id}/redrive` — a dead job back to `pending` (now, or at
/// `run_at` / after `delay_ms`) with a fresh budget of attempts; its attempt
/// number goes on counting. 200 with the job; 409 `not_dead` with the job
/// when it is not dead.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/redrive", operation_id = "job_redrive", tag = "results",
    params(("id" = u64, Path, description = "The job's id")),
    request_body(content = Option<RedriveJob>, description = "All optional; an empty body redrives now with the topic's max_attempts"),
    responses((status = 200, description = "Pending again", body = JobView))
)]
pub async fn redrive(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Admin)?;
    let body = body?;
    let request: RedriveJob = if body.iter().all(u8::is_ascii_whitespace) {
        RedriveJob::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| {
            if err.is_data() {
                ApiError::InvalidRequest(err.to_string())
            } else {
                ApiError::InvalidJson(err.to_string())
            }
        })?
    };
    let schedule = schedule_parse(
        request.run_at,
        request.delay_ms,
        limits_of(&state),
        state.index.clock().now(),
    )?;
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    let attempts = request
        .max_attempts
        .unwrap_or_else(|| state.rules.policy_for(&job.topic).max_attempts);
    if !(1..=ATTEMPTS_MAX).contains(&attempts) {
        return Err(ApiError::InvalidPolicy(format!(
            "max_attempts must be between 1 and {ATTEMPTS_MAX}"
        )));
    }
    match caller.jobs(&state).redrive(id, attempts, schedule).await? {
        Redriven::Applied(job, _) => Ok(Json(JobView::from(job)).into_response()),
        Redriven::NotDead(job) => Err(ApiError::Conflict {
            conflict: Conflict::NotDead,
            message: format!("job {id} is {}: only dead jobs can be redriven", job.status),
            job: Box::new(job.into()),
        }),
    }
}

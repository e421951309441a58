//! `POST /v1/jobs/{id}/release` — lets a held job go: one whose payload no
//! longer matched its topic's payload schema when it came due, which the
//! dispatcher held back (pending, not sent) instead of producing broken.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use super::auth::Caller;
use super::error::Conflict;
use super::view::JobView;
use super::{ApiError, ApiState, JobIdPath};
use crate::domain::job::Status;
use crate::roles::auth::Scope;
use crate::store::HoldReleased;

/// Body of `POST /v1/jobs/{id}/release`; optional.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseJob {
    /// Release without checking the payload against the topic's schema:
    /// this attempt is sent as it is (needs the `admin` scope). Default
    /// false: the payload must match the schema in force now.
    #[serde(default)]
    pub force: bool,
}

/// `POST /v1/jobs/{id}/release` — a held job is due again: at once, or at
/// its `run_at` if that is later. Its payload is checked against its
/// topic's current schema first (still failing: 409 `payload_schema` with
/// the job); `{"force": true}` skips the check, and the dispatcher sends
/// this attempt unchecked. 409 `not_held` with the job when it is not held.
#[utoipa::path(
    post, path = "/v1/jobs/{id}/release", operation_id = "job_release", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    request_body(content = Option<ReleaseJob>, description = "Optional; an empty body releases after checking the payload"),
    responses((status = 200, description = "Released: due again", body = JobView))
)]
pub async fn release(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    caller.require(Scope::Write)?;
    let body = body?;
    let request: ReleaseJob = if body.iter().all(u8::is_ascii_whitespace) {
        ReleaseJob::default()
    } else {
        serde_json::from_slice(&body).map_err(|err| {
            if err.is_data() {
                ApiError::InvalidRequest(err.to_string())
            } else {
                ApiError::InvalidJson(err.to_string())
            }
        })?
    };
    if request.force {
        caller.require(Scope::Admin)?;
    }
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    if job.status != Status::Pending || job.held_at.is_none() {
        return Err(not_held(job));
    }
    if !request.force {
        if let Err(mismatch) =
            state
                .controls
                .payload_check(&job.topic, job.payload_kind, &job.payload)
        {
            return Err(ApiError::Conflict {
                conflict: Conflict::PayloadSchema,
                message: format!(
                    "job {id}'s payload still does not match its topic's payload_schema: {mismatch}; \
                     change the payload (PATCH) or the schema, or release with force"
                ),
                job: Box::new(job.into()),
            });
        }
    }
    match caller
        .jobs(&state)
        .release_held(id, job.version, request.force)
        .await?
    {
        HoldReleased::Applied(job, _) => Ok(Json(JobView::from(job)).into_response()),
        HoldReleased::NotHeld(job) => Err(not_held(job)),
        // Its payload changed since it was checked: checked again.
        HoldReleased::VersionMismatch(job) => Err(ApiError::Conflict {
            conflict: Conflict::Version,
            message: format!(
                "job {id} changed while being released (now at version {}): try again",
                job.version
            ),
            job: Box::new(job.into()),
        }),
    }
}

fn not_held(job: crate::domain::job::Job) -> ApiError {
    ApiError::Conflict {
        conflict: Conflict::NotHeld,
        message: format!(
            "job {} is {} and not held: only held jobs are released",
            job.id, job.status
        ),
        job: Box::new(job.into()),
    }
}

/// Refuses what only builds that know holds honour — a payload schema, a
/// bulk operation that filters on holds or releases them — while a live
/// instance is of a build before them (`instances.version`): it would send
/// held jobs as they are, or take over the operation and read past a
/// filter it does not know (it ignores the field: a held-only cancel would
/// cancel every pending job of the topic). `what` names it in the message.
pub(super) async fn older_instances_refuse(state: &ApiState, what: &str) -> Result<(), ApiError> {
    let older: Vec<_> = state
        .store
        .instances_list(state.config.instance_ttl())
        .await?
        .into_iter()
        .filter(|row| {
            row.live && crate::store::built_for(&row.version) < crate::store::HOLDS_SCHEMA
        })
        .collect();
    if older.is_empty() {
        return Ok(());
    }
    Err(ApiError::OlderInstances(format!(
        "{what} needs every live instance on a build that knows held jobs; these are older \
         and would send held jobs as they are or misread it: {} (upgrade them, then ask again)",
        crate::store::instances_describe(&older)
    )))
}

//! Reading many jobs: `GET /v1/jobs` (filtered, paged) and a job's history.

use axum::extract::{Query, State};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as CURSOR;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::view::JobView;
use super::{ApiError, ApiState, JobIdPath};
use crate::domain::job::time_format;
use crate::domain::job::{self, JobId, Status};
use crate::roles::auth::Scope;
use crate::store::JobFilter;

const LIST_DEFAULT: u32 = 100;
const LIST_MAX: u32 = 1000;

/// Query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    pub topic: Option<String>,
    pub status: Option<String>,
    pub key: Option<String>,
    /// Jobs due at or after this time (RFC 3339).
    pub run_at_from: Option<String>,
    /// Jobs due before this time (RFC 3339).
    pub run_at_to: Option<String>,
    /// Only dispatched jobs this consumer group has not read yet (of the
    /// topics it is followed on).
    pub unconsumed_by: Option<String>,
    /// `true`: only jobs held back because their payload no longer matched
    /// their topic's schema; `false`: only jobs not held.
    pub held: Option<bool>,
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A consumer group's id as a filter: 1 to 255 bytes, no control
/// characters (what Kafka takes).
fn group_parse(group: Option<String>) -> Result<Option<String>, ApiError> {
    match group {
        Some(group)
            if group.is_empty() || group.len() > 255 || group.chars().any(char::is_control) =>
        {
            Err(ApiError::InvalidRequest(
                "unconsumed_by must be a consumer group id: 1 to 255 bytes, no control characters"
                    .to_owned(),
            ))
        }
        group => Ok(group),
    }
}

/// A time filter: RFC 3339, and inside the range a job's time can have
/// (a time that is a negative year in UTC cannot even be sent to SQL).
pub(super) fn time_parse(
    name: &str,
    value: Option<String>,
) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .map(|text| {
            let at = DateTime::parse_from_rfc3339(&text)
                .map(|at| at.with_timezone(&Utc))
                .map_err(|err| {
                    ApiError::InvalidRequest(format!(
                        "{name} {text:?} is not an RFC 3339 time ({err})"
                    ))
                })?;
            if !job::time_in_range(at) {
                return Err(ApiError::InvalidRequest(format!(
                    "{name} {text:?} is outside 1970-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z"
                )));
            }
            Ok(at)
        })
        .transpose()
}

/// A page of `GET /v1/jobs`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobPage {
    pub jobs: Vec<JobView>,
    /// Pass back as `cursor` for the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// A job's history.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct History {
    pub job_id: JobId,
    pub events: Vec<HistoryEvent>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HistoryEvent {
    pub at: String,
    /// `api:NAME`, `dispatcher`, `reconciler`, `results`, `bulk:ID`, or
    /// `sql` for changes made by hand.
    pub actor: String,
    pub status: &'static str,
    pub run_at: String,
    pub attempt: u32,
    /// A retarget's: the topic the change moved the job from, and to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic_to: Option<String>,
}

/// A status filter, checked.
pub(super) fn status_parse(name: &str, value: Option<String>) -> Result<Option<Status>, ApiError> {
    value
        .map(|s| {
            s.parse::<Status>().map_err(|_| {
                let all: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
                ApiError::InvalidRequest(format!("{name} {s:?} is not one of {}", all.join(", ")))
            })
        })
        .transpose()
}

fn cursor_encode(after: JobId) -> String {
    CURSOR.encode(format!("id:{after}"))
}

fn cursor_decode(cursor: &str) -> Result<JobId, ApiError> {
    CURSOR
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| text.strip_prefix("id:").and_then(|id| id.parse().ok()))
        .ok_or_else(|| ApiError::InvalidRequest("cursor is not one this API gave out".to_owned()))
}

/// `GET /v1/jobs` — jobs by id, without payloads, a page at a time.
/// `next_cursor` is null on the last page. Paging by id stays correct while
/// rows change: no job is shown twice or skipped.
#[utoipa::path(
    get, path = "/v1/jobs", operation_id = "jobs_list", tag = "jobs",
    params(ListQuery),
    responses((status = 200, description = "A page of jobs by id, without payloads", body = JobPage))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<JobPage>, ApiError> {
    caller.require(Scope::Read)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    let status = status_parse("status", query.status)?;
    // Filters follow the rules of what they match, so a value no job can
    // have is the caller's mistake (and never reaches SQL).
    if let Some(topic) = &query.topic {
        job::topic_validate(topic)?;
        caller.topic(topic)?;
    }
    if let Some(key) = &query.key {
        job::key_validate(key)?;
    }
    let filter = JobFilter {
        topic: query.topic,
        status,
        key: query.key,
        run_at_from: time_parse("run_at_from", query.run_at_from)?,
        run_at_to: time_parse("run_at_to", query.run_at_to)?,
        // A token sees only its own topics' jobs.
        topic_patterns: caller.0.topics.clone(),
        unconsumed_by: group_parse(query.unconsumed_by)?,
        held: query.held,
    };
    let limit = query.limit.unwrap_or(LIST_DEFAULT);
    if !(1..=LIST_MAX).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1 to {LIST_MAX}"
        )));
    }
    let after = query.cursor.as_deref().map(cursor_decode).transpose()?;
    let jobs = state.store.job_list(&filter, after, limit).await?;
    let next_cursor = (jobs.len() == limit as usize)
        .then(|| jobs.last().map(|job| cursor_encode(job.id)))
        .flatten();
    let jobs: Vec<JobView> = jobs.into_iter().map(JobView::without_payload).collect();
    Ok(Json(JobPage { jobs, next_cursor }))
}

/// `GET /v1/jobs/{id}/history` — every change of state, time, attempt or
/// topic, oldest first, with who made it: `api`, `dispatcher`,
/// `reconciler`, `results`, or `sql` for changes made by hand.
#[utoipa::path(
    get, path = "/v1/jobs/{id}/history", operation_id = "job_history", tag = "jobs",
    params(("id" = u64, Path, description = "The job's id")),
    responses((status = 200, description = "Every change of state, time or attempt, oldest first", body = History))
)]
pub async fn history(
    State(state): State<ApiState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
) -> Result<Json<History>, ApiError> {
    caller.require(Scope::Read)?;
    let job = state.store.job_get(id).await?;
    caller.topic(&job.topic)?;
    let events = state.store.job_history(id).await?;
    let events = events
        .into_iter()
        .map(|e| {
            let (topic_from, topic_to) = e.topics.unzip();
            HistoryEvent {
                at: time_format(e.at),
                actor: e.actor,
                status: e.status.as_str(),
                run_at: time_format(e.schedule_time),
                attempt: e.attempt,
                topic_from,
                topic_to,
            }
        })
        .collect();
    Ok(Json(History { job_id: id, events }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        assert_eq!(cursor_decode(&cursor_encode(12345)).unwrap(), 12345);
        assert_eq!(
            cursor_decode("garbage!").unwrap_err().code(),
            "invalid_request"
        );
        assert_eq!(
            cursor_decode(&CURSOR.encode("id:x")).unwrap_err().code(),
            "invalid_request"
        );
    }
}

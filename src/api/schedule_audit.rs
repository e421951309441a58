//! `GET /v1/schedules/{id}/audit`: every occurrence a schedule's timing
//! expected in an interval, beside what became of it — produced (where),
//! paused, skipped by its misfire policy, cancelled, expired, or missing
//! (docs/schedules.md, "Did it fire? The audit"). Reads only.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::schedules::{id_parse, schedule_visible};
use super::view::ConsumedView;
use super::{ApiError, ApiState};
use crate::domain::fires::{self, Fire, FireOutcome, TooMany, FIRES_MAX};
use crate::domain::job::{self, time_format, JobId, Status};
use crate::roles::auth::Scope;
use crate::store::ScheduleFires;

/// The interval when `from` is not given: this many days before `to`.
pub const DEFAULT_DAYS: i64 = 7;

/// Query of `GET /v1/schedules/{id}/audit`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Start, RFC 3339, inclusive (default: 7 days before `to`).
    pub from: Option<String>,
    /// End, RFC 3339, exclusive (default: now, the database's clock).
    pub to: Option<String>,
}

/// One occurrence expected, and what became of it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FireView {
    /// The occurrence's instant (its job key's `@…`).
    pub expected_at: String,
    pub outcome: FireOutcome,
    /// Its job, when it exists.
    pub job_id: Option<JobId>,
    pub status: Option<Status>,
    /// When its job runs or ran (jitter, a window, a `fire_once` misfire
    /// or a retry move it from `expected_at`).
    pub run_at: Option<String>,
    /// Where and when its record went, once produced.
    pub dispatched_at: Option<String>,
    pub partition: Option<i32>,
    pub offset: Option<i64>,
    /// When its record was read back at that position and found there
    /// (`dispatcher.verify`).
    pub verified_at: Option<String>,
    /// When each consumer group that reads its partition read past its
    /// record (`at` null: not yet); for the first 1,000 produced
    /// occurrences of an answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub consumed: Vec<ConsumedView>,
}

impl From<Fire> for FireView {
    fn from(fire: Fire) -> FireView {
        let job = fire.job;
        let dispatched = job.filter(|job| job.dispatched_at.is_some());
        FireView {
            expected_at: time_format(fire.expected_at),
            outcome: fire.outcome,
            job_id: job.map(|job| job.id),
            status: job.map(|job| job.status),
            run_at: job.map(|job| time_format(job.run_at)),
            dispatched_at: dispatched.and_then(|job| job.dispatched_at.map(time_format)),
            partition: dispatched.and_then(|job| job.partition),
            offset: dispatched.and_then(|job| job.offset),
            verified_at: dispatched.and_then(|job| job.verified_at.map(time_format)),
            consumed: Vec::new(),
        }
    }
}

/// Answer of `GET /v1/schedules/{id}/audit`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ScheduleAudit {
    pub schedule_id: u64,
    pub from: String,
    pub to: String,
    /// The database's clock when it was read: an occurrence after it is
    /// `upcoming`, one before it without a job and without a reason
    /// `missing`.
    pub at: String,
    /// Occurrences the timing expected in the interval.
    pub expected: usize,
    /// Of those, `produced`.
    pub fired: usize,
    /// Of those, `missing`.
    pub missing: usize,
    /// In order of `expected_at`.
    pub occurrences: Vec<FireView>,
}

impl ScheduleAudit {
    fn of(id: u64, from: DateTime<Utc>, to: DateTime<Utc>, audited: ScheduleFires) -> Self {
        let count = |outcome| {
            audited
                .fires
                .iter()
                .filter(|fire| fire.outcome == outcome)
                .count()
        };
        ScheduleAudit {
            schedule_id: id,
            from: time_format(from),
            to: time_format(to),
            at: time_format(audited.at),
            expected: audited.fires.len(),
            fired: count(FireOutcome::Produced),
            missing: count(FireOutcome::Missing),
            occurrences: audited.fires.into_iter().map(FireView::from).collect(),
        }
    }
}

/// The interval asked, `now` filling what is not given: [from, to).
fn interval(
    query: &AuditQuery,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, DateTime<Utc>), ApiError> {
    let parse = |name: &str, value: &Option<String>| {
        value
            .as_deref()
            .map(|text| {
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
            })
            .transpose()
    };
    let to = parse("to", &query.to)?.unwrap_or(job::truncate_to_ms(now));
    let from = match parse("from", &query.from)? {
        Some(from) => from,
        None => to - Duration::days(DEFAULT_DAYS),
    };
    if to <= from {
        return Err(ApiError::InvalidInterval(format!(
            "to {} is not after from {}",
            time_format(to),
            time_format(from)
        )));
    }
    Ok((from, to))
}

/// `GET /v1/schedules/{id}/audit` — each occurrence the schedule's timing
/// expected in [from, to), in order, with its job and outcome. Needs
/// `read`, and the schedule's topic among the token's.
#[utoipa::path(
    get, path = "/v1/schedules/{id}/audit", operation_id = "schedule_audit", tag = "schedules",
    params(("id" = u64, Path, description = "The schedule's id"), AuditQuery),
    responses((status = 200, description = "Each occurrence expected in the interval, and what became of it", body = ScheduleAudit))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<ScheduleAudit>, ApiError> {
    caller.require(Scope::Read)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    let id = id_parse(&id)?;
    let now = state.store.db_now().await?;
    let (from, to) = interval(&query, now)?;
    let row = schedule_visible(&state, &caller, id).await?;
    let timing = row.def.timing().map_err(|err| {
        tracing::warn!(schedule_id = id, error = %err, "a schedule's timing does not read");
        ApiError::Unreadable(format!("schedule {id}: {err}"))
    })?;
    let expected = fires::expected(&timing, &row.fires_span(from, to), FIRES_MAX).map_err(
        |TooMany { max }| {
            ApiError::InvalidInterval(format!(
                "schedule {id} has more than {max} occurrences from {} to {}: ask for a shorter interval",
                time_format(from),
                time_format(to)
            ))
        },
    )?;
    let audited = state.store.schedule_fires(&row, &expected).await?;
    let positions: Vec<Option<(i32, i64, DateTime<Utc>)>> = audited
        .fires
        .iter()
        .map(|fire| {
            let job = fire.job?;
            Some((job.partition?, job.offset?, job.dispatched_at?))
        })
        .collect();
    let mut audit = ScheduleAudit::of(id, from, to, audited);
    let followed = state
        .config
        .topics
        .get(&row.topic)
        .and_then(|topic| topic.consumer_groups.clone())
        .unwrap_or_default();
    let produced = audit.occurrences.iter_mut().zip(positions);
    for (view, (partition, offset, at)) in produced
        .filter_map(|(view, position)| Some((view, position?)))
        .take(CONSUMED_MAX)
    {
        let consumed = state
            .store
            .position_consumed(&row.topic, partition, offset, at, &followed)
            .await?;
        view.consumed = consumed.into_iter().map(ConsumedView::from).collect();
    }
    Ok(Json(audit))
}

/// Most occurrences of one answer whose consumption is looked up (two
/// statements each).
const CONSUMED_MAX: usize = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    fn query(from: Option<&str>, to: Option<&str>) -> AuditQuery {
        AuditQuery {
            from: from.map(str::to_owned),
            to: to.map(str::to_owned),
        }
    }

    fn code(result: Result<(DateTime<Utc>, DateTime<Utc>), ApiError>) -> &'static str {
        result.map(|_| "ok").unwrap_or_else(|err| err.code())
    }

    #[test]
    fn the_interval_defaults_to_the_last_week_and_refuses_what_is_not_one() {
        let now = DateTime::parse_from_rfc3339("2027-03-08T12:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let (from, to) = interval(&query(None, None), now).unwrap();
        assert_eq!(time_format(to), "2027-03-08T12:00:00.123Z");
        assert_eq!(time_format(from), "2027-03-01T12:00:00.123Z");
        let (from, _) = interval(&query(None, Some("2027-02-08T00:00:00Z")), now).unwrap();
        assert_eq!(time_format(from), "2027-02-01T00:00:00.000Z");
        for (from, to) in [
            (Some("yesterday"), None),
            (Some(""), None),
            (None, Some("2027-03-08")),
            (Some("2027-03-08T00:00:00Z"), Some("2027-03-08T00:00:00Z")),
            (Some("2027-03-08T00:00:00Z"), Some("2027-03-07T00:00:00Z")),
        ] {
            assert_eq!(
                code(interval(&query(from, to), now)),
                "invalid_interval",
                "{from:?} {to:?}"
            );
        }
    }
}

//! Bulk changes: `POST /v1/jobs/bulk` previews (`dry_run`) or starts an
//! operation over every job a filter matches; `GET /v1/bulk/{id}` follows
//! it. The bulk runner (`crate::roles::bulk`) works through an operation in
//! bounded batches, each its own transaction, and takes over operations
//! whose instance stopped moving them.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::jobs::topic_preflight;
use super::query::{status_parse, time_parse};
use super::view::JobView;
use super::{ApiError, ApiJson, ApiState};
use crate::config::Config;
use crate::domain::job::time_format;
use crate::domain::job::{self, JobId, Status};
use crate::domain::policy::{Policy, PolicyOverrides, ATTEMPTS_MAX, DELAY_MAX_MS};
use crate::roles::auth::Scope;
use crate::store::{BulkAction, BulkFilter, BulkOp};

/// Most ids a filter may list.
const IDS_MAX: usize = 1_000;
/// Jobs a preview shows.
const SAMPLE: u32 = 20;

/// The filter as a request gives it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FilterBody {
    pub topic: Option<String>,
    pub status: Option<String>,
    pub key_prefix: Option<String>,
    pub run_at_from: Option<String>,
    pub run_at_to: Option<String>,
    pub ids: Option<Vec<JobId>>,
    /// `true`: only pending jobs held by their topic's payload schema;
    /// `false`: only pending jobs not held.
    pub held: Option<bool>,
}

/// Body of `POST /v1/jobs/bulk`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    pub filter: Option<FilterBody>,
    pub action: Option<BulkAction>,
    /// Required: `true` previews, `false` applies.
    pub dry_run: Option<bool>,
}

/// An operation as the API shows it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkView {
    pub id: u64,
    pub status: &'static str,
    pub created_by: String,
    pub filter: BulkFilter,
    pub action: BulkAction,
    /// Jobs the filter matched when the operation started.
    pub total: u64,
    /// Jobs examined so far.
    pub done: u64,
    /// Jobs changed.
    pub changed: u64,
    /// Jobs matched but no longer in the action's status when their batch
    /// came (dispatched, cancelled or edited meanwhile): left as they are.
    /// A retarget also skips a schedule's occurrences and the jobs on the
    /// target topic already; a release, the jobs not held.
    pub skipped: u64,
    /// Jobs a retarget left where they were because a job on the target
    /// topic holds their key; held jobs a release without `force` left held
    /// because their payload still does not match their topic's schema (0
    /// for the other actions).
    pub conflicts: u64,
    pub errors: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
    pub finished_at: Option<String>,
}

impl From<BulkOp> for BulkView {
    fn from(op: BulkOp) -> Self {
        BulkView {
            id: op.id,
            status: op.status.as_str(),
            created_by: op.created_by,
            filter: BulkFilter {
                topic_patterns: None,
                ..op.filter
            },
            action: op.action,
            total: op.total,
            done: op.done,
            changed: op.changed,
            skipped: op.skipped,
            conflicts: op.conflicts,
            errors: op.errors,
            created_at: time_format(op.created_at),
            updated_at: time_format(op.updated_at),
            finished_at: op.finished_at.map(time_format),
        }
    }
}

/// Answer of a preview (`dry_run: true`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkPreview {
    pub dry_run: bool,
    pub action: BulkAction,
    /// The one status whose jobs the action changes.
    pub applies_to: Status,
    /// Jobs the filter matches.
    pub matched: u64,
    /// Of those, the ones in `applies_to` now (a retarget's: those it
    /// would move, see [`BulkAction::Retarget`]; a release's: those held
    /// now, whose payloads are checked only when it runs).
    pub eligible: u64,
    /// A retarget's: of the eligible, those a job on the target topic
    /// holds the key of now, which would stay where they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflicts: Option<u64>,
    /// The first 20 by id, without payloads.
    pub sample: Vec<JobView>,
}

/// `GET /v1/bulk`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BulkList {
    pub operations: Vec<BulkView>,
}

/// The filter, checked, limited to the caller's topics.
fn filter_parse(body: FilterBody, caller: &Caller) -> Result<BulkFilter, ApiError> {
    let status = status_parse("filter.status", body.status)?;
    if let Some(topic) = &body.topic {
        job::topic_validate(topic)?;
        caller.topic(topic)?;
    }
    if let Some(prefix) = &body.key_prefix {
        if prefix.is_empty() {
            return Err(ApiError::InvalidRequest(
                "filter.key_prefix must not be empty".to_owned(),
            ));
        }
        job::key_validate(prefix)?;
    }
    if let Some(ids) = &body.ids {
        if ids.is_empty() || ids.len() > IDS_MAX {
            return Err(ApiError::InvalidRequest(format!(
                "filter.ids must list 1 to {IDS_MAX} ids"
            )));
        }
    }
    let filter = BulkFilter {
        topic: body.topic,
        status,
        key_prefix: body.key_prefix,
        run_at_from: time_parse("filter.run_at_from", body.run_at_from)?.map(job::truncate_to_ms),
        run_at_to: time_parse("filter.run_at_to", body.run_at_to)?.map(job::truncate_to_ms),
        ids: body.ids,
        held: body.held,
        topic_patterns: caller.0.topics.clone(),
    };
    let narrowed = filter.topic.is_some()
        || filter.status.is_some()
        || filter.key_prefix.is_some()
        || filter.run_at_from.is_some()
        || filter.run_at_to.is_some()
        || filter.ids.is_some()
        || filter.held.is_some();
    if !narrowed {
        return Err(ApiError::InvalidRequest(
            "the filter must name at least one of topic, status, key_prefix, run_at_from, run_at_to, ids, held"
                .to_owned(),
        ));
    }
    Ok(filter)
}

/// Checks the action's values and the scope it needs.
fn action_check(action: &BulkAction, caller: &Caller, config: &Config) -> Result<(), ApiError> {
    let max_ahead_ms = config
        .jobs
        .max_schedule_ahead_days
        .saturating_mul(86_400_000);
    match action {
        BulkAction::Redrive { max_attempts } => {
            caller.require(Scope::Admin)?;
            if let Some(n) = max_attempts {
                if !(1..=ATTEMPTS_MAX).contains(n) {
                    return Err(ApiError::InvalidPolicy(format!(
                        "action.max_attempts must be between 1 and {ATTEMPTS_MAX}"
                    )));
                }
            }
            return Ok(());
        }
        BulkAction::Shift { by_ms } => {
            if *by_ms == 0 || by_ms.unsigned_abs() > max_ahead_ms {
                return Err(ApiError::InvalidSchedule(format!(
                    "action.by_ms must be non-zero and at most {max_ahead_ms} either way (jobs.max_schedule_ahead_days)"
                )));
            }
        }
        BulkAction::Move { run_at } => {
            if run_at.timestamp_millis() < 0 || !job::time_in_range(*run_at) {
                return Err(ApiError::InvalidRunAt(
                    "action.run_at must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z"
                        .to_owned(),
                ));
            }
            let ahead_ms = (*run_at - Utc::now()).num_milliseconds();
            if ahead_ms > 0 && ahead_ms as u64 > max_ahead_ms {
                return Err(job::InvalidJob::TooFar {
                    max_days: config.jobs.max_schedule_ahead_days,
                }
                .into());
            }
        }
        BulkAction::Policy {
            expects_result,
            max_attempts,
            backoff_base_ms,
            backoff_cap_ms,
            ack_timeout_ms,
        } => {
            let overrides = PolicyOverrides {
                expects_result: *expects_result,
                max_attempts: *max_attempts,
                backoff_base_ms: *backoff_base_ms,
                backoff_cap_ms: *backoff_cap_ms,
                ack_timeout_ms: *ack_timeout_ms,
            };
            if overrides == PolicyOverrides::default() {
                return Err(ApiError::InvalidPolicy(
                    "action policy must change at least one of expects_result, max_attempts, backoff_base_ms, backoff_cap_ms, ack_timeout_ms"
                        .to_owned(),
                ));
            }
            // Each given field within its bounds (the widest base lets
            // only the given ones fail).
            let widest = Policy {
                expects_result: false,
                max_attempts: 1,
                backoff_base_ms: 1,
                backoff_cap_ms: DELAY_MAX_MS,
                ack_timeout_ms: 1_000,
            };
            overrides
                .over(widest)
                .validate()
                .map_err(|message| ApiError::InvalidPolicy(format!("action: {message}")))?;
        }
        BulkAction::Retarget { topic } => {
            job::topic_validate(topic)?;
            // The jobs' topics are the filter's (within the caller's); the
            // target must be the caller's too.
            caller.topic(topic)?;
        }
        BulkAction::Release { force } => {
            // As for one job: unchecked needs more than write.
            if *force {
                caller.require(Scope::Admin)?;
            }
        }
        BulkAction::Cancel {} => {}
    }
    caller.require(Scope::Write)
}

/// `POST /v1/jobs/bulk` — `dry_run: true`: 200 with how many jobs match,
/// how many of them the action would change now, and a sample; nothing is
/// written. `dry_run: false`: 202 with the operation, which goes on in the
/// background (follow it at `GET /v1/bulk/{id}`).
#[utoipa::path(
    post, path = "/v1/jobs/bulk", operation_id = "jobs_bulk_create", tag = "operations",
    request_body = BulkRequest,
    responses(
        (status = 200, description = "Preview (dry_run: true): nothing written", body = BulkPreview),
        (status = 202, description = "Started (dry_run: false): follow it at /v1/bulk/{id}", body = BulkView),
    )
)]
pub async fn start(
    State(state): State<ApiState>,
    caller: Caller,
    ApiJson(request): ApiJson<BulkRequest>,
) -> Result<Response, ApiError> {
    let action = request.action.ok_or_else(|| {
        ApiError::InvalidRequest(
            "action is required: {\"type\": \"cancel\" | \"shift\" | \"move\" | \"redrive\" | \"policy\" | \"retarget\" | \"release\", ...}"
                .to_owned(),
        )
    })?;
    let dry_run = request.dry_run.ok_or_else(|| {
        ApiError::InvalidRequest("dry_run is required: true to preview, false to apply".to_owned())
    })?;
    let filter = filter_parse(
        request
            .filter
            .ok_or_else(|| ApiError::InvalidRequest("filter is required".to_owned()))?,
        &caller,
    )?;
    action_check(&action, &caller, &state.config)?;
    let mut conflicts = None;
    if let BulkAction::Retarget { topic } = &action {
        if filter.topic.as_deref() == Some(topic.as_str()) {
            return Err(ApiError::InvalidRequest(format!(
                "the jobs of filter.topic {topic:?} are on action.topic already"
            )));
        }
        // As for a new job on it: a reserved topic, or one the broker
        // lacks, is refused before anything is written.
        topic_preflight(&state, topic).await?;
    }
    if !dry_run && (filter.held.is_some() || matches!(action, BulkAction::Release { .. })) {
        super::holds::older_instances_refuse(&state, "a bulk operation on held jobs").await?;
    }
    let max_id = state.store.job_max_id().await?;
    let (matched, mut eligible) = state
        .store
        .bulk_count(&filter, max_id, action.applies_to())
        .await?;
    if let (BulkAction::Retarget { topic }, true) = (&action, dry_run) {
        let (movable, taken) = state
            .store
            .bulk_retarget_count(&filter, max_id, topic)
            .await?;
        eligible = movable;
        conflicts = Some(taken);
    }
    if let (BulkAction::Release { .. }, true) = (&action, dry_run) {
        eligible = state.store.bulk_held_count(&filter, max_id).await?;
    }
    if dry_run {
        let sample = state.store.bulk_sample(&filter, SAMPLE).await?;
        let sample: Vec<JobView> = sample.into_iter().map(JobView::without_payload).collect();
        return Ok(Json(BulkPreview {
            dry_run: true,
            applies_to: action.applies_to(),
            action,
            matched,
            eligible,
            conflicts,
            sample,
        })
        .into_response());
    }
    let owner_token = rand::random::<u64>() >> 1;
    let created_by = caller.0.actor();
    let id = state
        .store
        .bulk_create(&created_by, &filter, &action, max_id, matched, owner_token)
        .await?;
    let op = state.store.bulk_get(id).await?.ok_or(ApiError::Internal)?;
    tracing::info!(bulk = id, action = action.name(), matched, by = %created_by, "bulk operation started");
    state.bulk.spawn(op.clone());
    Ok((StatusCode::ACCEPTED, Json(BulkView::from(op))).into_response())
}

/// Whether `caller` may see `op`: a token for every topic sees every
/// operation; one limited to some topics only those it started (a filter
/// names topics and keys).
fn visible(caller: &Caller, op: &BulkOp) -> bool {
    caller.0.topics.is_none() || op.created_by == caller.0.actor()
}

/// `GET /v1/bulk/{id}` — an operation's progress.
#[utoipa::path(
    get, path = "/v1/bulk/{id}", operation_id = "bulk_op_get", tag = "operations",
    params(("id" = u64, Path, description = "The operation's id")),
    responses((status = 200, description = "Its progress", body = BulkView))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<BulkView>, ApiError> {
    caller.require(Scope::Read)?;
    let id: u64 = id
        .parse()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::InvalidId(format!("{id:?} is not a bulk operation id")))?;
    let op = state
        .store
        .bulk_get(id)
        .await?
        .filter(|op| visible(&caller, op))
        .ok_or(ApiError::BulkNotFound(id))?;
    Ok(Json(op.into()))
}

/// `GET /v1/bulk` — the 50 newest operations (those the caller may see).
#[utoipa::path(
    get, path = "/v1/bulk", operation_id = "bulk_ops_list", tag = "operations",
    responses((status = 200, description = "The 50 newest operations", body = BulkList))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> Result<Json<BulkList>, ApiError> {
    caller.require(Scope::Read)?;
    let operations: Vec<BulkView> = state
        .store
        .bulk_list(50)
        .await?
        .into_iter()
        .filter(|op| visible(&caller, op))
        .map(BulkView::from)
        .collect();
    Ok(Json(BulkList { operations }))
}

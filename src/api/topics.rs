//! `/v1/topics`: pause, resume and pace a topic's dispatch, and group its
//! jobs for fair dispatch by tenant.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::jobs::present;
use super::{ApiError, ApiJson, ApiState};
use crate::domain::grouping::GroupBy;
use crate::domain::job;
use crate::domain::job::time_format;
use crate::domain::payload_schema::PayloadSchema;
use crate::roles::auth::Scope;
use crate::roles::topic_controls;
use crate::store::{TopicChange, TopicControl};

/// A topic's controls.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TopicView {
    pub topic: String,
    /// Due jobs stay pending while paused, and are produced after resume.
    pub paused: bool,
    /// The pace in force, jobs per second (null: none).
    pub max_per_second: Option<u32>,
    /// Where the pace comes from: `api` (PATCH), `config`
    /// (`topics.<name>.max_per_second`) or null.
    pub max_per_second_source: Option<&'static str>,
    /// What the topic's jobs are grouped by for fair dispatch (`key:SEP`,
    /// `header:NAME`; null: not grouped), the API's or the configuration's.
    pub group_by: Option<String>,
    /// Each group's pace, jobs per second across every instance (null:
    /// none, the groups only share `max_per_second` fairly).
    pub group_max_per_second: Option<u32>,
    /// The JSON Schema the topic's payloads must match (null: none),
    /// checked on create and again right before each job is produced
    /// (docs/api.md, "Payload schemas"). Stored text that is not JSON (a
    /// hand edit) is shown as a string.
    #[schema(value_type = Option<Object>)]
    pub payload_schema: Option<serde_json::Value>,
    /// Who changed the controls last (`api:NAME`, or `sql`).
    pub updated_by: Option<String>,
    pub updated_at: Option<String>,
    /// The due-time watermark: every job of the topic due at or before it
    /// is produced, cancelled, expired or dead (null until one of its jobs
    /// has fallen due). Shown by `GET /v1/topics/{topic}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watermark: Option<String>,
}

/// Answer of `GET /v1/topics`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TopicList {
    /// Every topic that is paused, paced, grouped or has a payload schema
    /// (through the API or the configuration).
    pub topics: Vec<TopicView>,
}

/// Body of `PATCH /v1/topics/{topic}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTopic {
    /// Jobs per second across every instance, at least 1; null removes
    /// the API's pace (the configuration's applies again).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>)]
    pub max_per_second: Option<Option<u32>>,
    /// Groups the topic's jobs for fair dispatch: `key:SEP` (the key up to
    /// the first SEP, e.g. `key::`) or `header:NAME` (that header's value,
    /// e.g. `header:tenant`); null removes the API's grouping.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    pub group_by: Option<Option<String>>,
    /// Each group's pace, jobs per second across every instance, at least
    /// 1; null removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u32>)]
    pub group_max_per_second: Option<Option<u32>>,
    /// A JSON Schema the topic's payloads must match from now on: creates
    /// that do not are refused (400 `payload_schema`), and pending jobs that
    /// no longer do are held when due. One that does not compile: 400
    /// `invalid_schema`. null removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Object>)]
    pub payload_schema: Option<Option<serde_json::Value>>,
}

fn view(state: &ApiState, topic: &str, row: Option<TopicControl>) -> TopicView {
    let api_rate = row.as_ref().and_then(|r| r.max_per_second);
    let config_rate = state.rules.max_per_second_for(topic);
    let (config_group_by, config_group_rate) = state.rules.grouping_for(topic);
    TopicView {
        topic: topic.to_owned(),
        paused: row.as_ref().is_some_and(|r| r.paused),
        max_per_second: api_rate.or(config_rate),
        max_per_second_source: match (api_rate, config_rate) {
            (Some(_), _) => Some("api"),
            (None, Some(_)) => Some("config"),
            (None, None) => None,
        },
        group_by: row
            .as_ref()
            .and_then(|r| r.group_by.clone())
            .or_else(|| config_group_by.map(str::to_owned)),
        group_max_per_second: row
            .as_ref()
            .and_then(|r| r.group_max_per_second)
            .or(config_group_rate),
        payload_schema: row
            .as_ref()
            .and_then(|r| r.payload_schema.as_deref())
            .map(|text| {
                serde_json::from_str(text)
                    .unwrap_or_else(|_| serde_json::Value::String(text.to_owned()))
            }),
        updated_by: row.as_ref().map(|r| r.updated_by.clone()),
        updated_at: row.as_ref().map(|r| time_format(r.updated_at)),
        watermark: None,
    }
}

/// The topic's controls as `GET` shows them (the audit log's "before").
pub(super) async fn shown(state: &ApiState, topic: &str) -> Option<serde_json::Value> {
    let row = state.store.topic_control(topic).await.ok()?;
    serde_json::to_value(view(state, topic, row)).ok()
}

fn topic_checked(caller: &Caller, topic: &str) -> Result<(), ApiError> {
    job::topic_validate(topic)?;
    caller.topic(topic)
}

#[utoipa::path(
    get, path = "/v1/topics", operation_id = "topics_list", tag = "topics",
    responses((status = 200, description = "Paused and paced topics", body = TopicList))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
) -> Result<Json<TopicList>, ApiError> {
    caller.require(Scope::Read)?;
    let mut rows: BTreeMap<String, Option<TopicControl>> = state
        .store
        .topic_controls()
        .await?
        .into_iter()
        .map(|row| (row.topic.clone(), Some(row)))
        .collect();
    for (topic, settings) in &state.config.topics {
        if settings.max_per_second.is_some() || settings.group_by.is_some() {
            rows.entry(topic.clone()).or_insert(None);
        }
    }
    let topics = rows
        .into_iter()
        .filter(|(topic, _)| caller.0.topic_allowed(topic))
        .map(|(topic, row)| view(&state, &topic, row))
        .filter(|v| {
            v.paused
                || v.max_per_second.is_some()
                || v.group_by.is_some()
                || v.payload_schema.is_some()
        })
        .collect();
    Ok(Json(TopicList { topics }))
}

#[utoipa::path(
    get, path = "/v1/topics/{topic}", operation_id = "topic_get", tag = "topics",
    params(("topic" = String, Path, description = "The topic")),
    responses((status = 200, description = "The topic's controls", body = TopicView))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    caller.require(Scope::Read)?;
    topic_checked(&caller, &topic)?;
    let row = state.store.topic_control(&topic).await?;
    let mut view = view(&state, &topic, row);
    view.watermark = state
        .store
        .watermark(&topic)
        .await?
        .map(|mark| time_format(mark.at));
    Ok(Json(view))
}

/// `POST /v1/topics/{topic}/pause` — once this answers (after about 3 s:
/// every instance has taken the pause in by then), no job of the topic is
/// produced (one a dispatcher claimed a moment before is already on its
/// way); due jobs stay pending. Idempotent.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/pause", operation_id = "topic_pause", tag = "topics",
    params(("topic" = String, Path, description = "The topic")),
    responses((status = 200, description = "Paused", body = TopicView))
)]
pub async fn pause(
    State(state): State<ApiState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    let change = TopicChange {
        paused: Some(true),
        ..TopicChange::default()
    };
    let view = set(&state, &caller, &topic, change).await?;
    // Every instance has read the pause, or stopped trusting an older copy
    // of the controls, before the caller is told it holds.
    tokio::time::sleep(topic_controls::PAUSE_SETTLE).await;
    Ok(view)
}

/// `POST /v1/topics/{topic}/resume` — the topic's due jobs are produced
/// (at its pace, if it has one), oldest first. Idempotent.
#[utoipa::path(
    post, path = "/v1/topics/{topic}/resume", operation_id = "topic_resume", tag = "topics",
    params(("topic" = String, Path, description = "The topic")),
    responses((status = 200, description = "Resumed", body = TopicView))
)]
pub async fn resume(
    State(state): State<ApiState>,
    caller: Caller,
    Path(topic): Path<String>,
) -> Result<Json<TopicView>, ApiError> {
    let view = set(
        &state,
        &caller,
        &topic,
        TopicChange {
            paused: Some(false),
            ..TopicChange::default()
        },
    )
    .await?;
    // Back in the index now; every instance also notices within a second.
    match topic_controls::topic_reindex(&state.store, &state.index, &topic, state.config.window())
        .await
    {
        Ok(_) => state.wake.notify_one(),
        Err(err) => {
            tracing::warn!(topic, error = %err, "cannot re-index a resumed topic now; the reconciler will")
        }
    }
    Ok(view)
}

/// `PATCH /v1/topics/{topic}` — sets or removes the topic's pace, and its
/// grouping for fair dispatch by tenant (what its jobs are grouped by, and
/// each group's pace).
#[utoipa::path(
    patch, path = "/v1/topics/{topic}", operation_id = "topic_modify", tag = "topics",
    params(("topic" = String, Path, description = "The topic")),
    request_body = PatchTopic,
    responses((status = 200, description = "Changed", body = TopicView))
)]
pub async fn patch(
    State(state): State<ApiState>,
    caller: Caller,
    Path(topic): Path<String>,
    ApiJson(body): ApiJson<PatchTopic>,
) -> Result<Json<TopicView>, ApiError> {
    if body.max_per_second.is_none()
        && body.group_by.is_none()
        && body.group_max_per_second.is_none()
        && body.payload_schema.is_none()
    {
        return Err(ApiError::InvalidRequest(
            "nothing to change: give max_per_second, group_by, group_max_per_second or \
             payload_schema (a value, or null to remove it)"
                .to_owned(),
        ));
    }
    if body.max_per_second == Some(Some(0)) {
        return Err(ApiError::InvalidRequest(
            "max_per_second must be at least 1; to stop the topic, pause it".to_owned(),
        ));
    }
    if body.group_max_per_second == Some(Some(0)) {
        return Err(ApiError::InvalidRequest(
            "group_max_per_second must be at least 1; null removes it".to_owned(),
        ));
    }
    if let Some(Some(by)) = &body.group_by {
        GroupBy::parse(by).map_err(ApiError::InvalidRequest)?;
    }
    // Compiled here, so a schema that does not compile is never stored;
    // stored as its compact text.
    let payload_schema = match &body.payload_schema {
        None => None,
        Some(None) => Some(None),
        Some(Some(schema)) => {
            let compiled = PayloadSchema::of_value(schema).map_err(ApiError::InvalidSchema)?;
            super::holds::older_instances_refuse(&state, "a payload schema").await?;
            Some(Some(compiled.text().to_owned()))
        }
    };
    set(
        &state,
        &caller,
        &topic,
        TopicChange {
            max_per_second: body.max_per_second,
            group_by: body.group_by,
            group_max_per_second: body.group_max_per_second,
            payload_schema,
            ..TopicChange::default()
        },
    )
    .await
}

async fn set(
    state: &ApiState,
    caller: &Caller,
    topic: &str,
    change: TopicChange,
) -> Result<Json<TopicView>, ApiError> {
    caller.require(Scope::Write)?;
    topic_checked(caller, topic)?;
    let row = caller
        .store(state)
        .topic_control_set(topic, &change, &caller.0.actor())
        .await?;
    tracing::info!(topic, paused = row.paused, max_per_second = ?row.max_per_second, group_by = ?row.group_by, group_max_per_second = ?row.group_max_per_second, payload_schema = row.payload_schema.is_some(), by = %row.updated_by, "topic controls changed");
    // This instance follows at once; the others within a second.
    if let Err(err) = state.controls.refresh().await {
        tracing::debug!(error = %err, "cannot re-read the topic controls now");
    }
    Ok(Json(view(state, topic, Some(row))))
}

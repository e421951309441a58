//! The audit log over HTTP: a middleware that writes a row for every
//! control-plane request — before the handler runs (nothing is changed if
//! it cannot be written), completed with the answer after — and
//! `GET /v1/audit` (admin scope) to read it.
//!
//! Audited: topic pause, resume and PATCH; schedule create, PATCH, pause,
//! resume, delete, trigger and backfill (and its previews); bulk
//! operations and their previews; redrives. Token
//! changes, doctor repairs and start-ups are written by the CLI and the
//! instance themselves (`crate::roles::audit`).

use axum::body::Body;
use axum::extract::{MatchedPath, Query, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as CURSOR;
use base64::Engine;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::auth::Caller;
use super::query::time_parse;
use super::server::PeerAddr;
use super::{ApiError, ApiState};
use crate::domain::job::time_format;
use crate::roles::audit::{contents_left_out, headers_sealed};
use crate::roles::auth::Scope;
use crate::store::{AuditEntry, AuditFilter, AuditRow};

const LIST_DEFAULT: u32 = 100;
const LIST_MAX: u32 = 1000;
/// Largest answer kept as `after` (bigger ones are recorded without it).
const ANSWER_KEPT_MAX: usize = 1 << 20;

/// The audited action of a route, by method and template.
fn action_of(method: &Method, template: &str) -> Option<&'static str> {
    Some(match (method.as_str(), template) {
        ("POST", "/v1/jobs/bulk") => "bulk.start",
        ("POST", "/v1/jobs/{id}/redrive") => "job.redrive",
        ("POST", "/v1/jobs/{id}/release") => "job.release",
        ("POST", "/v1/schedules") => "schedule.create",
        ("PATCH", "/v1/schedules/{id}") => "schedule.modify",
        ("DELETE", "/v1/schedules/{id}") => "schedule.delete",
        ("POST", "/v1/schedules/{id}/pause") => "schedule.pause",
        ("POST", "/v1/schedules/{id}/resume") => "schedule.resume",
        ("POST", "/v1/schedules/{id}/trigger") => "schedule.trigger",
        ("POST", "/v1/schedules/{id}/backfill") => "schedule.backfill",
        ("PATCH", "/v1/topics/{topic}") => "topic.modify",
        ("POST", "/v1/topics/{topic}/pause") => "topic.pause",
        ("POST", "/v1/topics/{topic}/resume") => "topic.resume",
        _ => return None,
    })
}

/// The path's parameter (the topic, the id) where the template has one.
fn path_param(template: &str, path: &str) -> Option<String> {
    template
        .split('/')
        .zip(path.split('/'))
        .find(|(t, _)| t.starts_with('{'))
        .map(|(_, p)| p.to_owned())
}

/// Where a request came from: the connection's address, and what a proxy
/// said in `X-Forwarded-For`.
fn origin_of(request: &Request) -> Option<String> {
    let peer = request
        .extensions()
        .get::<PeerAddr>()
        .map(|peer| peer.0.ip().to_string());
    let forwarded = request
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .map(|v| format!("x-forwarded-for: {v}"));
    match (peer, forwarded) {
        (Some(peer), Some(forwarded)) => Some(format!("{peer} ({forwarded})")),
        (peer, forwarded) => peer.or(forwarded),
    }
}

/// The state a change starts from, as `GET` would show it.
async fn before_of(state: &ApiState, action: &str, target: Option<&str>) -> Option<Value> {
    let target = target?;
    let shown = match action.split_once('.')?.0 {
        "topic" => super::topics::shown(state, target).await,
        "schedule" => super::schedules::shown(state, target).await,
        "job" => {
            let id = target.parse().ok()?;
            let job = state.store.job_get(id).await.ok()?;
            serde_json::to_value(super::view::JobView::without_payload(job)).ok()
        }
        _ => None,
    };
    shown.map(|shown| contents_left_out(shown, headers_sealed(&state.store)))
}

/// Every `/v1` request on an audited route: its row first, then the
/// handler, then the row completed with the answer. Runs after the caller
/// is known and the body is read.
///
/// Long because the audited request is read in order: its action and caller,
/// its row written first, the handler, then the row completed.
pub async fn audit(
    State(state): State<ApiState>,
    matched: Option<MatchedPath>,
    request: Request,
    next: Next,
) -> Response {
    let Some(mut action) = matched
        .as_ref()
        .and_then(|m| action_of(request.method(), m.as_str()))
    else {
        return next.run(request).await;
    };
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let origin = origin_of(&request);
    let template = matched.map(|m| m.as_str().to_owned()).unwrap_or_default();
    let mut target = path_param(&template, request.uri().path());
    let (parts, body) = request.into_parts();
    // `body_deadline` has read it whole already: this cannot wait or fail.
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let asked: Option<Value> = serde_json::from_slice(&bytes).ok();
    if let Some(asked) = &asked {
        if action == "bulk.start" && asked["dry_run"] != Value::Bool(false) {
            action = "bulk.preview";
        }
        if action == "schedule.backfill" && asked["dry_run"] != Value::Bool(false) {
            action = "schedule.backfill_preview";
        }
        if target.is_none() {
            target = asked["topic"]
                .as_str()
                .or_else(|| asked["filter"]["topic"].as_str())
                .map(|topic| match asked["key"].as_str() {
                    Some(key) => format!("{topic}/{key}"),
                    None => topic.to_owned(),
                });
        }
    }
    // With encryption on, headers are sealed at rest: they are left out
    // here as payloads always are, or this row would keep them plain.
    let sealed = headers_sealed(&state.store);
    let entry = AuditEntry {
        actor: caller.0.actor(),
        action: action.to_owned(),
        before: before_of(&state, action, target.as_deref()).await,
        target,
        origin,
        request: asked.map(|asked| contents_left_out(asked, sealed)),
    };
    let id = match state.store.audit_begin(&entry).await {
        Ok(id) => id,
        Err(err) => {
            tracing::warn!(error = %err, action, "cannot write the audit log: the change is refused");
            return ApiError::Unavailable.into_response();
        }
    };
    let response = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let (parts, body) = response.into_parts();
    // The whole answer goes back to the caller, however large; only one
    // up to ANSWER_KEPT_MAX is kept as `after`.
    let answer = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(answer) => answer,
        Err(err) => {
            tracing::warn!(error = %err, audit_id = id, action, "cannot read the answer of an audited change");
            return ApiError::Internal.into_response();
        }
    };
    let after = (answer.len() <= ANSWER_KEPT_MAX)
        .then(|| serde_json::from_slice::<Value>(&answer).ok())
        .flatten()
        .map(|answer| contents_left_out(answer, sealed));
    if let Err(err) = state
        .store
        .audit_end(id, parts.status.as_u16(), after.as_ref())
        .await
    {
        tracing::warn!(error = %err, audit_id = id, action, "cannot complete the audit log's row: it shows no outcome");
    }
    Response::from_parts(parts, Body::from(answer))
}

/// Query of `GET /v1/audit`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// An action (`topic.pause`) or every action of a kind (`topic`).
    pub action: Option<String>,
    /// `api:NAME`, `api`, `cli`, `instance`.
    pub actor: Option<String>,
    /// A topic, a schedule's or job's id, a token's name.
    pub target: Option<String>,
    /// Rows at or after this time (RFC 3339).
    pub from: Option<String>,
    /// Rows before this time (RFC 3339).
    pub to: Option<String>,
    /// 1 to 1000 (100).
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One change.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditView {
    pub id: u64,
    /// When it was asked (the database's clock).
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: Option<String>,
    pub origin: Option<String>,
    /// The state before, as `GET` showed it (payloads left out).
    pub before: Option<Value>,
    /// The request's body (payloads left out).
    pub request: Option<Value>,
    /// The answer: the state after, or the error (payloads left out).
    pub after: Option<Value>,
    /// The answer's HTTP status (0: a CLI change that failed); null: its
    /// end was not recorded (the process died): it may have happened.
    pub status: Option<u16>,
}

impl From<AuditRow> for AuditView {
    fn from(row: AuditRow) -> AuditView {
        AuditView {
            id: row.id,
            at: time_format(row.at),
            actor: row.actor,
            action: row.action,
            target: row.target,
            origin: row.origin,
            before: row.before,
            request: row.request,
            after: row.after,
            status: row.status,
        }
    }
}

/// Answer of `GET /v1/audit`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditView>,
    /// Null on the last page.
    pub next_cursor: Option<String>,
}

fn cursor_encode(row: &AuditView, at: DateTime<Utc>) -> String {
    CURSOR.encode(format!("audit:{}:{}", at.timestamp_millis(), row.id))
}

fn cursor_decode(cursor: &str) -> Result<(DateTime<Utc>, u64), ApiError> {
    CURSOR
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .and_then(|text| {
            let rest = text.strip_prefix("audit:")?;
            let (ms, id) = rest.split_once(':')?;
            let at = Utc.timestamp_millis_opt(ms.parse().ok()?).single()?;
            Some((at, id.parse().ok()?))
        })
        .ok_or_else(|| ApiError::InvalidRequest("cursor is not one this API gave out".to_owned()))
}

/// `GET /v1/audit` — the control-plane changes, newest first, a page at a
/// time. Admin scope.
#[utoipa::path(
    get, path = "/v1/audit", operation_id = "audit_list", tag = "operations",
    params(AuditQuery),
    responses((status = 200, description = "Changes, newest first", body = AuditPage))
)]
pub async fn list(
    State(state): State<ApiState>,
    caller: Caller,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<AuditPage>, ApiError> {
    caller.require(Scope::Admin)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    let limit = query.limit.unwrap_or(LIST_DEFAULT);
    if !(1..=LIST_MAX).contains(&limit) {
        return Err(ApiError::InvalidRequest(format!(
            "limit must be 1 to {LIST_MAX}"
        )));
    }
    let filter = AuditFilter {
        action: query.action,
        actor: query.actor,
        target: query.target,
        from: time_parse("from", query.from)?,
        to: time_parse("to", query.to)?,
    };
    let after = query.cursor.as_deref().map(cursor_decode).transpose()?;
    let rows = state.store.audit_list(&filter, after, limit).await?;
    let last = (rows.len() == limit as usize)
        .then(|| rows.last().map(|row| row.at))
        .flatten();
    let entries: Vec<AuditView> = rows.into_iter().map(AuditView::from).collect();
    let next_cursor = last.and_then(|at| entries.last().map(|row| cursor_encode(row, at)));
    Ok(Json(AuditPage {
        entries,
        next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_plane_routes_are_audited_and_reads_are_not() {
        assert_eq!(
            action_of(&Method::POST, "/v1/topics/{topic}/pause"),
            Some("topic.pause")
        );
        assert_eq!(
            action_of(&Method::DELETE, "/v1/schedules/{id}"),
            Some("schedule.delete")
        );
        assert_eq!(action_of(&Method::GET, "/v1/topics/{topic}"), None);
        assert_eq!(
            action_of(&Method::POST, "/v1/jobs"),
            None,
            "jobs are in their history"
        );
        assert_eq!(
            path_param(
                "/v1/topics/{topic}/pause",
                "/v1/topics/billing.charge/pause"
            )
            .as_deref(),
            Some("billing.charge")
        );
        assert_eq!(path_param("/v1/schedules", "/v1/schedules"), None);
    }

    #[test]
    fn a_cursor_round_trips_and_a_forged_one_is_refused() {
        let at = Utc.timestamp_millis_opt(1_800_000_000_123).unwrap();
        let view = AuditView {
            id: 42,
            at: time_format(at),
            actor: "cli".into(),
            action: "token.create".into(),
            target: None,
            origin: None,
            before: None,
            request: None,
            after: None,
            status: Some(0),
        };
        assert_eq!(cursor_decode(&cursor_encode(&view, at)).unwrap(), (at, 42));
        assert!(cursor_decode("aWQ6NDI").is_err());
    }
}

//! The HTTP/JSON API under `/v1`, plus `/healthz` and `/metrics`.

mod audit;
mod auth;
mod bulk;
mod dev;
mod error;
mod forecast;
mod holds;
mod jobs;
mod openapi;
mod query;
mod results;
mod schedule_audit;
mod schedule_runs;
mod schedules;
mod server;
mod stats;
mod topics;
mod ui;
mod view;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Notify;

pub use auth::caller_of;
pub use error::ApiError;
pub use forecast::{forecast, Forecast, Range as ForecastRange};
pub use jobs::CreateJob;
pub use openapi::ApiDoc;
pub use server::{serve, tls_config, ServeLimits, TlsError};
pub use stats::StatsCache;

use crate::config::Config;
use crate::index::Index;
use crate::kafka::Topics;
use crate::roles::auth::{Principal, Scope, TokenCache};
use crate::roles::resolver::Resolver;
use crate::store::Store;

/// What every handler shares.
#[derive(Clone)]
pub struct ApiState {
    pub store: Store,
    pub index: Index,
    pub config: Arc<Config>,
    /// What the configuration says of each topic (its jobs' policy, its
    /// pace, whether jobs may be made for it).
    pub rules: Arc<crate::config::TopicRules>,
    /// Wakes the local dispatcher when a job enters the window.
    pub wake: Arc<Notify>,
    /// Applies result reports, as the results topic's consumer does.
    pub resolver: Resolver,
    pub metrics: PrometheusHandle,
    /// The broker's topics, for the pre-flight check at create.
    pub topics: Topics,
    /// The last `/v1/stats` computation, reused for a moment.
    pub stats: stats::StatsCache,
    /// Works through bulk operations in the background.
    pub bulk: crate::roles::bulk::BulkRunner,
    /// Paused and paced topics, as this instance last read them.
    pub controls: crate::roles::topic_controls::TopicControls,
    /// The active API tokens (`auth = tokens`).
    pub tokens: TokenCache,
    /// The caller of every request when `auth = none`.
    pub anonymous: Option<Arc<Principal>>,
    /// What `/readyz` asks besides the stores.
    pub ready: Readiness,
}

impl ApiState {
    /// The jobs service, writing through this instance's store (see
    /// [`auth::Caller::jobs`] for a caller's).
    pub fn jobs(&self) -> crate::roles::jobs::Jobs {
        crate::roles::jobs::Jobs::new(
            self.store.clone(),
            self.index.clone(),
            self.config.window(),
            self.wake.clone(),
        )
    }
}

/// What `/readyz` asks besides the stores: whether the instance is
/// draining and, with the dispatcher role, whether it holds shards.
#[derive(Clone, Default)]
pub struct Readiness {
    /// Cancelled when the instance starts to drain (SIGTERM).
    pub draining: tokio_util::sync::CancellationToken,
    /// The dispatcher's shards; None without the dispatcher role.
    pub ownership: Option<tokio::sync::watch::Receiver<crate::roles::membership::Ownership>>,
}

/// Largest request body read: room for a maximal payload as base64 (4/3)
/// plus the other fields, and at least 16 MiB for batches.
pub fn body_limit(config: &Config) -> usize {
    (config.jobs.payload_max_bytes / 3 * 4 + 64 * 1024).max(16 << 20)
}

pub fn router(state: ApiState) -> Router {
    let body_limit = body_limit(&state.config);
    let v1 = Router::new()
        .route("/v1/jobs", post(jobs::create).get(query::list))
        .route("/v1/jobs/batch", post(jobs::create_batch))
        .route("/v1/jobs/bulk", post(bulk::start))
        .route("/v1/bulk", get(bulk::list))
        .route("/v1/stats", get(stats::get))
        .route("/v1/forecast", get(forecast::get))
        .route("/v1/bulk/{id}", get(bulk::get))
        .route(
            "/v1/jobs/{id}",
            get(jobs::get).patch(jobs::patch).delete(jobs::cancel),
        )
        .route("/v1/jobs/{id}/history", get(query::history))
        .route("/v1/jobs/{id}/result", post(results::report))
        .route("/v1/jobs/{id}/redrive", post(results::redrive))
        .route("/v1/jobs/{id}/release", post(holds::release))
        .route(
            "/v1/schedules",
            post(schedules::create).get(schedules::list),
        )
        .route("/v1/schedules/preview", post(schedules::preview))
        .route(
            "/v1/schedules/{id}",
            get(schedules::get)
                .patch(schedules::patch)
                .delete(schedules::delete),
        )
        .route("/v1/schedules/{id}/pause", post(schedules::pause))
        .route("/v1/schedules/{id}/resume", post(schedules::resume))
        .route("/v1/schedules/{id}/audit", get(schedule_audit::get))
        .route("/v1/schedules/{id}/trigger", post(schedule_runs::trigger))
        .route("/v1/schedules/{id}/backfill", post(schedule_runs::backfill))
        .route("/v1/topics", get(topics::list))
        .route("/v1/topics/{topic}", get(topics::get).patch(topics::patch))
        .route("/v1/topics/{topic}/pause", post(topics::pause))
        .route("/v1/topics/{topic}/resume", post(topics::resume))
        .route("/v1/audit", get(audit::list));
    // `tickler dev` only: `tickler serve` has no such route at all.
    let v1 = if state.index.clock().is_virtual() {
        v1.route(
            "/v1/dev/clock",
            get(dev::clock_get).post(dev::clock_advance),
        )
    } else {
        v1
    };
    let v1 = v1
        // The last layer runs first: who is calling, then their body, then
        // the audit log's row of a control-plane change.
        .route_layer(middleware::from_fn_with_state(state.clone(), audit::audit))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::body_deadline,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ));
    Router::new()
        .merge(v1)
        .merge(ui::router())
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/v1/openapi.json", get(openapi::get))
        .route("/metrics", get(metrics))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(middleware::from_fn(head_limits))
        .with_state(state)
}

/// Longest request URI (path and query) the API reads.
pub const URI_MAX_BYTES: usize = 8 * 1024;
/// Most bytes of request headers (names and values) the API reads.
pub const HEADERS_MAX_BYTES: usize = 64 * 1024;

/// Refuses an over-long URI or over-large headers with the API's error
/// shape. The HTTP layer has its own, higher, hard limits (hyper: a 64 KiB
/// URI, 100 headers, ~400 KiB of head), answered without a body; these
/// come first for anything a client plausibly sends.
async fn head_limits(request: Request, next: Next) -> Response {
    let uri = request.uri().to_string().len();
    if uri > URI_MAX_BYTES {
        return ApiError::UriTooLong {
            size: uri,
            limit: URI_MAX_BYTES,
        }
        .into_response();
    }
    let headers: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if headers > HEADERS_MAX_BYTES {
        return ApiError::HeadersTooLarge {
            size: headers,
            limit: HEADERS_MAX_BYTES,
        }
        .into_response();
    }
    next.run(request).await
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NoRoute(uri.path().to_owned())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// The `{id}` of a job's path, in its one canonical spelling; anything
/// else (a sign, leading zeros, 0, bytes that are not UTF-8) is
/// `invalid_id`.
pub struct JobIdPath(pub crate::domain::job::JobId);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(id) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|err| ApiError::InvalidId(err.body_text()))?;
        jobs::id_parse(&id).map(JobIdPath)
    }
}

/// `Json` whose rejections are `ApiError`s, so malformed bodies get the
/// same error shape as every other mistake.
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    axum::Json<T>: FromRequest<S, Rejection = axum::extract::rejection::JsonRejection>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let Json(value) = Json::<T>::from_request(req, state).await?;
        Ok(ApiJson(value))
    }
}

/// Up (200) or down (503), and nothing more: anyone may ask. Up means the
/// API can take jobs, which needs MySQL; Redis down only costs latency and
/// is logged (and counted in `tickler_index_errors_total`).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Health {
    /// `ok` or `unavailable`.
    pub status: &'static str,
}

#[utoipa::path(
    get, path = "/healthz", operation_id = "health", tag = "operations", security(()),
    responses(
        (status = 200, description = "MySQL answers: jobs are taken", body = Health),
        (status = 503, description = "MySQL does not answer", body = Health),
    )
)]
async fn healthz(State(state): State<ApiState>) -> impl IntoResponse {
    match state.store.ping().await {
        Ok(()) => {
            if let Err(err) = state.index.ping().await {
                tracing::warn!(error = %err, "healthz: redis does not answer; jobs are still taken");
            }
            (StatusCode::OK, Json(Health { status: "ok" }))
        }
        Err(err) => {
            tracing::warn!(error = %err, "healthz: mysql does not answer");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(Health {
                    status: "unavailable",
                }),
            )
        }
    }
}

/// Answer of `/readyz`: ready or not, and each check's finding.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Ready {
    /// `ready` or `not_ready`.
    pub status: &'static str,
    /// Each check: `ok`, or what is wrong (`mysql`, `redis`, `schema`,
    /// `shards`, `draining`).
    pub checks: std::collections::BTreeMap<&'static str, String>,
}

/// `/readyz` — whether this instance should be sent work: MySQL and Redis
/// answer, the schema is the one this build needs, the instance holds
/// shards when it runs the dispatcher, and it is not draining. `/healthz`
/// is liveness (MySQL answers); this is readiness.
#[utoipa::path(
    get, path = "/readyz", operation_id = "readiness_get", tag = "operations", security(()),
    responses(
        (status = 200, description = "Ready: every check is ok", body = Ready),
        (status = 503, description = "Not ready: the checks say why", body = Ready),
    )
)]
async fn readyz(State(state): State<ApiState>) -> impl IntoResponse {
    let mut checks = std::collections::BTreeMap::new();
    let draining = state.ready.draining.is_cancelled();
    checks.insert(
        "draining",
        if draining {
            "draining: stopping".to_owned()
        } else {
            "ok".to_owned()
        },
    );
    let (mysql, redis) = tokio::join!(state.store.schema_applied(), state.index.ping());
    let newest = crate::store::schema_newest();
    match mysql {
        Ok(applied) => {
            checks.insert("mysql", "ok".to_owned());
            checks.insert(
                "schema",
                if applied >= newest {
                    "ok".to_owned()
                } else {
                    format!(
                        "at migration {applied}, this build needs {newest}: run tickler migrate"
                    )
                },
            );
        }
        Err(err) => {
            // The finding alone: the error is logged, not told to anyone
            // who asks.
            tracing::warn!(error = %err, "readyz: mysql does not answer");
            checks.insert("mysql", "does not answer".to_owned());
            checks.insert("schema", "unknown: mysql does not answer".to_owned());
        }
    }
    checks.insert(
        "redis",
        match redis {
            Ok(()) => "ok".to_owned(),
            Err(err) => {
                tracing::warn!(error = %err, "readyz: redis does not answer");
                "does not answer".to_owned()
            }
        },
    );
    if let Some(ownership) = &state.ready.ownership {
        let ownership = ownership.borrow().clone();
        let alive = ownership.alive_at(tokio::time::Instant::now());
        checks.insert(
            "shards",
            match (ownership.instance, ownership.shards.len(), alive) {
                (None, _, _) => "not registered yet".to_owned(),
                (Some(_), _, false) => "its heartbeat is not current".to_owned(),
                (Some(_), 0, true) => "holds no shard yet".to_owned(),
                (Some(_), _, true) => "ok".to_owned(),
            },
        );
    }
    let ready = checks.values().all(|finding| finding == "ok");
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Ready {
            status: if ready { "ready" } else { "not_ready" },
            checks,
        }),
    )
}

/// `/metrics` on the API's address: a token with the `metrics` scope (or
/// `auth = none`). `api.metrics_addr` serves it without one.
async fn metrics(State(state): State<ApiState>, headers: axum::http::HeaderMap) -> Response {
    let caller = match caller_of(&state, &headers).await {
        Ok(principal) => auth::Caller(principal),
        Err(err) => return err.into_response(),
    };
    if let Err(err) = caller.require(Scope::Metrics) {
        return err.into_response();
    }
    metrics_text(&state.metrics).into_response()
}

fn metrics_text(handle: &PrometheusHandle) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4")],
        handle.render(),
    )
}

/// The router of `api.metrics_addr`: `/metrics` for anyone who reaches it.
pub fn metrics_router(handle: PrometheusHandle) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move { metrics_text(&handle) }
            }),
        )
        .fallback(no_route)
}

//! The API's one error type. Each variant has a stable `code` clients may
//! match on; 5xx bodies never carry internal details.

use axum::extract::rejection::JsonRejection;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::view::JobView;

use crate::domain::job::InvalidJob;
use crate::domain::request::Refusal;
use crate::domain::zones::InvalidWallClock;
use crate::store::StoreError;

/// The body of every error answer. Some carry more beside `error`: a 409
/// the job as it is now (`job`), a cancel's 409 its `outcome`.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable: clients may match on it (docs/api.md lists them).
    pub code: String,
    /// For people; may change.
    pub message: String,
}

/// Why a job cannot do what was asked right now; the 409's `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conflict {
    /// PATCH with a version the job is no longer at.
    Version,
    /// PATCH of a job that is no longer pending.
    NotPending,
    /// DELETE of a job already produced.
    TooLate,
    /// DELETE of a job a dispatcher holds this instant.
    InFlight,
    /// Redrive of a job that is not dead.
    NotDead,
    /// Release of a held job whose payload still fails its topic's schema.
    PayloadSchema,
    /// Release of a job that is not held.
    NotHeld,
}

impl Conflict {
    pub fn code(self) -> &'static str {
        match self {
            Conflict::Version => "version_conflict",
            Conflict::NotPending => "not_pending",
            Conflict::TooLate => "too_late",
            Conflict::InFlight => "in_flight",
            Conflict::NotDead => "not_dead",
            Conflict::PayloadSchema => "payload_schema",
            Conflict::NotHeld => "not_held",
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidJson(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("request body is too large")]
    BodyTooLarge,
    #[error("{0}")]
    InvalidSchedule(String),
    /// An audit's `from`/`to`: not RFC 3339, out of order, or holding more
    /// occurrences than one answer shows.
    #[error("{0}")]
    InvalidInterval(String),
    #[error("{0}")]
    InvalidRunAt(String),
    #[error("{0}")]
    InvalidExpiry(String),
    #[error("{0}")]
    InvalidPayload(String),
    /// The payload does not match its topic's payload schema (where, and
    /// which keyword): nothing was written.
    #[error("the payload does not match the topic's payload_schema: {0}")]
    PayloadSchema(String),
    /// A payload schema that does not compile.
    #[error("payload_schema is not a JSON Schema: {0}")]
    InvalidSchema(String),
    #[error("{0}")]
    InvalidId(String),
    #[error("{0}")]
    InvalidPolicy(String),
    #[error("{0}")]
    InvalidReport(String),
    #[error(transparent)]
    InvalidJob(#[from] InvalidJob),
    #[error("{0}")]
    InvalidWallClock(InvalidWallClock),
    #[error("topic {0:?} does not exist on the broker: create it first (or see the kafka.topic_check setting)")]
    UnknownTopic(String),
    #[error("{0}: jobs may not be produced there")]
    ReservedTopic(String),
    #[error("job {0} not found")]
    NotFound(u64),
    #[error("bulk operation {0} not found")]
    BulkNotFound(u64),
    #[error("schedule {0} not found")]
    ScheduleNotFound(u64),
    /// A schedule's version moved on, or its (topic, key) is taken by a
    /// different schedule.
    #[error("{message}")]
    ScheduleConflict { code: &'static str, message: String },
    #[error("no such endpoint: {0}")]
    NoRoute(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("the request's URI is {size} bytes, over the limit of {limit}")]
    UriTooLong { size: usize, limit: usize },
    #[error("the request's headers take {size} bytes, over the limit of {limit}")]
    HeadersTooLarge { size: usize, limit: usize },
    #[error("a job with this topic and key exists already: job {existing_id}")]
    KeyConflict { existing_id: u64 },
    /// The job as it is now travels with the refusal, so the caller can
    /// decide without reading it again.
    #[error("{message}")]
    Conflict {
        conflict: Conflict,
        message: String,
        job: Box<JobView>,
    },
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    ForbiddenScope(String),
    #[error("{0}")]
    ForbiddenTopic(String),
    #[error("{0}")]
    CrossOrigin(String),
    #[error("{message}; try again in {retry_after_s} s")]
    RateLimited { retry_after_s: u64, message: String },
    /// The token's quota of pending jobs or payload bytes would be passed:
    /// nothing was written. Trying again helps only once some of its jobs
    /// have left pending (no Retry-After).
    #[error("{0}; nothing was written")]
    QuotaExceeded(String),
    #[error("the request body did not arrive within {0} ms")]
    BodyTimeout(u64),
    #[error("the database is unavailable; nothing was written, try again")]
    Unavailable,
    /// `POST /v1/dev/clock` beside a live `tickler serve`: nothing moved.
    #[error("{0}")]
    ClockNeighbour(String),
    /// A change that live instances of an older build would not honour
    /// (a payload schema while one built before holds is alive): nothing
    /// written.
    #[error("{0}")]
    OlderInstances(String),
    /// The job is stored in a form that does not decode (edited by hand,
    /// restored, sealed under a key this instance lacks): that row only;
    /// `tickler doctor` names it.
    #[error("stored row does not decode: {0}")]
    Unreadable(String),
    #[error("internal error")]
    Internal,
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::Job(invalid) => ApiError::InvalidJob(invalid),
            Refusal::Window(why) => ApiError::InvalidSchedule(why),
            Refusal::Expiry(why) => ApiError::InvalidExpiry(why),
            Refusal::Policy(why) => ApiError::InvalidPolicy(why),
            Refusal::WallClock(invalid) => ApiError::InvalidWallClock(invalid),
            Refusal::OnConflict(why) => ApiError::InvalidRequest(why),
        }
    }
}

impl ApiError {
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson(_)
            | ApiError::InvalidRequest(_)
            | ApiError::InvalidSchedule(_)
            | ApiError::InvalidInterval(_)
            | ApiError::InvalidRunAt(_)
            | ApiError::InvalidExpiry(_)
            | ApiError::InvalidPayload(_)
            | ApiError::PayloadSchema(_)
            | ApiError::InvalidSchema(_)
            | ApiError::InvalidId(_)
            | ApiError::InvalidPolicy(_)
            | ApiError::InvalidReport(_)
            | ApiError::UnknownTopic(_)
            | ApiError::ReservedTopic(_) => StatusCode::BAD_REQUEST,
            ApiError::InvalidJob(InvalidJob::PayloadTooLarge { .. }) | ApiError::BodyTooLarge => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
            ApiError::InvalidJob(_) | ApiError::InvalidWallClock(_) => StatusCode::BAD_REQUEST,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::NotFound(_)
            | ApiError::BulkNotFound(_)
            | ApiError::ScheduleNotFound(_)
            | ApiError::NoRoute(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::UriTooLong { .. } => StatusCode::URI_TOO_LONG,
            ApiError::HeadersTooLarge { .. } => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            ApiError::KeyConflict { .. }
            | ApiError::Conflict { .. }
            | ApiError::ScheduleConflict { .. }
            | ApiError::ClockNeighbour(_)
            | ApiError::OlderInstances(_) => StatusCode::CONFLICT,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::ForbiddenScope(_)
            | ApiError::ForbiddenTopic(_)
            | ApiError::CrossOrigin(_) => StatusCode::FORBIDDEN,
            ApiError::RateLimited { .. } | ApiError::QuotaExceeded(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal | ApiError::Unreadable(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidRequest(_) => "invalid_request",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::BodyTooLarge => "payload_too_large",
            ApiError::InvalidSchedule(_) => "invalid_schedule",
            ApiError::InvalidInterval(_) => "invalid_interval",
            ApiError::InvalidRunAt(_) => "invalid_run_at",
            ApiError::InvalidExpiry(_) => "invalid_expiry",
            ApiError::InvalidPayload(_) => "invalid_payload",
            ApiError::PayloadSchema(_) => "payload_schema",
            ApiError::InvalidSchema(_) => "invalid_schema",
            ApiError::InvalidId(_) => "invalid_id",
            ApiError::InvalidPolicy(_) => "invalid_policy",
            ApiError::InvalidReport(_) => "invalid_report",
            ApiError::InvalidJob(invalid) => invalid.code(),
            ApiError::InvalidWallClock(invalid) => invalid.code(),
            ApiError::UnknownTopic(_) => "unknown_topic",
            ApiError::ReservedTopic(_) => "reserved_topic",
            ApiError::NotFound(_) | ApiError::BulkNotFound(_) | ApiError::ScheduleNotFound(_) => {
                "not_found"
            }
            ApiError::ScheduleConflict { code, .. } => code,
            ApiError::NoRoute(_) => "no_route",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::UriTooLong { .. } => "uri_too_long",
            ApiError::HeadersTooLarge { .. } => "headers_too_large",
            ApiError::KeyConflict { .. } => "key_conflict",
            ApiError::Conflict { conflict, .. } => conflict.code(),
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::ForbiddenScope(_) => "forbidden_scope",
            ApiError::ForbiddenTopic(_) => "forbidden_topic",
            ApiError::CrossOrigin(_) => "cross_origin",
            ApiError::RateLimited { .. } => "rate_limited",
            ApiError::QuotaExceeded(_) => "quota_exceeded",
            ApiError::BodyTimeout(_) => "body_timeout",
            ApiError::Unavailable => "unavailable",
            ApiError::Unreadable(_) => "unreadable_row",
            ApiError::ClockNeighbour(_) => "clock_neighbour",
            ApiError::OlderInstances(_) => "older_instances",
            ApiError::Internal => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(id) => ApiError::NotFound(id),
            StoreError::QuotaExceeded(message) => ApiError::QuotaExceeded(message),
            StoreError::Corrupt(why) => {
                tracing::warn!(error = %why, "a stored row does not decode");
                ApiError::Unreadable(why)
            }
            err @ StoreError::KeyMissing { .. } => {
                tracing::warn!(error = %err, "a stored row is sealed under a key this instance lacks");
                ApiError::Unreadable(err.to_string())
            }
            err if err.is_transient() => {
                tracing::warn!(error = %err, "store unavailable for a moment");
                ApiError::Unavailable
            }
            other => {
                tracing::error!(error = %other, "store error");
                ApiError::Internal
            }
        }
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::JsonSyntaxError(err) => ApiError::InvalidJson(err.body_text()),
            JsonRejection::JsonDataError(err) => ApiError::InvalidRequest(err.body_text()),
            JsonRejection::MissingJsonContentType(err) => {
                ApiError::UnsupportedMediaType(err.body_text())
            }
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => ApiError::BodyTooLarge,
            other => ApiError::InvalidRequest(other.body_text()),
        }
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::BytesRejection) -> Self {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::BodyTooLarge
        } else {
            ApiError::InvalidRequest(rejection.body_text())
        }
    }
}

impl ApiError {
    /// `{"code", "message"}`: the `error` of a response, or of one item of
    /// a batch.
    pub fn error_json(&self) -> Value {
        json!(self.detail())
    }

    pub fn detail(&self) -> ErrorDetail {
        ErrorDetail {
            code: self.code().to_owned(),
            message: self.to_string(),
        }
    }
}

/// The `Retry-After` of a 503 `unavailable`, in seconds.
pub const UNAVAILABLE_RETRY_AFTER_S: u64 = 1;

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS
        ) {
            crate::metrics::api_refused(self.code());
        }
        let mut body = json!(ErrorBody {
            error: self.detail()
        });
        let mut headers = HeaderMap::new();
        match &self {
            ApiError::Unauthorized(_) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::RateLimited { retry_after_s, .. } => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_s));
            }
            // A store failing over answers again within seconds: a client
            // that follows HTTP retries after one (nothing was written, or
            // a retry of a keyed create finds its job).
            ApiError::Unavailable => {
                headers.insert(
                    header::RETRY_AFTER,
                    HeaderValue::from(UNAVAILABLE_RETRY_AFTER_S),
                );
            }
            _ => {}
        }
        if let ApiError::Conflict { conflict, job, .. } = self {
            // A cancel's answer says what became of the job in `outcome`
            // whether it applied or not; too late, it also says where the
            // record went.
            if matches!(conflict, Conflict::TooLate | Conflict::InFlight) {
                body["outcome"] = json!(conflict.code());
            }
            if conflict == Conflict::TooLate {
                body["topic"] = json!(job.topic);
                body["kafka"] = json!({
                    "partition": job.kafka.as_ref().map(|k| k.partition),
                    "offset": job.kafka.as_ref().map(|k| k.offset),
                });
                body["dispatched_at"] = json!(job.dispatched_at);
            }
            body["job"] = json!(job);
        }
        (status, headers, Json(body)).into_response()
    }
}

//! Who is calling, and what they may do: the `Authorization: Bearer`
//! check and the request rate limit (one middleware, before any body is
//! read), the checks of scope and topic each handler makes, and the rules
//! that keep a browser from acting for an operator (JSON only, no
//! cross-origin writes).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiState};
use crate::roles::auth::{AuthError, Principal, Scope, Throttled};
use crate::roles::jobs::Jobs;
use crate::roles::resolver::Resolver;
use crate::store::Store;

/// The caller of this request, as `authenticate` found them.
#[derive(Clone)]
pub struct Caller(pub Arc<Principal>);

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or(ApiError::Internal)
    }
}

impl Caller {
    fn who(&self) -> String {
        match &self.0.name {
            Some(name) => format!("token {name:?}"),
            None => "this caller".to_owned(),
        }
    }

    /// 403 `forbidden_scope` unless the token has `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.0.scopes.allow(scope) {
            return Ok(());
        }
        Err(ApiError::ForbiddenScope(format!(
            "{} does not have the {:?} scope",
            self.who(),
            scope.as_str()
        )))
    }

    /// 403 `forbidden_topic` unless the token's patterns cover `topic`.
    pub fn topic(&self, topic: &str) -> Result<(), ApiError> {
        if self.0.topic_allowed(topic) {
            return Ok(());
        }
        Err(ApiError::ForbiddenTopic(format!(
            "{} may not use topic {topic:?}",
            self.who()
        )))
    }

    /// 429 `rate_limited` when `n` more jobs would exceed the token's rate.
    pub async fn jobs_admit(&self, state: &ApiState, n: usize) -> Result<(), ApiError> {
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        self.0.jobs_admit(Some(&state.index), n).await.map_err(|throttled| {
            let message = if throttled.never {
                format!(
                    "{} may not create {n} jobs at once: its job rate is lower; send smaller batches",
                    self.who()
                )
            } else {
                format!("{} creates jobs faster than its job rate", self.who())
            };
            rate_limited(throttled, message)
        })
    }

    /// The API's store, writing as this caller in the jobs' history.
    pub fn store(&self, state: &ApiState) -> Store {
        state
            .store
            .with_actor(&self.0.actor())
            .with_quota(self.0.quota)
    }

    /// [`Caller::store`] for creating jobs on `topics`: when one of them
    /// groups its jobs by token (`group_by = "token"`), the jobs are noted
    /// as this token's (`token_jobs`, as a quota's are, without a limit
    /// unless it has one), so its tenant's group is the one no key or
    /// header can forge.
    pub fn store_creating<'a>(
        &self,
        state: &ApiState,
        mut topics: impl Iterator<Item = &'a str>,
    ) -> Store {
        let noted = self.0.quota.or_else(|| {
            self.0
                .token_id
                .filter(|_| topics.any(|topic| state.controls.grouped_by_token(topic)))
        });
        state.store.with_actor(&self.0.actor()).with_quota(noted)
    }

    /// The jobs service, writing as this caller.
    pub fn jobs(&self, state: &ApiState) -> Jobs {
        state.jobs().writing_as(self.store(state))
    }

    /// [`Caller::jobs`] for creating jobs on `topics` (see
    /// [`Caller::store_creating`]).
    pub fn jobs_creating<'a>(
        &self,
        state: &ApiState,
        topics: impl Iterator<Item = &'a str>,
    ) -> Jobs {
        state.jobs().writing_as(self.store_creating(state, topics))
    }

    pub fn resolver(&self, state: &ApiState) -> Resolver {
        state.resolver.with_store(self.store(state))
    }
}

fn rate_limited(throttled: Throttled, message: String) -> ApiError {
    // Whole seconds, rounded up: Retry-After has no fractions.
    let retry_after = throttled.retry_after.max(Duration::from_millis(1));
    ApiError::RateLimited {
        retry_after_s: retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0),
        message,
    }
}

/// The caller behind `headers`: their token, or the anonymous caller when
/// `auth = none`.
pub async fn caller_of(state: &ApiState, headers: &HeaderMap) -> Result<Arc<Principal>, ApiError> {
    if let Some(anonymous) = &state.anonymous {
        return Ok(anonymous.clone());
    }
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(ApiError::Unauthorized(
            "send Authorization: Bearer <token> (tickler token create makes one)".to_owned(),
        ));
    };
    let secret = value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, secret)| secret.trim())
        .filter(|secret| !secret.is_empty())
        .ok_or_else(|| {
            ApiError::Unauthorized("the Authorization header is not \"Bearer <token>\"".to_owned())
        })?;
    match state.tokens.authenticate(secret).await {
        Ok(principal) => Ok(principal),
        Err(AuthError::Unknown) => Err(ApiError::Unauthorized(
            "the token is unknown or revoked".to_owned(),
        )),
        Err(AuthError::Unavailable(err)) => {
            tracing::warn!(error = %err, "cannot check a token: api_tokens unreadable");
            Err(ApiError::Unavailable)
        }
    }
}

/// Every `/v1` request: the caller is known, within their request rate,
/// and a write is a same-origin JSON request. Nothing of the body is read
/// before all of that holds.
pub async fn authenticate(
    State(state): State<ApiState>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = match caller_of(&state, request.headers()).await {
        Ok(principal) => principal,
        Err(err) => return err.into_response(),
    };
    let caller = Caller(principal);
    if let Err(throttled) = caller.0.request_admit(Some(&state.index)).await {
        let message = format!("{} makes requests faster than its rate", caller.who());
        return rate_limited(throttled, message).into_response();
    }
    if let Err(err) = browser_safe(request.method(), request.headers()) {
        return err.into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// A write (POST, PATCH) must say `application/json` and may not come from
/// another origin. A web page can send a form or `text/plain` cross-origin
/// without asking; `application/json` makes the browser ask first (a
/// preflight `OPTIONS`), which tickler never grants. DELETE always needs
/// that preflight, and so does any request with an `Authorization: Bearer`
/// header: a POST without a body and without a content type that carries
/// one (`pause`, `redrive`, as generated clients send them) is taken.
fn browser_safe(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    if !matches!(*method, Method::POST | Method::PATCH | Method::DELETE) {
        return Ok(());
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        let origin_host = origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .map(|(_, authority)| authority);
        if origin_host.is_none() || origin_host != host {
            return Err(ApiError::CrossOrigin(format!(
                "a request from origin {:?} may not change jobs",
                String::from_utf8_lossy(origin.as_bytes())
            )));
        }
    }
    if *method == Method::DELETE {
        return Ok(());
    }
    // Only a bearer token: a browser attaches Basic (or other) credentials
    // it has cached by itself, even to a page's cross-origin request, and
    // such a request may come without a content type and without a body.
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.get(..7))
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer "));
    let bodyless = !headers.contains_key(header::CONTENT_TYPE)
        && !headers.contains_key(header::TRANSFER_ENCODING)
        && headers
            .get(header::CONTENT_LENGTH)
            .is_none_or(|length| length.as_bytes() == b"0");
    if bodyless && bearer {
        return Ok(());
    }
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| {
            let essence = essence.trim();
            essence.eq_ignore_ascii_case("application/json")
                || (essence.len() > 5 && {
                    let lower = essence.to_ascii_lowercase();
                    lower.starts_with("application/") && lower.ends_with("+json")
                })
        });
    if !json {
        return Err(ApiError::UnsupportedMediaType(
            "send content-type: application/json (a POST without a body included)".to_owned(),
        ));
    }
    Ok(())
}

/// Reads the whole body within `api.body_timeout_ms` (408 after it) and
/// at most `limit` bytes (413), so a slow client cannot hold a worker.
pub async fn body_deadline(
    State(state): State<ApiState>,
    request: Request,
    next: Next,
) -> Response {
    let limit = super::body_limit(&state.config);
    let wait = Duration::from_millis(state.config.api.body_timeout_ms);
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(wait, axum::body::to_bytes(body, limit)).await {
        Err(_) => return ApiError::BodyTimeout(wait.as_millis() as u64).into_response(),
        Ok(Err(err)) => {
            let too_large = std::error::Error::source(&err)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if too_large {
                ApiError::BodyTooLarge.into_response()
            } else {
                ApiError::InvalidRequest(format!("the request body could not be read: {err}"))
                    .into_response()
            };
        }
        Ok(Ok(bytes)) => bytes,
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn writes_must_be_json_and_same_origin() {
        let json = headers(&[("content-type", "application/json; charset=utf-8")]);
        assert!(browser_safe(&Method::POST, &json).is_ok());
        assert!(browser_safe(&Method::PATCH, &json).is_ok());
        let problem =
            |method: &Method, pairs| browser_safe(method, &headers(pairs)).unwrap_err().code();
        assert_eq!(problem(&Method::POST, &[]), "unsupported_media_type");
        assert_eq!(
            problem(
                &Method::POST,
                &[("content-type", "application/x-www-form-urlencoded")]
            ),
            "unsupported_media_type"
        );
        assert_eq!(
            problem(&Method::POST, &[("content-type", "text/plain")]),
            "unsupported_media_type"
        );
        assert_eq!(
            problem(
                &Method::POST,
                &[
                    ("content-type", "application/json"),
                    ("origin", "https://evil.example"),
                    ("host", "tickler:8080")
                ]
            ),
            "cross_origin"
        );
        assert_eq!(
            problem(
                &Method::DELETE,
                &[("origin", "null"), ("host", "tickler:8080")]
            ),
            "cross_origin"
        );
        // A page cannot send an Authorization header without a preflight:
        // a bodyless POST with one needs no content type; with a body it does.
        let bearer = headers(&[("authorization", "Bearer tkl_x")]);
        assert!(browser_safe(&Method::POST, &bearer).is_ok());
        assert_eq!(
            problem(
                &Method::POST,
                &[("authorization", "Bearer tkl_x"), ("content-length", "2")]
            ),
            "unsupported_media_type"
        );
        // Credentials a browser sends by itself (Basic, cached) do not count,
        // nor does a bearer request that names another content type.
        assert_eq!(
            problem(&Method::POST, &[("authorization", "Basic dTpw")]),
            "unsupported_media_type"
        );
        assert_eq!(
            problem(
                &Method::POST,
                &[
                    ("authorization", "Bearer tkl_x"),
                    ("content-type", "text/plain")
                ]
            ),
            "unsupported_media_type"
        );
        assert_eq!(
            problem(
                &Method::POST,
                &[
                    ("authorization", "Bearer tkl_x"),
                    ("transfer-encoding", "chunked")
                ]
            ),
            "unsupported_media_type"
        );
        let same = headers(&[
            ("content-type", "application/json"),
            ("origin", "http://tickler:8080"),
            ("host", "tickler:8080"),
        ]);
        assert!(browser_safe(&Method::POST, &same).is_ok());
        assert!(browser_safe(&Method::DELETE, &HeaderMap::new()).is_ok());
        assert!(browser_safe(&Method::GET, &HeaderMap::new()).is_ok());
        assert!(browser_safe(
            &Method::POST,
            &headers(&[("content-type", "application/problem+json")])
        )
        .is_ok());
    }
}

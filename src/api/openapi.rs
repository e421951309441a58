//! The OpenAPI 3.1 description of the API, generated from the handlers'
//! types and `#[utoipa::path]` attributes, served at `/v1/openapi.json`.

use axum::Json;
use utoipa::openapi::path::Operation;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use super::error::{ErrorBody, ErrorDetail};
use super::{
    audit, bulk, dev, forecast, holds, jobs, query, results, schedule_audit, schedule_runs,
    schedules, stats, topics,
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "tickler",
        description = "A durable scheduler for delayed Kafka messages: schedule, change, cancel and follow jobs. Every /v1 call needs `Authorization: Bearer <token>` (docs/security.md); errors have a stable `error.code` (docs/api.md#errors)."
    ),
    paths(
        jobs::create,
        jobs::create_batch,
        jobs::get,
        jobs::patch,
        jobs::cancel,
        query::list,
        query::history,
        results::report,
        results::redrive,
        holds::release,
        bulk::start,
        bulk::get,
        bulk::list,
        stats::get,
        forecast::get,
        audit::list,
        schedules::create,
        schedules::list,
        schedules::get,
        schedules::patch,
        schedules::delete,
        schedules::pause,
        schedules::resume,
        schedules::preview,
        schedule_audit::get,
        schedule_runs::trigger,
        schedule_runs::backfill,
        topics::list,
        topics::get,
        topics::patch,
        topics::pause,
        topics::resume,
        super::healthz,
        super::readyz,
        dev::clock_get,
        dev::clock_advance,
    ),
    components(schemas(ErrorBody, ErrorDetail)),
    security(("bearer" = [])),
    modifiers(&Common),
    tags(
        (name = "jobs", description = "Schedule, read, change and cancel jobs"),
        (name = "results", description = "Consumers' reports, and redriving dead jobs"),
        (name = "operations", description = "Bulk changes, the stores' state, the forecast and the audit log"),
        (name = "schedules", description = "Recurring schedules: each occurrence becomes a job"),
        (name = "topics", description = "Pause, resume and pace a topic's dispatch"),
        (name = "dev", description = "`tickler dev` only (a service's own tests): the virtual clock. `tickler serve` answers 404"),
    )
)]
pub struct ApiDoc;

/// The bearer scheme, and the error answers any operation may give.
struct Common;

/// Errors every operation may answer, beside those it documents itself.
const ERRORS: [(&str, &str); 9] = [
    ("400", "Bad input (`invalid_*` codes); nothing was written"),
    ("401", "No token, or an unknown or revoked one (`unauthorized`)"),
    ("403", "The token lacks the scope or the topic (`forbidden_scope`, `forbidden_topic`, `cross_origin`)"),
    ("404", "No such job, schedule or operation (`not_found`)"),
    ("409", "The job's or schedule's state refuses it now (`version_conflict`, `key_conflict`, ...)"),
    ("413", "Body, URI or headers too large"),
    ("415", "Not `content-type: application/json`"),
    ("429", "Over the token's rate (`rate_limited`; see Retry-After) or its quota (`quota_exceeded`)"),
    ("503", "MySQL does not answer (`unavailable`); nothing was written, try again"),
];

impl Modify for Common {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let error = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
        };
        for (path, item) in openapi.paths.paths.iter_mut() {
            let operations: [&mut Option<Operation>; 4] = [
                &mut item.get,
                &mut item.post,
                &mut item.patch,
                &mut item.delete,
            ];
            for operation in operations.into_iter().flatten() {
                if path == "/healthz" {
                    continue;
                }
                for (status, description) in ERRORS {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error(description).into());
                }
            }
        }
    }
}

/// `GET /v1/openapi.json` — this description; no token needed.
pub async fn get() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

//! `GET` and `POST /v1/dev/clock`: `tickler dev`'s virtual clock, for a
//! service's own tests ("a reminder 30 days out" in a second). The routes
//! exist only under `tickler dev`; `tickler serve` answers 404.

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::{ApiError, ApiJson, ApiState};
use crate::domain::clock::{AdvanceError, ADVANCE_MOST_MS};
use crate::domain::job::time_format;
use crate::roles::auth::Scope;
use crate::store::StoreError;

/// Body of `POST /v1/dev/clock`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ClockAdvance {
    /// How far to move the clock forward, in ms (1 to ten years).
    pub advance_ms: i64,
}

/// The virtual clock.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ClockView {
    /// tickler's now: the database's clock plus `offset_ms`, as MySQL
    /// reads it.
    pub now: String,
    /// How far the clock has been moved since `tickler dev` started.
    pub offset_ms: i64,
}

/// `GET /v1/dev/clock` — tickler's now and how far it has been moved.
#[utoipa::path(
    get, path = "/v1/dev/clock", operation_id = "dev_clock_get", tag = "dev",
    responses(
        (status = 200, description = "The virtual clock", body = ClockView),
        (status = 404, description = "Not `tickler dev`: `tickler serve` has no clock to move (`no_route`)", body = super::error::ErrorBody),
    )
)]
pub async fn clock_get(
    State(state): State<ApiState>,
    caller: Caller,
) -> Result<Json<ClockView>, ApiError> {
    caller.require(Scope::Read)?;
    view(&state).await
}

/// `POST /v1/dev/clock` — moves tickler's now forward by `advance_ms`.
/// Jobs, schedules, ack deadlines and expiries then fall due by the moved
/// clock, within a pass of the loader (about a second). The clock never
/// goes back; restarting `tickler dev` puts it back to the database's.
#[utoipa::path(
    post, path = "/v1/dev/clock", operation_id = "dev_clock_advance", tag = "dev",
    request_body = ClockAdvance,
    responses(
        (status = 200, description = "The clock, moved", body = ClockView),
        (status = 404, description = "Not `tickler dev`: `tickler serve` has no clock to move (`no_route`)", body = super::error::ErrorBody),
    )
)]
pub async fn clock_advance(
    State(state): State<ApiState>,
    caller: Caller,
    ApiJson(body): ApiJson<ClockAdvance>,
) -> Result<Json<ClockView>, ApiError> {
    caller.require(Scope::Admin)?;
    let ms = body.advance_ms;
    let clock = state.index.clock();
    if !(1..=ADVANCE_MOST_MS).contains(&ms) {
        return Err(ApiError::InvalidRequest(format!(
            "advance_ms must be between 1 and {ADVANCE_MOST_MS} (ten years)"
        )));
    }
    // Never beside a `tickler serve` (one may have started while the
    // database did not answer): its jobs would fall due early.
    if let Some(row) =
        crate::roles::clock_guard::neighbour_find(&state.store, clock, state.config.instance_ttl())
            .await?
    {
        return Err(ApiError::ClockNeighbour(format!(
            "instance {} on {} is a `tickler serve` alive in this database: the clock is not moved (it would make its jobs due early); give `tickler dev` a database of its own",
            row.id, row.host
        )));
    }
    let offset = clock.offset_ms().saturating_add(ms);
    match state.store.clock_offset_check(offset).await {
        Ok(()) => {}
        // The server refused the value itself: out of its range.
        Err(StoreError::Query(err)) => {
            tracing::info!(error = %err, offset_ms = offset, "the database refused the moved clock");
            return Err(ApiError::InvalidRequest(format!(
                "the database takes no clock {offset} ms ahead of its own (MariaDB before 11.5 stops at 2038-01-19)"
            )));
        }
        // Unavailable, failing over: 503 with Retry-After, nothing moved.
        Err(err) => return Err(err.into()),
    }
    // Leases first, so that no heartbeat or claim looks expired by the
    // moved clock; then the clock.
    state.store.dev_clock_leases_shift(ms).await?;
    match clock.advance(ms) {
        Ok(offset) => tracing::info!(
            advance_ms = ms,
            offset_ms = offset,
            "tickler dev: the clock moved"
        ),
        Err(AdvanceError::Real | AdvanceError::OutOfRange) => {
            return Err(ApiError::NoRoute("/v1/dev/clock".to_owned()))
        }
    }
    state.wake.notify_one();
    view(&state).await
}

async fn view(state: &ApiState) -> Result<Json<ClockView>, ApiError> {
    Ok(Json(ClockView {
        now: time_format(state.store.db_now().await?),
        offset_ms: state.index.clock().offset_ms(),
    }))
}

//! `GET /v1/stats`: the truth as it is now (see [`crate::truth`]), for the
//! dashboard and scripts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use tokio::sync::Mutex;

use super::auth::Caller;
use super::{ApiError, ApiState};
use crate::auth::Scope;
use crate::truth::{Counts, Truth};

/// A computation is reused this long: a dashboard left open in many
/// browsers costs one computation per second at most.
const REUSE: Duration = Duration::from_secs(1);

#[derive(Clone, Default)]
pub struct StatsCache(Arc<Mutex<Cached>>);

/// The last answer and when it was computed, and the last count of jobs.
#[derive(Default)]
struct Cached {
    last: Option<(Instant, Truth)>,
    counts: Counts,
}

/// `GET /v1/stats` — jobs by status and topic (only the token's topics),
/// overdue jobs, the index's drift from MySQL, the next due job, lateness
/// per minute of a recent sample, live instances and dispatchers, and the
/// results consumer's lag.
#[utoipa::path(
    get, path = "/v1/stats", tag = "operations",
    responses((status = 200, description = "The stores as they are now", body = Truth))
)]
pub async fn get(State(state): State<ApiState>, caller: Caller) -> Result<Json<Truth>, ApiError> {
    caller.require(Scope::Read)?;
    let truth = {
        let mut cached = state.stats.0.lock().await;
        let Cached { last, counts } = &mut *cached;
        match last {
            Some((at, truth)) if at.elapsed() < REUSE => truth.clone(),
            _ => {
                let truth =
                    Truth::compute_with(&state.store, &state.index, &state.config, counts).await?;
                *last = Some((Instant::now(), truth.clone()));
                truth
            }
        }
    };
    Ok(Json(truth.only_topics(|topic| caller.0.topic_allowed(topic))))
}

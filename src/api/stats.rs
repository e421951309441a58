//! `GET /v1/stats`: the truth as it is now (see [`crate::roles::reporter::truth`]), for the
//! dashboard and scripts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::Json;
use tokio::sync::Mutex;

use super::auth::Caller;
use super::{ApiError, ApiState};
use crate::roles::auth::Scope;
use crate::roles::reporter::truth::{Counts, Drift, LatenessMinute, Live, OverdueView, Truth};
use crate::store::TopicCount;

/// The answer of `GET /v1/stats`: [`Truth`], with the deployment-wide
/// figures left out (null) for a token limited to some topics — they would
/// tell about other topics' jobs.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Stats {
    pub at: String,
    /// Jobs by status and topic, of the token's topics.
    pub jobs: Vec<TopicCount>,
    pub overdue: Option<OverdueView>,
    pub window: Option<Drift>,
    pub next_due_in_ms: Option<i64>,
    pub lateness: Vec<LatenessMinute>,
    pub instances: Option<Live>,
    pub results_lag: Option<i64>,
    /// The ingress group's lag on each request topic.
    pub ingress_lag: Vec<crate::roles::reporter::truth::IngressLag>,
    /// Schedules by status, those behind, and paused topics.
    pub schedules: Option<crate::store::ScheduleStats>,
    /// The busiest minute ahead of each of the token's topics (the
    /// longest to produce first).
    pub bursts: Vec<crate::roles::reporter::truth::BurstAhead>,
    pub scan_ms: u64,
    /// True when the deployment-wide figures are left out.
    pub partial: bool,
    /// The calling token's quotas and what it holds of them (null: the
    /// token has no quota).
    pub quota: Option<QuotaView>,
    /// The tzdata release this instance resolves local times with.
    pub tzdata: TzdataView,
}

/// A tzdata release and where it was read from.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct TzdataView {
    /// The IANA release (`2025b`).
    pub version: String,
    /// The zoneinfo directory it was read from, or `built-in`.
    pub source: String,
}

impl TzdataView {
    /// This process's.
    pub fn current() -> TzdataView {
        let tzdata = crate::domain::zones::current();
        TzdataView {
            version: tzdata.version().to_owned(),
            source: tzdata.source().to_owned(),
        }
    }
}

/// A token's quotas and usage.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QuotaView {
    pub token: String,
    /// Pending jobs it created, as last counted plus the creates since.
    pub pending_jobs: u64,
    /// Null: no limit.
    pub max_pending_jobs: Option<u64>,
    /// Payload bytes of those jobs.
    pub payload_bytes: u64,
    /// Null: no limit.
    pub max_payload_bytes: Option<u64>,
    /// When the usage was last counted exactly (every
    /// `api.quota_recount_ms`); null before the first count.
    pub counted_at: Option<String>,
}

impl From<crate::store::QuotaUsage> for QuotaView {
    fn from(usage: crate::store::QuotaUsage) -> QuotaView {
        QuotaView {
            token: usage.token,
            pending_jobs: usage.pending_jobs,
            max_pending_jobs: usage.max_pending_jobs,
            payload_bytes: usage.payload_bytes,
            max_payload_bytes: usage.max_payload_bytes,
            counted_at: usage.counted_at.map(crate::domain::job::time_format),
        }
    }
}

impl Stats {
    fn of(truth: Truth, caller: &Caller) -> Stats {
        let all = caller.0.topics.is_none();
        let mut jobs = truth.jobs;
        jobs.retain(|count| caller.0.topic_allowed(&count.topic));
        let mut bursts = truth.bursts;
        bursts.retain(|burst| caller.0.topic_allowed(&burst.topic));
        Stats {
            at: truth.at,
            jobs,
            overdue: all.then_some(truth.overdue),
            window: all.then_some(truth.window),
            next_due_in_ms: truth.next_due_in_ms.filter(|_| all),
            lateness: if all { truth.lateness } else { Vec::new() },
            instances: all.then_some(truth.instances),
            results_lag: truth.results_lag.filter(|_| all),
            ingress_lag: if all { truth.ingress_lag } else { Vec::new() },
            schedules: all.then_some(truth.schedules),
            bursts,
            scan_ms: truth.scan_ms,
            partial: !all,
            quota: None,
            tzdata: TzdataView::current(),
        }
    }
}

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
    get, path = "/v1/stats", operation_id = "stats_get", tag = "operations",
    responses((status = 200, description = "The stores as they are now", body = Stats))
)]
pub async fn get(State(state): State<ApiState>, caller: Caller) -> Result<Json<Stats>, ApiError> {
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
    let mut stats = Stats::of(truth, &caller);
    if let Some(token) = caller.0.quota {
        stats.quota = state.store.quota_usage(token).await?.map(QuotaView::from);
    }
    Ok(Json(stats))
}

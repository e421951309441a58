//! `GET /v1/forecast`: how many jobs fall due in each bucket of a range —
//! the pending jobs MySQL holds, exactly, and the occurrences the active
//! schedules will create there, projected from their timing and bounds.
//! What no other scheduler can say: "3.1 million jobs fall due at
//! 2027-01-01T00:00 on `billing.charge`", ahead of the night.

use std::collections::BTreeMap;

use axum::extract::{Query, State};
use axum::Json;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::auth::Caller;
use super::query::time_parse;
use super::{ApiError, ApiState};
use crate::domain::job::{self, time_format};
use crate::domain::schedule::{self, Buckets, Projected};
use crate::roles::auth::Scope;
use crate::store::{DueCount, ScheduleStatus, Store, StoreError};

/// Most buckets one answer holds.
pub const BUCKETS_MAX: u64 = 10_000;
/// Shortest bucket.
pub const BUCKET_MIN_MS: u64 = 1_000;
/// Occurrences walked to project one cron schedule (an `every_ms` one is
/// counted by arithmetic, whatever its rate).
const CRON_WALK_MAX: usize = 100_000;
/// Schedules read per page while projecting.
const SCHEDULES_PAGE: u32 = 500;
/// The range is read in this many parts side by side, each on its own
/// connection: the scan is what the answer's time is, and MySQL runs each
/// statement on one core.
const PARTS: u64 = 4;

/// One forecast at a time in a process: each holds [`PARTS`] of the API's
/// connections while it reads, and a wide range reads many rows, so a
/// dashboard left open in many browsers must not take the pool from the
/// creates. The others wait their turn.
static FORECASTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// Query of `GET /v1/forecast`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ForecastQuery {
    /// One topic; left out: every topic the token may read.
    pub topic: Option<String>,
    /// Start of the range (RFC 3339); default now, by the database's clock.
    pub from: Option<String>,
    /// End of the range, exclusive (RFC 3339); default a day after `from`.
    pub to: Option<String>,
    /// Bucket length: `1m`, `15m`, `1h`, `1d`, … (at least 1s); default `1h`.
    pub bucket: Option<String>,
}

/// The answer of `GET /v1/forecast`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Forecast {
    pub from: String,
    pub to: String,
    pub bucket_ms: u64,
    /// The database's clock when it was read.
    pub at: String,
    /// Every bucket of the range, in order (the last may end past `to`;
    /// it counts only what is due before `to`).
    pub buckets: Vec<ForecastBucket>,
    /// The range's totals by topic, the busiest first.
    pub topics: Vec<ForecastTopic>,
    /// False when a cron schedule fires so often in the range that its
    /// projection stopped short (after 100,000 occurrences).
    pub projected_complete: bool,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ForecastBucket {
    /// When the bucket starts.
    pub at: String,
    /// Pending jobs due in it.
    pub jobs: u64,
    /// Occurrences schedules will create in it, not yet jobs.
    pub projected: u64,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ForecastTopic {
    pub topic: String,
    pub jobs: u64,
    pub projected: u64,
    /// Its busiest bucket's start and count (jobs and projected).
    pub peak_at: Option<String>,
    pub peak: u64,
}

/// The range asked for, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub bucket_ms: u64,
}

impl ForecastQuery {
    /// Checks the range against `now` (the database's clock).
    pub fn range(&self, now: DateTime<Utc>) -> Result<Range, ApiError> {
        let from = time_parse("from", self.from.clone())?.unwrap_or(now);
        let to = time_parse("to", self.to.clone())?.unwrap_or(from + Duration::days(1));
        let bucket_ms = match &self.bucket {
            None => 3_600_000,
            Some(text) => job::duration_parse(text)
                .map_err(|err| ApiError::InvalidRequest(format!("bucket: {err}")))?
                .max(0) as u64,
        };
        if bucket_ms < BUCKET_MIN_MS {
            return Err(ApiError::InvalidRequest(
                "bucket must be at least 1s".to_owned(),
            ));
        }
        if to <= from {
            return Err(ApiError::InvalidRequest(format!(
                "to {} is not after from {}",
                time_format(to),
                time_format(from)
            )));
        }
        let span_ms = (to - from).num_milliseconds() as u64;
        if span_ms.div_ceil(bucket_ms) > BUCKETS_MAX {
            return Err(ApiError::InvalidRequest(format!(
                "{} buckets of {bucket_ms} ms from {} to {}: at most {BUCKETS_MAX}; give a longer bucket or a shorter range",
                span_ms.div_ceil(bucket_ms),
                time_format(from),
                time_format(to)
            )));
        }
        Ok(Range {
            from: job::truncate_to_ms(from),
            to: job::truncate_to_ms(to),
            bucket_ms,
        })
    }
}

/// `GET /v1/forecast` — pending jobs due per bucket of a range, exactly,
/// and the occurrences active schedules will create there (`projected`),
/// for one topic or every topic the token may read.
#[utoipa::path(
    get, path = "/v1/forecast", operation_id = "forecast_get", tag = "operations",
    params(ForecastQuery),
    responses((status = 200, description = "What falls due, bucket by bucket", body = Forecast))
)]
pub async fn get(
    State(state): State<ApiState>,
    caller: Caller,
    query: Result<Query<ForecastQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Forecast>, ApiError> {
    caller.require(Scope::Read)?;
    let Query(query) = query.map_err(|err| ApiError::InvalidRequest(err.body_text()))?;
    if let Some(topic) = &query.topic {
        job::topic_validate(topic)?;
        caller.topic(topic)?;
    }
    let now = state.store.db_now().await?;
    let range = query.range(now)?;
    let patterns = caller.0.topics.clone();
    // Never closed, so it cannot fail.
    let _turn = FORECASTS.acquire().await.map_err(|_| ApiError::Internal)?;
    let forecast = forecast(
        &state.store,
        range,
        query.topic.as_deref(),
        patterns.as_deref(),
        now,
    )
    .await?;
    Ok(Json(forecast))
}

/// The forecast of `range`: the jobs read in [`PARTS`] parts side by side,
/// then the schedules projected.
pub async fn forecast(
    store: &Store,
    range: Range,
    topic: Option<&str>,
    patterns: Option<&[String]>,
    now: DateTime<Utc>,
) -> Result<Forecast, StoreError> {
    let mut jobs: BTreeMap<String, Buckets> = BTreeMap::new();
    let mut projected: BTreeMap<String, Buckets> = BTreeMap::new();
    let empty = || Buckets::new(range.from, range.to, range.bucket_ms);
    let n = empty().counts.len() as u64;
    // Parts of whole buckets, so that each count lands in one part.
    let per_part = n.div_ceil(PARTS).max(1);
    let parts = (0..n.div_ceil(per_part)).map(|part| {
        let first = part * per_part;
        let from = range.from + Duration::milliseconds((first * range.bucket_ms) as i64);
        let to = (from + Duration::milliseconds((per_part * range.bucket_ms) as i64)).min(range.to);
        async move {
            let counts = store
                .jobs_due_by_bucket(from, to, range.bucket_ms, topic, patterns)
                .await?;
            Ok::<_, StoreError>((first, counts))
        }
    });
    for part in futures::future::join_all(parts).await {
        let (first, counts) = part?;
        for DueCount {
            topic,
            index,
            count,
        } in counts
        {
            let buckets = jobs.entry(topic).or_insert_with(empty);
            if let Some(slot) = buckets.counts.get_mut((first + index) as usize) {
                *slot += count;
            }
        }
    }
    let complete = schedules_project(store, range, topic, patterns, now, &mut projected).await?;
    Ok(assemble(range, now, &jobs, &projected, complete))
}

/// Counts into `projected`, by topic, what the active schedules will
/// create in `range`; false when a projection stopped short.
async fn schedules_project(
    store: &Store,
    range: Range,
    topic: Option<&str>,
    patterns: Option<&[String]>,
    now: DateTime<Utc>,
    projected: &mut BTreeMap<String, Buckets>,
) -> Result<bool, StoreError> {
    let mut complete = true;
    let mut after = 0;
    loop {
        let page = store
            .schedule_list(
                topic,
                Some(ScheduleStatus::Active),
                patterns,
                after,
                SCHEDULES_PAGE,
            )
            .await?;
        for row in &page {
            let Ok(timing) = row.def.timing() else {
                continue;
            };
            let buckets = projected
                .entry(row.topic.clone())
                .or_insert_with(|| Buckets::new(range.from, range.to, range.bucket_ms));
            // Occurrences not yet decided: after the cursor, and not in the
            // past (those are the materializer's misfires to decide).
            let cursor = row
                .cursor_at
                .max(now)
                .max(row.def.start_at - Duration::milliseconds(1));
            let (_, stopped) = schedule::project(
                Projected {
                    timing: &timing,
                    cursor,
                    end_at: row.def.end_at,
                    remaining: row
                        .def
                        .max_occurrences
                        .map(|max| u64::from(max.saturating_sub(row.occurrences))),
                },
                buckets,
                CRON_WALK_MAX,
            );
            complete &= !stopped;
        }
        match page.last() {
            Some(last) if page.len() == SCHEDULES_PAGE as usize => after = last.id,
            _ => return Ok(complete),
        }
    }
}

fn assemble(
    range: Range,
    now: DateTime<Utc>,
    jobs: &BTreeMap<String, Buckets>,
    projected: &BTreeMap<String, Buckets>,
    complete: bool,
) -> Forecast {
    let frame = Buckets::new(range.from, range.to, range.bucket_ms);
    let n = frame.counts.len();
    let mut buckets: Vec<ForecastBucket> = (0..n)
        .map(|index| ForecastBucket {
            at: time_format(frame.start_of(index)),
            jobs: 0,
            projected: 0,
        })
        .collect();
    let mut topics: BTreeMap<&str, ForecastTopic> = BTreeMap::new();
    let mut per_topic: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
    for (name, counts) in jobs {
        let slots = per_topic.entry(name).or_insert_with(|| vec![(0, 0); n]);
        for (index, count) in counts.counts.iter().enumerate() {
            slots[index].0 += count;
            buckets[index].jobs += count;
        }
    }
    for (name, counts) in projected {
        if counts.counts.iter().all(|c| *c == 0) {
            continue;
        }
        let slots = per_topic.entry(name).or_insert_with(|| vec![(0, 0); n]);
        for (index, count) in counts.counts.iter().enumerate() {
            slots[index].1 += count;
            buckets[index].projected += count;
        }
    }
    for (name, slots) in per_topic {
        let (peak_index, peak) = slots
            .iter()
            .enumerate()
            .map(|(index, (jobs, projected))| (index, jobs + projected))
            .max_by_key(|(index, total)| (*total, std::cmp::Reverse(*index)))
            .unwrap_or((0, 0));
        topics.insert(
            name,
            ForecastTopic {
                topic: name.to_owned(),
                jobs: slots.iter().map(|(jobs, _)| jobs).sum(),
                projected: slots.iter().map(|(_, projected)| projected).sum(),
                peak_at: (peak > 0).then(|| time_format(frame.start_of(peak_index))),
                peak,
            },
        );
    }
    let mut topics: Vec<ForecastTopic> = topics.into_values().collect();
    topics.sort_by(|a, b| {
        (b.jobs + b.projected)
            .cmp(&(a.jobs + a.projected))
            .then(a.topic.cmp(&b.topic))
    });
    Forecast {
        from: time_format(range.from),
        to: time_format(range.to),
        bucket_ms: range.bucket_ms,
        at: time_format(now),
        buckets,
        topics,
        projected_complete: complete,
    }
}

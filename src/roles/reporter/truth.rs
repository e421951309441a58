//! Gauges from the truth: what MySQL, Redis and Kafka hold right now —
//! jobs by status and topic, overdue jobs, the index's drift from MySQL,
//! the results consumer's lag, recent lateness. [`Truth::compute`] reads
//! them (index range scans only, timed); `/v1/stats` answers with them and
//! the reporter (`crate::roles::reporter`) publishes them as Prometheus gauges.
//!
//! One instance reports: the lowest live id among those running the
//! reconciler. Every other instance reports zero for these gauges (and
//! `tickler_truth_reporter` 0), so `sum` or `max` across instances is the
//! truth; when the reporter dies, the next lowest takes over within a
//! heartbeat and an interval.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, Utc};
use serde::Serialize;

use crate::config::{Config, Role};
use crate::index::Index;
use crate::kafka;
use crate::store::{CountCursor, Overdue, ScheduleStats, Store, StoreError, TopicCount, COUNTED};

/// A schedule whose next occurrence is this far past its time and still not
/// a job is behind (`tickler_schedules_behind`).
pub const SCHEDULE_BEHIND: Duration = Duration::from_secs(60);

/// Lateness samples per status (`dispatched`, `succeeded`) a computation
/// reads: the latest jobs due in the last hour.
const LATENESS_SAMPLE: u32 = 2_000;
const LATENESS_SPAN: Duration = Duration::from_secs(3_600);

/// The topic every topic past `gauges.topics_max` is summed under.
pub const OTHER_TOPICS: &str = "_other";

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Truth {
    pub at: String,
    /// Jobs by status (pending, dispatching, dispatched, dead) and topic.
    pub jobs: Vec<TopicCount>,
    pub overdue: OverdueView,
    pub window: Drift,
    /// Until the next pending job is due (negative: overdue); null when
    /// nothing is pending.
    pub next_due_in_ms: Option<i64>,
    /// Lateness of a sample of recently dispatched jobs, per minute.
    pub lateness: Vec<LatenessMinute>,
    pub instances: Live,
    /// Records on the results topic tickler's consumer group has not
    /// consumed; null when it could not be read.
    pub results_lag: Option<i64>,
    /// Records on each request topic the ingress's group has not
    /// committed; empty without request topics.
    pub ingress_lag: Vec<IngressLag>,
    /// Schedules by status, those behind, and paused topics.
    pub schedules: ScheduleStats,
    /// Each topic's busiest minute in the next `gauges.burst_horizon_ms`,
    /// against what the topic can take; the longest to produce first, at
    /// most [`BURSTS_MAX`].
    pub bursts: Vec<BurstAhead>,
    /// How long this computation took.
    pub scan_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct OverdueView {
    pub count: u64,
    pub oldest_age_ms: i64,
}

/// What the Redis index should hold by MySQL, what it holds, and the
/// difference (positive: Redis lacks jobs). A few in transit is normal.
#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct Drift {
    pub mysql: u64,
    pub redis: Option<u64>,
    pub drift: Option<i64>,
}

/// The ingress group's lag on one request topic.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct IngressLag {
    pub topic: String,
    /// Null when it could not be read.
    pub lag: Option<i64>,
}

#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct Live {
    pub live: usize,
    pub dispatchers: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct LatenessMinute {
    pub minute: String,
    pub count: usize,
    pub p50_ms: i64,
    pub p99_ms: i64,
}

impl Truth {
    /// Reads everything once. A Redis or Kafka that does not answer leaves
    /// its figure null; MySQL not answering is an error.
    pub async fn compute(
        store: &Store,
        index: &Index,
        config: &Config,
    ) -> Result<Truth, StoreError> {
        Truth::compute_with(store, index, config, &mut Counts::default()).await
    }

    /// [`Truth::compute`], going on with the count of jobs by status and
    /// topic in `counts` for at most `gauges.counts_budget_ms` (the one
    /// figure whose cost grows with the table: see [`Counts`]), and finding
    /// the bursts ahead again when they are older than
    /// `gauges.counts_interval_ms`.
    ///
    /// Long because it reads each figure in turn (MySQL's, Redis's, then
    /// Kafka's lags), each a few lines, and builds the answer from them.
    pub async fn compute_with(
        store: &Store,
        index: &Index,
        config: &Config,
        counts: &mut Counts,
    ) -> Result<Truth, StoreError> {
        let started = Instant::now();
        let at = store.db_now().await?;
        let fresh = Duration::from_millis(config.gauges.counts_interval_ms);
        counts
            .step(store, Duration::from_millis(config.gauges.counts_budget_ms))
            .await?;
        let jobs = counts.jobs();
        // A range scan of the next hours' jobs: at the counts' cadence.
        let bursts = match &counts.bursts {
            Some((counted, bursts)) if counted.elapsed() < fresh => bursts.clone(),
            _ => {
                let bursts = bursts_ahead(
                    store,
                    &config.topic_rules(),
                    at,
                    Duration::from_millis(config.gauges.burst_horizon_ms),
                    config.gauges.burst_drain_per_second,
                )
                .await?;
                counts.bursts = Some((Instant::now(), bursts.clone()));
                bursts
            }
        };
        let Overdue {
            count,
            oldest_age_ms,
        } = store.job_overdue().await?;
        let window_mysql = store.job_window_count(config.window()).await?;
        let next_due_in_ms = store.job_next_due_in().await?;
        let sample = store
            .job_lateness_sample(LATENESS_SPAN, LATENESS_SAMPLE)
            .await?;
        let instances = store.instances_list(config.instance_ttl()).await?;
        let schedules = store.schedule_stats(SCHEDULE_BEHIND).await?;
        let window_redis = match index.len().await {
            Ok((due, inflight)) => Some(due + inflight),
            Err(err) => {
                tracing::debug!(error = %err, "truth: redis does not answer");
                None
            }
        };
        let results_lag = match kafka::group_lag(
            &config.kafka.brokers,
            &config.kafka.options,
            &config.results.group,
            &config.results.topic,
        )
        .await
        {
            Ok(lag) => Some(lag),
            Err(err) => {
                tracing::debug!(error = %err, "truth: the results group's lag could not be read");
                None
            }
        };
        let mut ingress_lag = Vec::new();
        for topic in config.ingress.topics.keys() {
            let lag = kafka::group_lag(
                &config.kafka.brokers,
                &config.kafka.options,
                &config.ingress.group,
                topic,
            )
            .await;
            if let Err(err) = &lag {
                tracing::debug!(topic = %topic, error = %err, "truth: the ingress group's lag could not be read");
            }
            ingress_lag.push(IngressLag {
                topic: topic.clone(),
                lag: lag.ok(),
            });
        }
        Ok(Truth {
            at: crate::domain::job::time_format(at),
            jobs,
            overdue: OverdueView {
                count,
                oldest_age_ms,
            },
            window: Drift {
                mysql: window_mysql,
                redis: window_redis,
                drift: window_redis.map(|redis| window_mysql as i64 - redis as i64),
            },
            next_due_in_ms,
            lateness: lateness_by_minute(&sample),
            instances: Live {
                live: instances.iter().filter(|i| i.live).count(),
                dispatchers: instances
                    .iter()
                    .filter(|i| i.live && i.has_role(Role::Dispatcher))
                    .count(),
            },
            results_lag,
            ingress_lag,
            schedules,
            bursts,
            scan_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// The count of jobs by status and topic, made a bounded step at a time,
/// and the last bursts ahead with when they were found.
///
/// A count of every live job is an index-only read of all of them (8 s
/// at 11 M rows, minutes at 100 M): too long for one pass, and growing
/// with the table. So each pass goes on with the count from where the
/// last one stopped, a page of [`COUNT_PAGE`] index entries at a time,
/// for at most `gauges.counts_budget_ms`, one status after the other.
/// Each status's figures are those of its last complete count (exact as
/// of the moment its pages were read; jobs that changed status during a
/// count may be counted in both or in neither); until a status's first
/// count completes, what is counted of it so far. On a table whose live
/// jobs are read within the budget, every pass counts them all, exactly.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Which of [`COUNTED`] is being counted, and where.
    status: usize,
    cursor: Option<CountCursor>,
    partial: BTreeMap<String, u64>,
    started: Option<Instant>,
    /// Each status's last complete count, and when it started.
    done: [Option<(Instant, BTreeMap<String, u64>)>; COUNTED.len()],
    bursts: Option<(Instant, Vec<BurstAhead>)>,
    /// Index entries a page reads; 0: [`COUNT_PAGE`].
    page: u32,
}

/// Index entries one page of the count reads.
pub const COUNT_PAGE: u32 = 5_000;

impl Counts {
    /// A count reading `page` index entries a page (tests).
    pub fn with_page(page: u32) -> Counts {
        Counts {
            page,
            ..Counts::default()
        }
    }

    /// Counts on for at most `budget` (a page at least; no page begun that
    /// the last one's time says would end past it), or until every status
    /// has been counted once in this pass.
    pub async fn step(&mut self, store: &Store, budget: Duration) -> Result<(), StoreError> {
        let began = Instant::now();
        let mut completed = 0;
        loop {
            let status = COUNTED[self.status];
            let cursor = match self.cursor {
                Some(cursor) => cursor,
                None => {
                    self.started = Some(Instant::now());
                    self.partial.clear();
                    CountCursor::Start
                }
            };
            let page_began = Instant::now();
            let (page, next) = store
                .job_count_page(
                    status,
                    cursor,
                    if self.page == 0 {
                        COUNT_PAGE
                    } else {
                        self.page
                    },
                )
                .await?;
            for (topic, n) in page {
                *self.partial.entry(topic).or_insert(0) += n;
            }
            self.cursor = next;
            if next.is_none() {
                let started = self.started.take().unwrap_or(began);
                self.done[self.status] = Some((started, std::mem::take(&mut self.partial)));
                self.status = (self.status + 1) % COUNTED.len();
                completed += 1;
            }
            // Cold index pages (a table larger than the buffer pool) make a
            // page slow: the next is begun only if it would end in time.
            if completed >= COUNTED.len() || began.elapsed() + page_began.elapsed() > budget {
                return Ok(());
            }
        }
    }

    /// Jobs by status and topic: each status's last complete count (what
    /// is counted so far of one never counted through yet).
    pub fn jobs(&self) -> Vec<TopicCount> {
        let mut jobs = Vec::new();
        for (i, status) in COUNTED.iter().enumerate() {
            let counted = match &self.done[i] {
                Some((_, counted)) => counted,
                None if i == self.status => &self.partial,
                None => continue,
            };
            jobs.extend(counted.iter().map(|(topic, n)| TopicCount {
                topic: topic.clone(),
                status: (*status).to_owned(),
                count: *n,
            }));
        }
        jobs
    }

    /// How old the oldest status's figures are (since its count began);
    /// None until every status has been counted through once.
    pub fn age(&self) -> Option<Duration> {
        self.done
            .iter()
            .map(|done| done.as_ref().map(|(started, _)| started.elapsed()))
            .collect::<Option<Vec<Duration>>>()
            .and_then(|ages| ages.into_iter().max())
    }
}

/// Most topics whose burst ahead is named.
pub const BURSTS_MAX: usize = 20;

/// The busiest minute ahead of one topic.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct BurstAhead {
    pub topic: String,
    /// When the minute starts.
    pub at: String,
    /// Pending jobs due in it.
    pub jobs: u64,
    /// What the topic can take, in jobs a second: its pace, or else
    /// `gauges.burst_drain_per_second`.
    pub per_second: u32,
    /// How long producing that minute's jobs takes at that rate: past 60,
    /// the last of them go out that much late, and the minutes after wait
    /// behind them.
    pub drain_seconds: f64,
}

/// Each topic's busiest minute from `now` (the minute it is in) to
/// `horizon` ahead, by the forecast's count, with what the topic can take:
/// its pace (set through the API, or in the configuration), else `drain`.
pub async fn bursts_ahead(
    store: &Store,
    rules: &crate::config::TopicRules,
    now: DateTime<Utc>,
    horizon: Duration,
    drain: u32,
) -> Result<Vec<BurstAhead>, StoreError> {
    const MINUTE_MS: u64 = 60_000;
    let from = now
        .duration_trunc(chrono::Duration::minutes(1))
        .unwrap_or(now);
    let to = now + chrono::Duration::milliseconds(horizon.as_millis() as i64);
    let counts = store
        .jobs_due_by_bucket(from, to, MINUTE_MS, None, None)
        .await?;
    let mut busiest: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for count in counts {
        let slot = busiest.entry(count.topic).or_insert((0, 0));
        if count.count > slot.1 || (count.count == slot.1 && count.index < slot.0) {
            *slot = (count.index, count.count);
        }
    }
    let paces: BTreeMap<String, u32> = store
        .topic_controls()
        .await?
        .into_iter()
        .filter_map(|control| control.max_per_second.map(|pace| (control.topic, pace)))
        .collect();
    let mut bursts: Vec<BurstAhead> = busiest
        .into_iter()
        .map(|(topic, (index, jobs))| {
            let per_second = paces
                .get(&topic)
                .copied()
                .or_else(|| rules.max_per_second_for(&topic))
                .unwrap_or(drain)
                .max(1);
            BurstAhead {
                at: crate::domain::job::time_format(
                    from + chrono::Duration::milliseconds((index * MINUTE_MS) as i64),
                ),
                drain_seconds: jobs as f64 / f64::from(per_second),
                topic,
                jobs,
                per_second,
            }
        })
        .collect();
    bursts.sort_by(|a, b| {
        b.drain_seconds
            .total_cmp(&a.drain_seconds)
            .then_with(|| a.topic.cmp(&b.topic))
    });
    bursts.truncate(BURSTS_MAX);
    Ok(bursts)
}

/// p50 and p99 of lateness per minute of run time, oldest minute first.
pub fn lateness_by_minute(sample: &[(DateTime<Utc>, DateTime<Utc>)]) -> Vec<LatenessMinute> {
    let mut minutes: BTreeMap<DateTime<Utc>, Vec<i64>> = BTreeMap::new();
    for (due, sent) in sample {
        let minute = due
            .duration_trunc(chrono::Duration::minutes(1))
            .unwrap_or(*due);
        minutes
            .entry(minute)
            .or_default()
            .push((*sent - *due).num_milliseconds().max(0));
    }
    minutes
        .into_iter()
        .map(|(minute, mut late)| {
            late.sort_unstable();
            LatenessMinute {
                minute: crate::domain::job::time_format(minute),
                count: late.len(),
                p50_ms: quantile(&late, 0.50),
                p99_ms: quantile(&late, 0.99),
            }
        })
        .collect()
}

/// The `q` quantile of sorted `values` (nearest rank).
fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Counts by (status, topic) with at most `max_topics` topics named: the
/// topics with the most jobs; the others summed under [`OTHER_TOPICS`].
pub fn topics_capped(counts: &[TopicCount], max_topics: usize) -> BTreeMap<(String, String), u64> {
    let mut per_topic: BTreeMap<&str, u64> = BTreeMap::new();
    for count in counts {
        *per_topic.entry(&count.topic).or_default() += count.count;
    }
    let mut ranked: Vec<(&str, u64)> = per_topic.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let named: BTreeSet<&str> = ranked.iter().take(max_topics).map(|(t, _)| *t).collect();
    let mut capped = BTreeMap::new();
    for count in counts {
        let topic = if named.contains(count.topic.as_str()) {
            count.topic.clone()
        } else {
            OTHER_TOPICS.to_owned()
        };
        *capped.entry((count.status.clone(), topic)).or_default() += count.count;
    }
    capped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(topic: &str, status: &str, n: u64) -> TopicCount {
        TopicCount {
            topic: topic.to_owned(),
            status: status.to_owned(),
            count: n,
        }
    }

    #[test]
    fn topics_past_the_cap_are_summed_under_other() {
        let counts = [
            count("a", "pending", 10),
            count("b", "pending", 5),
            count("b", "dead", 1),
            count("c", "pending", 2),
            count("d", "dead", 3),
        ];
        let capped = topics_capped(&counts, 2);
        let key = |s: &str, t: &str| (s.to_owned(), t.to_owned());
        assert_eq!(capped[&key("pending", "a")], 10);
        assert_eq!(capped[&key("pending", "b")], 5);
        assert_eq!(capped[&key("dead", "b")], 1);
        assert_eq!(capped[&key("pending", OTHER_TOPICS)], 2);
        assert_eq!(capped[&key("dead", OTHER_TOPICS)], 3);
        assert_eq!(capped.len(), 5);
        assert_eq!(capped.values().sum::<u64>(), 21, "nothing lost to the cap");
    }

    #[test]
    fn lateness_is_bucketed_by_minute_of_run_time() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let mut sample = Vec::new();
        for late_ms in 1..=100 {
            let due = at("2030-01-01T00:00:10Z");
            sample.push((due, due + chrono::Duration::milliseconds(late_ms)));
        }
        let due = at("2030-01-01T00:01:59.999Z");
        sample.push((due, due + chrono::Duration::milliseconds(7)));
        let minutes = lateness_by_minute(&sample);
        assert_eq!(minutes.len(), 2);
        assert_eq!(minutes[0].minute, "2030-01-01T00:00:00.000Z");
        assert_eq!(
            (minutes[0].count, minutes[0].p50_ms, minutes[0].p99_ms),
            (100, 50, 99)
        );
        assert_eq!(
            (minutes[1].count, minutes[1].p50_ms, minutes[1].p99_ms),
            (1, 7, 7)
        );
    }

    #[test]
    fn quantiles_of_nothing_are_zero() {
        assert_eq!(quantile(&[], 0.5), 0);
        assert_eq!(quantile(&[4], 0.99), 4);
    }
}

//! The claiming half of a dispatcher's pass: ids due within the lookahead
//! claimed in Redis from the shards held, topics' paces applied, and the
//! MySQL compare-and-set, whose every outcome Redis follows at once.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tracing::Instrument;

use super::release::{Claimed, DbClock};
use super::{DispatchReport, Dispatcher, PACE_TICK};
use crate::domain::grouping::{round_robin, Grouping};
use crate::domain::job::{Job, JobId};
use crate::index::Claim;
use crate::metrics;
use crate::roles::membership::Ownership;
use crate::store::JobPacing;

/// How long due jobs held back by their topic's `max_in_flight` wait
/// before they are asked again (and their topic counted again).
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(250);

impl Dispatcher {
    /// Claims in Redis the ids due within the lookahead and wins the
    /// compare-and-set on them; returns what was won, to be sent at each
    /// job's time.
    pub(super) async fn pass(&self) -> (DispatchReport, Option<Claimed>) {
        let span = if crate::telemetry::enabled() {
            tracing::info_span!("dispatch.claim", jobs = tracing::field::Empty)
        } else {
            tracing::Span::none()
        };
        let (report, claimed) = self.pass_claim().instrument(span.clone()).await;
        if claimed.is_some() {
            span.record("jobs", report.dispatched);
        }
        (report, claimed)
    }

    async fn pass_claim(&self) -> (DispatchReport, Option<Claimed>) {
        self.producer_check();
        let mut report = DispatchReport::default();
        let claim_started = Instant::now();
        let ownership = self.ownership.borrow().clone();
        let claims = self.claim_all(&ownership).await;
        let Some(redis_now_ms) = claims.iter().map(|c| c.now_ms).max() else {
            return (report, None);
        };
        metrics::dispatch_stage("claim", claim_started.elapsed());
        report.more = claims
            .iter()
            .any(|c| c.ids.len() >= self.config.batch as usize);
        report.next_in = claims
            .iter()
            .filter_map(|c| c.next_at_ms)
            .min()
            .map(|next| Duration::from_millis(next.saturating_sub(redis_now_ms).max(0) as u64));
        let fence = ownership.fence(claims.iter().filter(|c| !c.ids.is_empty()).map(|c| c.shard));
        let ids: Vec<JobId> = claims.into_iter().flat_map(|c| c.ids).collect();
        report.claimed = ids.len();
        let ids = self.pace(ids, redis_now_ms).await;
        let Some(fence) = fence else {
            return (report, None);
        };

        // Never 0: that is the placeholder of a job no claim holds
        // (`store::dispatch::CLAIM_NONE`).
        let token: u64 = rand::random::<u64>() | 1;
        let cas_started = Instant::now();
        let Some((jobs, clock)) = self
            .cas(&ids, token, &fence, redis_now_ms, &mut report)
            .await
        else {
            return (report, None);
        };
        metrics::dispatch_stage("cas", cas_started.elapsed());
        fail_point_stall!("dispatcher-stall");
        report.dispatched = jobs.len();
        self.pipeline.claimed(jobs.len());
        let retry_at_ms =
            redis_now_ms + (self.config.retry_delay + claim_started.elapsed()).as_millis() as i64;
        (
            report,
            Some(Claimed {
                token,
                producer: self.producer_current(),
                // From before the compare-and-set: its own time, lock
                // waits included, comes out of the window, not the margin.
                send_by: cas_started + self.send_window(),
                claim_started: cas_started,
                incarnation: ownership.incarnation,
                clock,
                retry_at_ms,
                jobs,
            }),
        )
    }

    /// Holds back the jobs of paced topics beyond what each topic's shared
    /// pace lets through now, and windowed jobs beyond the deployment-wide
    /// smoothing pace: they go back to the index, spread at the rate after
    /// the ones held back before them. Returns the ids that go on to the
    /// compare-and-set. Costs nothing while no topic has a pace and nothing
    /// is smoothed.
    async fn pace(&self, ids: Vec<JobId>, redis_now_ms: i64) -> Vec<JobId> {
        let smooth = self.config.smooth_per_second;
        if ids.is_empty()
            || (smooth.is_none()
                && !self.controls.any_paced()
                && !self.controls.any_in_flight_limited())
        {
            return ids;
        }
        let with_token = self.controls.any_grouped_by_token();
        let with_headers = self.controls.any_grouped_by_header();
        let jobs = match self.store.job_pacing(&ids, with_token, with_headers).await {
            Ok(jobs) => jobs,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the topics of claimed jobs to pace them; trying again shortly");
                let retry_at_ms = redis_now_ms + self.config.retry_delay.as_millis() as i64;
                let back: Vec<(JobId, i64)> = ids.iter().map(|id| (*id, retry_at_ms)).collect();
                self.index_requeue(&back).await;
                return Vec::new();
            }
        };
        let jobs = match smooth {
            Some(rate) => self.smooth(jobs, rate, redis_now_ms).await,
            None => jobs,
        };
        // Each topic's controls, asked once per pass.
        let mut controls: HashMap<&str, (Option<u32>, Option<Grouping>)> = HashMap::new();
        let mut paced: BTreeMap<&str, Vec<&JobPacing>> = BTreeMap::new();
        let mut free = Vec::with_capacity(jobs.len());
        for job in &jobs {
            let (rate, grouping) = controls.entry(job.topic.as_str()).or_insert_with(|| {
                (
                    self.controls.rate(&job.topic),
                    self.controls.grouping(&job.topic),
                )
            });
            let grouped_pace = grouping.as_ref().is_some_and(|g| g.per_second.is_some());
            let limited = self.controls.in_flight_limited(&job.topic);
            if rate.is_some() || grouped_pace || limited {
                paced.entry(job.topic.as_str()).or_default().push(job);
            } else {
                free.push(job.id);
            }
        }
        for (topic, jobs) in paced {
            let (rate, grouping) = controls.remove(topic).unwrap_or_default();
            // Each job's group, for a topic limited in flight by group.
            let group_of: HashMap<JobId, String> =
                match (&grouping, self.controls.group_in_flight_limit(topic)) {
                    (Some(grouping), Some(_)) => jobs
                        .iter()
                        .map(|job| {
                            let group =
                                grouping
                                    .by
                                    .group_of(job.key.as_deref(), &job.headers, job.token);
                            (job.id, group)
                        })
                        .collect(),
                    _ => HashMap::new(),
                };
            let ids = match &grouping {
                Some(grouping) => self.pace_groups(topic, grouping, jobs, redis_now_ms).await,
                None => jobs.iter().map(|job| job.id).collect(),
            };
            let ids = self
                .in_flight_admit(topic, ids, &group_of, redis_now_ms)
                .await;
            let Some(rate) = rate else {
                free.extend(ids);
                continue;
            };
            let fair = grouping.is_some();
            let (granted, slot) = match self
                .index
                .pace(topic, ids.len(), rate, PACE_TICK, fair)
                .await
            {
                Ok(answer) => answer,
                Err(err) => {
                    metrics::index_failed("pace", ids.len(), &err);
                    (0, redis_now_ms + self.config.retry_delay.as_millis() as i64)
                }
            };
            free.extend_from_slice(&ids[..granted]);
            let held = &ids[granted..];
            if held.is_empty() {
                continue;
            }
            let back: Vec<(JobId, i64)> = held
                .iter()
                .enumerate()
                .map(|(i, id)| (*id, backlog_slot(slot, i, rate, None)))
                .collect();
            metrics::dispatch_paced(topic, held.len());
            self.index_requeue(&back).await;
        }
        free
    }

    /// A topic's `max_in_flight` and its groups' `group_max_in_flight`
    /// (`group_of` each job, for the latter): the ids beyond what they let
    /// go now wait in the index and are asked again a moment later
    /// (results coming back make room). Returns those that may go, in
    /// their order.
    async fn in_flight_admit(
        &self,
        topic: &str,
        ids: Vec<JobId>,
        group_of: &HashMap<JobId, String>,
        redis_now_ms: i64,
    ) -> Vec<JobId> {
        if !self.controls.in_flight_limited(topic) || ids.is_empty() {
            return ids;
        }
        let share = {
            let ownership = self.ownership.borrow();
            ownership.shards.len() as f64 / f64::from(self.index.shards().max(1))
        };
        // Counted again first when the last count is stale: between
        // passes, every claim let go before has committed and shows in it
        // (a count after this pass's own admission would miss those).
        if let Err(err) = self.controls.in_flight_recount(topic).await {
            tracing::debug!(topic, error = %err, "cannot count a topic's jobs in flight; going by the last count");
        }
        let groups: Vec<&str> = ids
            .iter()
            .map(|id| group_of.get(id).map_or("", String::as_str))
            .collect();
        let admitted = self.controls.in_flight_admit(topic, &groups, share);
        let (go, wait): (Vec<(JobId, bool)>, Vec<(JobId, bool)>) =
            ids.into_iter().zip(admitted).partition(|(_, go)| *go);
        if !wait.is_empty() {
            let again_ms = redis_now_ms + IN_FLIGHT_WAIT.as_millis() as i64;
            let back: Vec<(JobId, i64)> = wait.iter().map(|(id, _)| (*id, again_ms)).collect();
            metrics::dispatch_held("in_flight", back.len());
            self.index_requeue(&back).await;
        }
        go.into_iter().map(|(id, _)| id).collect()
    }

    /// Fair dispatch by tenant: a grouped topic's jobs split by group, each
    /// group held to its own pace (if it has one) with a backlog of its
    /// own, so a burst of one group never queues another's jobs behind it.
    /// Returns the ids that may go, one of each group in turn, so that the
    /// topic's pace, if it has one, serves the groups alike.
    async fn pace_groups(
        &self,
        topic: &str,
        grouping: &Grouping,
        jobs: Vec<&JobPacing>,
        redis_now_ms: i64,
    ) -> Vec<JobId> {
        let mut groups: BTreeMap<String, Vec<JobId>> = BTreeMap::new();
        for job in jobs {
            let group = grouping
                .by
                .group_of(job.key.as_deref(), &job.headers, job.token);
            groups.entry(group).or_default().push(job.id);
        }
        let Some(rate) = grouping.per_second else {
            return round_robin(groups.into_values().collect());
        };
        let answers = join_all(groups.iter().map(|(group, ids)| {
            self.index
                .pace_group(topic, group, ids.len(), rate, PACE_TICK)
        }))
        .await;
        let mut going = Vec::with_capacity(groups.len());
        let mut back = Vec::new();
        for ((_, ids), answer) in groups.into_iter().zip(answers) {
            let (granted, slot) = match answer {
                Ok(answer) => answer,
                Err(err) => {
                    metrics::index_failed("pace", ids.len(), &err);
                    (0, redis_now_ms + self.config.retry_delay.as_millis() as i64)
                }
            };
            back.extend(
                ids[granted..]
                    .iter()
                    .enumerate()
                    .map(|(i, id)| (*id, backlog_slot(slot, i, rate, None))),
            );
            let mut ids = ids;
            ids.truncate(granted);
            going.push(ids);
        }
        if !back.is_empty() {
            metrics::dispatch_paced(topic, back.len());
            self.index_requeue(&back).await;
        }
        round_robin(going)
    }

    /// The deployment-wide smoothing (`dispatcher.smooth_per_second`):
    /// every claimed job counts against the pace, jobs without a window (or
    /// at their window's end) go whatever it says, and windowed ones beyond
    /// it go back to the index, the soonest-ending first, each at most until
    /// a tick before its window's end. Returns the jobs that go on. A Redis failure lets
    /// everything through: smoothing is a courtesy, a job's time is not.
    async fn smooth(&self, jobs: Vec<JobPacing>, rate: u32, redis_now_ms: i64) -> Vec<JobPacing> {
        // A held job comes back at the latest a tick before its window
        // ends, so that its claim and send still fit in it; one that would
        // come back within a tick of now goes now.
        let tick_ms = PACE_TICK.as_millis() as i64;
        let latest = |job: &JobPacing| job.window_end.map(|end| end.timestamp_millis() - tick_ms);
        let (mut flexible, mut going): (Vec<JobPacing>, Vec<JobPacing>) = jobs
            .into_iter()
            .partition(|job| latest(job).is_some_and(|latest| latest > redis_now_ms + tick_ms));
        flexible.sort_by_key(|job| job.window_end);
        let (granted, slot) = match self
            .index
            .smooth(flexible.len(), going.len(), rate, PACE_TICK)
            .await
        {
            Ok(answer) => answer,
            Err(err) => {
                metrics::index_failed("smooth", flexible.len(), &err);
                (flexible.len(), redis_now_ms)
            }
        };
        let held = flexible.split_off(granted.min(flexible.len()));
        going.extend(flexible);
        if held.is_empty() {
            return going;
        }
        let back: Vec<(JobId, i64)> = held
            .iter()
            .enumerate()
            .map(|(i, job)| (job.id, backlog_slot(slot, i, rate, latest(job))))
            .collect();
        metrics::dispatch_smoothed(held.len());
        self.index_requeue(&back).await;
        going
    }

    async fn claim_all(&self, ownership: &Ownership) -> Vec<Claim> {
        let claims = ownership.shards.keys().map(|shard| {
            self.index.job_claim(
                *shard,
                self.config.batch,
                self.config.lease,
                self.config.lookahead,
            )
        });
        let mut out = Vec::with_capacity(ownership.shards.len());
        for result in join_all(claims).await {
            match result {
                Ok(claim) => out.push(claim),
                Err(err) => metrics::index_failed("claim", 0, &err),
            }
        }
        out
    }

    /// The MySQL compare-and-set on the claimed ids; returns the jobs won
    /// (due within the lookahead by the database's clock) and where that
    /// clock stood. Ids not due by then go back to Redis (or out of it,
    /// beyond the window); stale ones are dropped from it.
    ///
    /// Long because it is one step of the hot path with its three outcomes
    /// (won, not due yet, stale), each followed in Redis at once.
    async fn cas(
        &self,
        ids: &[JobId],
        token: u64,
        fence: &crate::store::Fence,
        redis_now_ms: i64,
        report: &mut DispatchReport,
    ) -> Option<(Vec<Job>, DbClock)> {
        let outcome = match self
            .store
            .job_claim_many_with(
                ids,
                token,
                self.config.lease,
                fence,
                self.controls.claim_checks_pauses(),
                self.config.lookahead,
            )
            .await
        {
            Ok(outcome) => outcome,
            Err(err) => {
                tracing::warn!(error = %err, num_jobs = ids.len(), "claim compare-and-set failed");
                let retry_at_ms = redis_now_ms + self.config.retry_delay.as_millis() as i64;
                let back: Vec<(JobId, i64)> = ids.iter().map(|id| (*id, retry_at_ms)).collect();
                self.index_requeue(&back).await;
                report.failed = ids.len();
                return None;
            }
        };
        let answered = Instant::now();
        if !outcome.fenced.is_empty() {
            // This instance lost a shard (paused past its TTL, or handed it
            // back): the ids are the new owner's, due now.
            metrics::dispatch_fenced(outcome.fenced.len());
            let back: Vec<(JobId, i64)> = outcome
                .fenced
                .iter()
                .map(|id| (*id, redis_now_ms))
                .collect();
            self.index_requeue(&back).await;
            self.refresh.notify_one();
        }
        if !outcome.paused.is_empty() {
            // Out of the index while the topic is paused; a resume puts
            // them back.
            metrics::dispatch_held("paused", outcome.paused.len());
            if let Err(err) = self.index.job_remove_many(&outcome.paused).await {
                metrics::index_failed("drop jobs of paused topics", outcome.paused.len(), &err);
            }
        }
        if !outcome.expired.is_empty() {
            metrics::dispatch_held("expired", outcome.expired.len());
            match self.store.job_expire_many(&outcome.expired).await {
                Ok(n) => tracing::info!(num_jobs = n, "jobs past their expires_at expired, unsent"),
                // They stay pending and expired: the next claim tries again.
                Err(err) => tracing::warn!(error = %err, "cannot end expired jobs"),
            }
            if let Err(err) = self.index.job_remove_many(&outcome.expired).await {
                metrics::index_failed("drop expired jobs", outcome.expired.len(), &err);
            }
        }
        if !outcome.unreadable.is_empty() {
            // Set aside as dead by the compare-and-set itself; the others
            // of the pass go on.
            metrics::jobs_unreadable(&outcome.unreadable);
            let ids: Vec<JobId> = outcome.unreadable.iter().map(|(id, _)| *id).collect();
            if let Err(err) = self.index.job_remove_many(&ids).await {
                metrics::index_failed("drop unreadable jobs", ids.len(), &err);
            }
        }
        report.stale = outcome.stale.len();
        report.not_due = outcome.not_due.len();
        metrics::dispatch_cas_lost(outcome.stale.len() + outcome.not_due.len());
        if !outcome.stale.is_empty() {
            if let Err(err) = self.index.job_remove_many(&outcome.stale).await {
                metrics::index_failed("drop stale entries", outcome.stale.len(), &err);
            }
        }
        if !outcome.not_due.is_empty() {
            // Moved later (by hand), or Redis's clock runs ahead of MySQL's:
            // back at the time MySQL will agree it is due — the schedule plus
            // how far Redis is ahead — if that is inside the window, else out
            // of Redis until the loader brings it back.
            let skew_ms = outcome.db_now.map_or(0, |db_now| {
                (redis_now_ms - db_now.timestamp_millis()).max(0)
            });
            let horizon_ms = redis_now_ms + self.config.window.as_millis() as i64;
            let (back, beyond): (Vec<(JobId, i64)>, Vec<(JobId, i64)>) = outcome
                .not_due
                .iter()
                .map(|e| (e.id, e.schedule_time.timestamp_millis() + skew_ms))
                .partition(|(_, ms)| *ms < horizon_ms);
            if skew_ms > 1_000 {
                tracing::warn!(skew_ms, "redis's clock runs ahead of mysql's");
            }
            self.index_requeue(&back).await;
            let beyond: Vec<JobId> = beyond.into_iter().map(|(id, _)| id).collect();
            if let Err(err) = self.index.job_remove_many(&beyond).await {
                metrics::index_failed("drop jobs moved beyond the window", beyond.len(), &err);
            }
        }
        let db_now = outcome.db_now?;
        if outcome.won.is_empty() {
            return None;
        }
        let clock = DbClock {
            db_now_ms: db_now.timestamp_millis(),
            at: answered,
        };
        Some((outcome.won, clock))
    }

    /// How long after its claim a job may still be handed to the producer:
    /// its record then reaches the broker or is given up by the producer
    /// (`message.timeout.ms`) before the claim's lease expires, with a
    /// margin for what is on the wire. Past the lease the reconciler reads
    /// the topic back, and that reading must be final.
    pub(super) fn send_window(&self) -> Duration {
        self.config
            .lease
            .saturating_sub(Duration::from_millis(self.config.message_timeout_ms))
            .saturating_sub(self.config.doubt_margin)
    }

    pub(super) async fn index_requeue(&self, jobs: &[(JobId, i64)]) {
        if let Err(err) = self.index.job_requeue_many(jobs).await {
            // The in-flight lease returns them to the due set anyway.
            metrics::index_failed("requeue", jobs.len(), &err);
        }
    }
}

/// When job `i` (from 0) of those a pace held back goes: `slot + i / rate`,
/// rounded up to a tick, and never after `end` (a window's end, ms).
fn backlog_slot(slot: i64, i: usize, rate: u32, end: Option<i64>) -> i64 {
    let tick_ms = PACE_TICK.as_millis() as i64;
    let at = slot + (i as i64 * 1000) / i64::from(rate.max(1));
    let at = (at + tick_ms - 1) / tick_ms * tick_ms;
    end.map_or(at, |end| at.min(end))
}

#[cfg(test)]
mod tests {
    use super::backlog_slot;

    #[test]
    fn held_jobs_are_spread_at_the_rate_by_tick_and_never_past_their_window() {
        assert_eq!(backlog_slot(1_000, 0, 10, None), 1_000);
        assert_eq!(backlog_slot(1_000, 1, 10, None), 1_100);
        assert_eq!(
            backlog_slot(1_000, 3, 1_000, None),
            1_100,
            "rounded up to a tick"
        );
        assert_eq!(backlog_slot(1_050, 0, 1_000, None), 1_100);
        assert_eq!(backlog_slot(1_000, 50, 10, Some(3_000)), 3_000);
        assert_eq!(backlog_slot(1_000, 5, 10, Some(3_000)), 1_500);
        assert_eq!(
            backlog_slot(1_000, 5, 0, None),
            6_000,
            "a rate of 0 is read as 1"
        );
    }
}

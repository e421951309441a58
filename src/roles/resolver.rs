//! The resolver: applies the outcome of an attempt, whichever channel it
//! comes from — consumers' reports (the results topic, `POST
//! /v1/jobs/{id}/result`), the reconciler's missed ack deadlines, the
//! dispatcher's refused sends — and makes Redis follow, so each channel has
//! one semantics. What an outcome leads to is decided in [`crate::domain::outcome`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::config::{Config, TopicRules};
use crate::domain::job::JobId;
use crate::domain::outcome::ResultReport;
use crate::index::Index;
use crate::metrics;
use crate::store::{Decided, Disposition, Store, StoreError, WindowEntry};

/// `channel` label of the results metrics: a report from the results
/// topic, or through the API.
pub const CHANNEL_TOPIC: &str = "topic";
pub const CHANNEL_HTTP: &str = "http";

/// Applies reports and missed ack deadlines, then makes Redis follow: a job
/// sent back to `pending` inside the window is indexed at once (the loader's
/// scan of edited rows is the safety net if this fails).
#[derive(Clone)]
pub struct Resolver {
    store: Store,
    index: Index,
    /// Which topics have dead letters.
    rules: Arc<TopicRules>,
    /// A retry due within this goes back in Redis at once.
    window: Duration,
    /// Wakes the local dispatcher when a retry enters the window.
    wake: Arc<Notify>,
    /// Wakes the dead-letter producer when a job died.
    dead_letters: Arc<Notify>,
}

impl Resolver {
    /// This resolver, writing through `store` (the API's, for a caller).
    pub fn with_store(&self, store: Store) -> Resolver {
        Resolver {
            store,
            ..self.clone()
        }
    }

    pub fn new(
        store: Store,
        index: Index,
        config: &Config,
        wake: Arc<Notify>,
        dead_letters: Arc<Notify>,
    ) -> Resolver {
        Resolver {
            store,
            index,
            rules: Arc::new(config.topic_rules()),
            window: config.window(),
            wake,
            dead_letters,
        }
    }

    /// Applies `reports` (from `channel`) in one transaction.
    pub async fn reports_apply(
        &self,
        reports: &[ResultReport],
        channel: &'static str,
    ) -> Result<Decided, StoreError> {
        let rules = self.rules.clone();
        let dead_letter = move |topic: &str| rules.dead_letter_for(topic).is_some();
        let settled = self.store.job_report_many(reports, &dead_letter).await?;
        for (report, disposition) in reports.iter().zip(&settled.dispositions) {
            match disposition {
                Disposition::Applied(_) => {
                    metrics::result_applied(channel, report.outcome.as_str());
                }
                Disposition::Ignored(why) => {
                    tracing::debug!(
                        job_id = report.job_id,
                        attempt = report.attempt,
                        reason = why.as_str(),
                        channel,
                        "result report ignored"
                    );
                    metrics::result_ignored(channel, why.as_str());
                }
            }
        }
        self.follow(&settled).await;
        Ok(settled)
    }

    /// Retries (or buries) dispatched jobs whose ack deadline passed.
    pub async fn acks_expire(&self, limit: u32) -> Result<Decided, StoreError> {
        let rules = self.rules.clone();
        let dead_letter = move |topic: &str| rules.dead_letter_for(topic).is_some();
        let settled = self.store.job_ack_expire(limit, &dead_letter).await?;
        metrics::ack_timeouts(settled.retried.len() + settled.dead);
        self.follow(&settled).await;
        Ok(settled)
    }

    /// Counts failed attempts for records of claim `token` the broker
    /// refused for the jobs' own sake (`(job id, why)`). Redis is left to
    /// the dispatcher, which holds these jobs' claims there.
    pub async fn refusals_apply(
        &self,
        token: u64,
        refused: &[(JobId, String)],
    ) -> Result<Decided, StoreError> {
        let rules = self.rules.clone();
        let dead_letter = move |topic: &str| rules.dead_letter_for(topic).is_some();
        let settled = self
            .store
            .job_refuse_many(token, refused, &dead_letter)
            .await?;
        self.count(&settled);
        Ok(settled)
    }

    fn count(&self, settled: &Decided) {
        metrics::jobs_retried(settled.retried.len());
        metrics::jobs_dead(settled.dead);
        if settled.dead_lettered > 0 {
            self.dead_letters.notify_one();
        }
    }

    async fn follow(&self, settled: &Decided) {
        self.count(settled);
        let Some(db_now) = settled.db_now else {
            return;
        };
        let horizon = db_now + self.window;
        // A retry inside the window goes to the due set at its time, out of
        // the in-flight set (a report can come before the dispatcher's mark,
        // which then leaves the entry alone); one beyond it leaves Redis.
        let (inside, beyond): (Vec<&WindowEntry>, Vec<&WindowEntry>) = settled
            .retried
            .iter()
            .partition(|entry| entry.schedule_time < horizon);
        if !beyond.is_empty() {
            let ids: Vec<JobId> = beyond.iter().map(|entry| entry.id).collect();
            if let Err(err) = self.index.job_remove_many(&ids).await {
                // Harmless: the lease expires and the claim finds the row
                // not due, beyond the window.
                metrics::index_failed("drop far retries", ids.len(), &err);
            }
        }
        if inside.is_empty() {
            return;
        }
        let back: Vec<(JobId, i64)> = inside
            .iter()
            .map(|entry| (entry.id, entry.schedule_time.timestamp_millis()))
            .collect();
        match self.index.job_requeue_many(&back).await {
            Ok(_) => self.wake.notify_one(),
            Err(err) => metrics::index_failed("index retried jobs", back.len(), &err),
        }
    }
}

//! The resolver: applies the outcome of an attempt, whichever channel it
//! comes from — consumers' reports (the results topic, `POST
//! /v1/jobs/{id}/result`), the reconciler's missed ack deadlines, the
//! dispatcher's refused sends — and makes Redis follow, so each channel has
//! one semantics. What an outcome leads to is decided in [`crate::domain::outcome`].

use std::sync::Arc;

use tokio::sync::Notify;

use crate::config::{Config, TopicRules};
use crate::domain::job::JobId;
use crate::domain::outcome::ResultReport;
use crate::index::Index;
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::store::{Decided, Disposition, Store, StoreError};

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
    /// Makes Redis follow a retry.
    jobs: Jobs,
    /// Which topics have dead letters.
    rules: Arc<TopicRules>,
    /// Wakes the dead-letter producer when a job died.
    dead_letters: Arc<Notify>,
}

impl Resolver {
    /// This resolver, writing through `store` (the API's, for a caller).
    pub fn with_store(&self, store: Store) -> Resolver {
        Resolver {
            jobs: self.jobs.writing_as(store.clone()),
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
            jobs: Jobs::new(store.clone(), index, config.window(), wake),
            store,
            rules: Arc::new(config.topic_rules()),
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
        if let Some(db_now) = settled.db_now {
            self.jobs.retried(&settled.retried, db_now).await;
        }
    }
}

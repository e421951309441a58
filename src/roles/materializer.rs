//! The materializer: creates the occurrences of recurring schedules as
//! ordinary jobs, ahead of time — every occurrence within
//! `schedules.lookahead_ms`, and always the next one — so that the loader
//! indexes them like any job and every job feature applies to them. It runs
//! with the loader's role, on as many instances as run it: an occurrence's
//! deterministic key and the schedule's row lock make creating one twice
//! impossible.
//!
//! Misfires (occurrences whose time passed while no instance created them)
//! are decided by the schedule's policy: see [`crate::domain::schedule::plan`].

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::config::Config;
use crate::index::Index;
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::service::Service;
use crate::store::{Materialized, Store, StoreError};

/// Schedules looked at per query.
pub const DUE_BATCH: u32 = 200;

/// The materializer's settings.
#[derive(Debug, Clone)]
pub struct MaterializerConfig {
    /// Occurrences due within this are created (`schedules.lookahead_ms`).
    pub lookahead: Duration,
    /// Time between passes (`schedules.interval_ms`).
    pub interval: Duration,
    /// Occurrences due within the loader's window are indexed at once.
    pub window: Duration,
    /// Schedules looked at per query.
    pub batch: u32,
}

impl Default for MaterializerConfig {
    fn default() -> Self {
        MaterializerConfig::from_config(&Config::default())
    }
}

impl MaterializerConfig {
    pub fn from_config(config: &Config) -> Self {
        MaterializerConfig {
            lookahead: Duration::from_millis(config.schedules.lookahead_ms),
            interval: Duration::from_millis(config.schedules.interval_ms),
            window: config.window(),
            batch: DUE_BATCH,
        }
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MaterializeReport {
    /// Occurrences created as jobs.
    pub created: usize,
    /// Occurrences passed over by their schedule's misfire policy.
    pub skipped: u64,
    /// Schedules whose occurrences could not be created (named in the log
    /// and tried again next pass).
    pub failed: usize,
}

pub struct Materializer {
    store: Store,
    /// Indexes the occurrences due within the window.
    jobs: Jobs,
    config: MaterializerConfig,
}

impl Materializer {
    pub fn new(store: Store, index: Index, config: MaterializerConfig, wake: Arc<Notify>) -> Self {
        Materializer {
            jobs: Jobs::new(store.clone(), index, config.window, wake),
            store,
            config,
        }
    }
}

/// A failed pass is logged and tried again next time.
impl Service for Materializer {
    type Report = MaterializeReport;
    type Error = StoreError;
    const NAME: &'static str = "schedule materializer";
    const PASS: &'static str = "schedule pass";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    /// One pass: every schedule whose latest occurrence is within the
    /// lookahead (by the database's clock) gets its next ones.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<MaterializeReport, StoreError> {
        let mut report = MaterializeReport::default();
        let lookahead = self.config.lookahead;
        loop {
            let due = self
                .store
                .schedule_due(lookahead, self.config.batch)
                .await?;
            let mut progressed = false;
            for id in &due {
                // One schedule that fails (a row edited by hand into
                // something the database refuses, say) must not hold up
                // the others: it is named and skipped.
                let done = match self.store.schedule_materialize(*id, lookahead).await {
                    Ok(done) => done,
                    Err(err) if err.is_transient() => return Err(err),
                    Err(err) => {
                        tracing::warn!(schedule_id = id, error = %err, "cannot create this schedule's occurrences; skipping it");
                        report.failed += 1;
                        continue;
                    }
                };
                progressed |= !done.created.is_empty() || done.skipped > 0;
                report.created += done.created.len();
                report.skipped += done.skipped;
                follow(&self.jobs, &done).await;
            }
            // Another page only while this one made progress (a schedule
            // whose next occurrence cannot be created — a duplicate key,
            // say — must not spin the loop).
            if due.len() < self.config.batch as usize || !progressed {
                return Ok(report);
            }
        }
    }

    fn passed(&self, report: &MaterializeReport) -> bool {
        if report.created > 0 {
            tracing::debug!(num_jobs = report.created, "occurrences created");
        }
        false
    }
}

/// Counts what a materialization did and indexes the occurrences due
/// within the window.
pub async fn follow(jobs: &Jobs, done: &Materialized) {
    metrics::schedule_occurrences(done.created.len());
    if done.skipped > 0 {
        metrics::schedule_misfires_skipped(done.skipped);
    }
    if let Some(now) = done.db_now {
        let created: Vec<_> = done.created.iter().collect();
        jobs.index_created(&created, now).await;
    }
}

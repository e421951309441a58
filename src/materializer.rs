//! The materializer: creates the occurrences of recurring schedules as
//! ordinary jobs, ahead of time — every occurrence within
//! `schedule_lookahead_ms`, and always the next one — so that the loader
//! indexes them like any job and every job feature applies to them. It runs
//! with the loader's role, on as many instances as run it: an occurrence's
//! deterministic key and the schedule's row lock make creating one twice
//! impossible.
//!
//! Misfires (occurrences whose time passed while no instance created them)
//! are decided by the schedule's policy: see [`crate::schedule::plan`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::index::{self, Index};
use crate::metrics;
use crate::store::{Materialized, Store, StoreError};

/// Schedules looked at per query.
const DUE_BATCH: u32 = 200;

pub struct Materializer {
    store: Store,
    index: Index,
    config: Arc<Config>,
    /// Wakes the dispatcher when an occurrence is indexed.
    wake: Arc<Notify>,
}

impl Materializer {
    pub fn new(store: Store, index: Index, config: Arc<Config>, wake: Arc<Notify>) -> Self {
        Materializer {
            store,
            index,
            config,
            wake,
        }
    }

    fn lookahead(&self) -> Duration {
        Duration::from_millis(self.config.schedule_lookahead_ms)
    }

    /// Creates occurrences every `schedule_interval_ms` until `cancel`
    /// fires. A failed pass is logged and tried again next time.
    pub async fn run(self, cancel: CancellationToken) {
        tracing::info!(
            lookahead_ms = self.config.schedule_lookahead_ms,
            "schedule materializer started"
        );
        let interval = Duration::from_millis(self.config.schedule_interval_ms);
        loop {
            match self.run_once().await {
                Ok(0) => {}
                Ok(created) => tracing::debug!(num_jobs = created, "occurrences created"),
                Err(err) => crate::metrics::store_failed("schedule pass", &err),
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// One pass: every schedule whose latest occurrence is within the
    /// lookahead gets its next ones. Returns how many jobs were created.
    pub async fn run_once(&self) -> Result<usize, StoreError> {
        let mut created = 0;
        loop {
            let due = self.store.schedule_due(self.lookahead(), DUE_BATCH).await?;
            let mut progressed = false;
            for id in &due {
                // One schedule that fails (a row edited by hand into
                // something the database refuses, say) must not hold up
                // the others: it is named and skipped.
                let done = match self.store.schedule_materialize(*id, self.lookahead()).await {
                    Ok(done) => done,
                    Err(err @ (StoreError::Unavailable(_) | StoreError::Contention(_))) => {
                        return Err(err)
                    }
                    Err(err) => {
                        tracing::warn!(schedule_id = id, error = %err, "cannot create this schedule's occurrences; skipping it");
                        continue;
                    }
                };
                progressed |= !done.created.is_empty() || done.skipped > 0;
                created += done.created.len();
                follow(&self.index, &self.config, &self.wake, &done).await;
            }
            // Another page only while this one made progress (a schedule
            // whose next occurrence cannot be created — a duplicate key,
            // say — must not spin the loop).
            if due.len() < DUE_BATCH as usize || !progressed {
                return Ok(created);
            }
        }
    }
}

/// Counts what a materialization did and indexes the occurrences due
/// within the window.
pub async fn follow(index: &Index, config: &Config, wake: &Notify, done: &Materialized) {
    metrics::schedule_occurrences(done.created.len());
    if done.skipped > 0 {
        metrics::schedule_misfires_skipped(done.skipped);
    }
    if let Some(now) = done.db_now {
        let jobs: Vec<_> = done.created.iter().collect();
        index::follow(index, config.window(), wake, &jobs, now).await;
    }
}

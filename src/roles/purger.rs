//! The purger (part of the reconciler's role): deletes finished jobs past
//! `jobs.retention_days`, with their history, in small batches, and rows of
//! the audit log past `audit.retention_days`. Once a minute;
//! while a purge finds more than one pass's share, it goes on at every
//! reconcile interval until it has caught up, so that the purge keeps pace
//! with any steady rate of jobs.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::metrics;
use crate::roles::service::Service;
use crate::store::{Store, StoreError};

/// The purger's settings.
#[derive(Debug, Clone)]
pub struct PurgerConfig {
    /// Finished jobs older than this are purged; None keeps them.
    pub retention: Option<Duration>,
    /// Time between purges.
    pub interval: Duration,
    /// Time between purges while one is behind (the reconcile interval).
    pub interval_behind: Duration,
    /// Rows per DELETE.
    pub batch: u32,
    /// Most rows one purge deletes: small, so that a large backlog (a first
    /// purge, or a steady rate above this a minute) spreads over passes,
    /// between which the other roles' work goes on.
    pub share: u64,
    /// Rows of the audit log older than this are purged; None keeps them.
    pub audit_retention: Option<Duration>,
}

/// Time between purges of finished jobs past their retention.
pub const INTERVAL: Duration = Duration::from_secs(60);
/// Rows per DELETE.
pub const BATCH: u32 = 1_000;
/// Most rows one purge deletes.
pub const SHARE: u64 = 10_000;

impl PurgerConfig {
    pub fn from_config(config: &Config) -> Self {
        let retention = if config.jobs.retention_ms > 0 {
            Some(Duration::from_millis(config.jobs.retention_ms))
        } else {
            (config.jobs.retention_days > 0)
                .then(|| Duration::from_secs(u64::from(config.jobs.retention_days) * 86_400))
        };
        PurgerConfig {
            retention,
            // A retention shorter than two minutes (a soak's) is kept to
            // within half of itself.
            interval: retention.map_or(INTERVAL, |r| INTERVAL.min(r / 2)),
            interval_behind: Duration::from_millis(config.reconciler.interval_ms),
            batch: BATCH,
            share: SHARE,
            audit_retention: (config.audit.retention_days > 0)
                .then(|| Duration::from_secs(u64::from(config.audit.retention_days) * 86_400)),
        }
    }
}

impl Default for PurgerConfig {
    fn default() -> Self {
        PurgerConfig::from_config(&Config::default())
    }
}

/// What one purge did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PurgeReport {
    /// Jobs deleted, with their history.
    pub purged: u64,
    /// Rows of the audit log deleted.
    pub audit_purged: u64,
}

pub struct Purger {
    store: Store,
    config: PurgerConfig,
    /// The last purge took its whole share: more is waiting.
    behind: bool,
}

impl Purger {
    pub fn new(store: Store, config: PurgerConfig) -> Purger {
        Purger {
            store,
            config,
            behind: false,
        }
    }
}

impl Service for Purger {
    type Report = PurgeReport;
    type Error = StoreError;
    const NAME: &'static str = "purger";
    const PASS: &'static str = "purge";

    fn interval(&self) -> Duration {
        if self.behind {
            self.config.interval_behind
        } else {
            self.config.interval
        }
    }

    /// Deletes finished jobs past the retention, in batches of `batch`, at
    /// most `share` rows. The database's clock decides what is past.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<PurgeReport, StoreError> {
        let audit_purged = match self.config.audit_retention {
            // A few control-plane changes a day: one batch a purge keeps up.
            Some(retention) => self.store.audit_purge(retention, self.config.batch).await?,
            None => 0,
        };
        let Some(retention) = self.config.retention else {
            return Ok(PurgeReport {
                audit_purged,
                ..PurgeReport::default()
            });
        };
        let mut purged = 0;
        while purged < self.config.share {
            let batch = self
                .store
                .job_purge_finished(retention, self.config.batch)
                .await?;
            purged += batch;
            if batch < u64::from(self.config.batch) {
                break;
            }
        }
        self.behind = purged >= self.config.share;
        metrics::jobs_purged(purged);
        Ok(PurgeReport {
            purged,
            audit_purged,
        })
    }

    fn passed(&self, report: &PurgeReport) -> bool {
        if report.purged > 0 {
            tracing::info!(
                purged = report.purged,
                "finished jobs past retention purged"
            );
        }
        if report.audit_purged > 0 {
            tracing::info!(
                purged = report.audit_purged,
                "rows of the audit log past retention purged"
            );
        }
        false
    }
}

//! The loader: moves pending jobs entering the window from MySQL into the
//! Redis index, incrementally. Each pass reads only the slice of time that
//! entered the window since the last pass (a high-water mark), so its cost follows
//! the arrival rate, never the number of far-future jobs.
//!
//! The first pass after start has no high-water mark and indexes everything
//! pending up to the window's end (overdue jobs included): that is how a
//! restarted tickler, or one facing an empty Redis, rebuilds the index.
//!
//! Each pass first checks the index's sentinel keys; if Redis has lost them
//! (FLUSHALL, restart), the high-water mark is dropped and the window re-indexed
//! in that same pass.
//!
//! Each pass re-reads a short overlap below the high-water mark, so a job whose
//! INSERT committed just after a pass read past its time is still found.
//! Re-adding an id is idempotent.
//!
//! Each pass also reads the pending rows *changed* since the last pass (by
//! `updated_at`, not counting fresh inserts): rows moved or requeued by hand
//! with plain SQL, or rescheduled through the API, are re-indexed at their
//! new time — a job moved earlier fires at its new time.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::config::Config;
use crate::index::{Index, IndexError};
use crate::metrics;
use crate::roles::service::{PassError, Service};
use crate::store::{Store, StoreError, WindowEntry};

#[derive(Debug, Clone)]
pub struct LoaderConfig {
    /// Jobs due within this much of now belong in Redis.
    pub window: Duration,
    /// Time between passes.
    pub interval: Duration,
    /// Rows read per query.
    pub batch: u32,
    /// How far below the high-water mark each pass re-reads, and how far back
    /// before the last pass each scan for changed rows starts (covers
    /// transactions that committed after the pass read).
    pub overlap: Duration,
}

/// How far below the high-water mark each pass re-reads: longer than a
/// transaction that inserts jobs stays open.
pub const OVERLAP: Duration = Duration::from_secs(10);

impl LoaderConfig {
    pub fn from_config(config: &Config) -> Self {
        LoaderConfig {
            window: config.window(),
            interval: Duration::from_millis(config.loader.interval_ms),
            batch: config.loader.batch,
            overlap: OVERLAP,
        }
    }
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig::from_config(&Config::default())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Index(#[from] IndexError),
}

/// What one pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadReport {
    /// Jobs added to (or refreshed in) the index.
    pub indexed: usize,
    /// Everything pending before this time is now indexed.
    pub high_water: DateTime<Utc>,
    /// Whether this pass found the index lost and rebuilt it.
    pub rebuilt: bool,
}

pub struct Loader {
    store: Store,
    index: Index,
    config: LoaderConfig,
    wake: Arc<Notify>,
    high_water: Option<DateTime<Utc>>,
    /// Database time of the last scan for changed rows.
    edits_scanned_at: Option<DateTime<Utc>>,
}

impl Loader {
    pub fn new(store: Store, index: Index, config: LoaderConfig, wake: Arc<Notify>) -> Self {
        Loader {
            store,
            index,
            config,
            wake,
            high_water: None,
            edits_scanned_at: None,
        }
    }

    /// Indexes pending rows changed since the last scan and due before
    /// `until`. The first scan looks back one overlap; the full first pass
    /// has indexed everything older.
    async fn load_edited(
        &mut self,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<usize, LoadError> {
        let since = self.edits_scanned_at.unwrap_or(now) - self.config.overlap;
        let mut after = None;
        let mut indexed = 0;
        loop {
            let (page, last) = self
                .store
                .job_list_edited(since, after, until, self.config.batch)
                .await?;
            let entries: Vec<_> = page.iter().map(|e| (e.id, e.schedule_time)).collect();
            self.index.job_add_many(&entries).await?;
            indexed += page.len();
            if page.len() < self.config.batch as usize {
                break;
            }
            after = last;
        }
        self.edits_scanned_at = Some(now);
        Ok(indexed)
    }
}

/// A failed pass is retried from the same high-water mark.
impl Service for Loader {
    type Report = LoadReport;
    type Error = LoadError;
    const NAME: &'static str = "loader";
    const PASS: &'static str = "loader pass";

    fn interval(&self) -> Duration {
        self.config.interval
    }

    /// Database time: the rows' times are compared with it.
    async fn now(&self) -> Result<DateTime<Utc>, LoadError> {
        Ok(self.store.db_now().await?)
    }

    /// One pass at database time `now`: indexes pending jobs due before
    /// `now + window` that entered since the last pass.
    async fn run_once(&mut self, now: DateTime<Utc>) -> Result<LoadReport, LoadError> {
        // Redis lost its data (FLUSHALL, restart without persistence): start
        // over without a high-water mark, re-indexing the whole window now rather
        // than waiting for the reconciler to find jobs overdue.
        let mut rebuilt = false;
        if !self.index.intact().await? {
            if self.high_water.is_some() {
                metrics::index_rebuilt();
                rebuilt = true;
            }
            self.index.mark_intact().await?;
            self.high_water = None;
        }
        let until = now + self.config.window;
        // Never move backwards, even if the database clock does.
        let until = self.high_water.map_or(until, |w| w.max(until));
        let from = self.high_water.map(|w| w - self.config.overlap);
        let mut indexed = 0;
        let mut after: Option<WindowEntry> = None;
        loop {
            let page = self
                .store
                .job_list_pending(from, until, after, self.config.batch)
                .await?;
            let entries: Vec<_> = page.iter().map(|e| (e.id, e.schedule_time)).collect();
            self.index.job_add_many(&entries).await?;
            indexed += page.len();
            after = page.last().copied();
            if page.len() < self.config.batch as usize {
                break;
            }
        }
        self.high_water = Some(until);
        indexed += self.load_edited(now, until).await?;
        if indexed > 0 {
            metrics::loader_indexed(indexed);
            self.wake.notify_one();
        }
        Ok(LoadReport {
            indexed,
            high_water: until,
            rebuilt,
        })
    }

    fn passed(&self, report: &LoadReport) -> bool {
        if report.indexed > 0 {
            tracing::debug!(num_jobs = report.indexed, high_water = %report.high_water, "loader pass");
        }
        false
    }
}

impl PassError for LoadError {
    fn record(&self, pass: &'static str) {
        match self {
            LoadError::Index(err) => metrics::index_failed(pass, 0, err),
            LoadError::Store(err) => metrics::store_failed(pass, err),
        }
    }
}

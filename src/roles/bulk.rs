//! The bulk runner: works through bulk operations (`POST /v1/jobs/bulk`) in
//! batches of one transaction each, those this instance started and those
//! another instance left stalled, and brings Redis along with each batch.
//! The API starts operations; this role carries them out.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Config, TopicRules};
use crate::domain::job::{Job, JobId};
use crate::index::Index;
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::roles::service::Service;
use crate::roles::topic_controls::TopicControls;
use crate::store::{BulkAction, BulkOp, BulkStatus, Store, StoreError};

/// Works through bulk operations: those this instance started, and those
/// another left stalled.
#[derive(Clone)]
pub struct BulkRunner {
    store: Store,
    /// Makes Redis follow what a batch changed.
    jobs: Jobs,
    /// Each topic's policy: a requeue grants the job its topic's attempts.
    rules: Arc<TopicRules>,
    /// The topics' payload schemas: a release without `force` lets a held
    /// job go only if its payload matches its topic's schema now.
    controls: TopicControls,
    runner: BulkRunnerConfig,
    tracker: TaskTracker,
    /// Stops the work of every operation (spawned by the API as well as
    /// taken over): each is resumed from its cursor by whoever finds it
    /// stalled.
    cancel: CancellationToken,
}

/// The runner's settings, with their defaults.
#[derive(Debug, Clone)]
pub struct BulkRunnerConfig {
    /// Jobs per batch: one transaction each.
    pub batch: u32,
    /// Jobs per batch of a release that checks payloads: it reads each
    /// payload (up to `jobs.payload_max_bytes`), so fewer at a time.
    pub checked_batch: u32,
    /// An operation nobody moved for this long is taken over.
    pub stale: Duration,
    /// How often to look for a stalled operation.
    pub adopt_every: Duration,
}

impl Default for BulkRunnerConfig {
    fn default() -> Self {
        BulkRunnerConfig {
            batch: 500,
            checked_batch: 50,
            stale: Duration::from_secs(30),
            adopt_every: Duration::from_secs(5),
        }
    }
}

/// What one look for stalled operations did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BulkRunnerReport {
    /// The operation taken over (and now worked through in the background).
    pub adopted: Option<u64>,
}

impl BulkRunner {
    pub fn new(
        store: Store,
        index: Index,
        config: &Config,
        controls: TopicControls,
        wake: Arc<Notify>,
        tracker: TaskTracker,
        cancel: CancellationToken,
    ) -> BulkRunner {
        BulkRunner {
            jobs: Jobs::new(store.clone(), index, config.window(), wake),
            store,
            rules: Arc::new(config.topic_rules()),
            controls,
            runner: BulkRunnerConfig::default(),
            tracker,
            cancel,
        }
    }

    /// Works through `op` in the background, until done or shutdown.
    pub fn spawn(&self, op: BulkOp) {
        self.tracker.spawn(self.clone().work(op));
    }
}

/// Every `adopt_every`, takes over one operation nobody has moved for
/// `stale`.
impl Service for BulkRunner {
    type Report = BulkRunnerReport;
    type Error = StoreError;
    const NAME: &'static str = "bulk runner";
    const PASS: &'static str = "bulk stalled";

    fn interval(&self) -> Duration {
        self.runner.adopt_every
    }

    /// Takes over one stalled operation, if there is one, and works
    /// through it in the background.
    async fn run_once(&mut self, _now: DateTime<Utc>) -> Result<BulkRunnerReport, StoreError> {
        let owner_token = rand::random::<u64>() >> 1;
        let Some(op) = self
            .store
            .bulk_adopt_stalled(self.runner.stale, owner_token)
            .await?
        else {
            return Ok(BulkRunnerReport::default());
        };
        tracing::warn!(
            bulk = op.id,
            done = op.done,
            total = op.total,
            "taking over a stalled bulk operation"
        );
        let adopted = Some(op.id);
        self.spawn(op);
        Ok(BulkRunnerReport { adopted })
    }
}

impl BulkRunner {
    /// Long because it is one loop with its three exits (done, cancelled,
    /// failed) and the back-off between batches.
    async fn work(self, mut op: BulkOp) {
        let store = self.store.with_actor(&format!("bulk:{}", op.id));
        let size = match op.action {
            BulkAction::Release { force: false } => self.runner.checked_batch,
            _ => self.runner.batch,
        };
        let mut pause = Duration::from_millis(200);
        loop {
            if self.cancel.is_cancelled() {
                // Resumed from its cursor by whoever finds it stalled.
                return;
            }
            let step = async {
                let batch = store.bulk_next(&op, size).await?;
                if batch.is_empty() {
                    return Ok(None);
                }
                let last = batch.last().map(|(id, _)| *id).unwrap_or(op.cursor_id);
                let applied = store
                    .bulk_apply(
                        &op,
                        &batch,
                        |topic| self.rules.policy_for(topic).max_attempts,
                        |job| {
                            self.controls
                                .payload_check(&job.topic, job.payload_kind, &job.payload)
                                .is_ok()
                        },
                    )
                    .await?;
                Ok::<_, StoreError>(Some((batch.len() as u64, last, applied)))
            };
            match step.await {
                Ok(None) => {
                    op.status = BulkStatus::Done;
                    if let Err(err) = store.bulk_finish(&op, BulkStatus::Done, None).await {
                        tracing::warn!(bulk = op.id, error = %err, "recording a finished bulk operation; it is taken over and finished again");
                    }
                    tracing::info!(
                        bulk = op.id,
                        changed = op.changed,
                        skipped = op.skipped,
                        conflicts = op.conflicts,
                        "bulk operation done"
                    );
                    return;
                }
                Ok(Some((_, _, None))) => {
                    // Taken over, or this batch had committed after all.
                    if !self.reread(&store, &mut op).await {
                        tracing::info!(
                            bulk = op.id,
                            "bulk operation taken over by another instance"
                        );
                        return;
                    }
                }
                Ok(Some((examined, last, Some(batch)))) => {
                    op.cursor_id = last;
                    op.done += examined;
                    op.changed += batch.changed.len() as u64;
                    op.skipped += batch.skipped;
                    op.conflicts += batch.conflicts;
                    self.index_follow(&op.action, &batch.changed).await;
                    pause = Duration::from_millis(200);
                    tokio::task::yield_now().await;
                }
                Err(err) if err.is_transient() => {
                    // A hiccup: the batch wrote nothing; try it again.
                    tracing::warn!(bulk = op.id, "bulk batch failed; trying again");
                    metrics::store_failed("bulk batch", &err);
                    tokio::select! {
                        _ = self.cancel.cancelled() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(Duration::from_secs(5));
                    // The batch may have committed before the connection
                    // broke: go on from the cursor the row holds.
                    if !self.reread(&store, &mut op).await {
                        return;
                    }
                }
                Err(err) => {
                    tracing::error!(bulk = op.id, error = %err, "bulk operation failed");
                    if let Err(err) = store
                        .bulk_finish(&op, BulkStatus::Failed, Some(&err.to_string()))
                        .await
                    {
                        tracing::warn!(bulk = op.id, error = %err, "recording a failed bulk operation");
                    }
                    return;
                }
            }
        }
    }

    /// Reads `op` again; false when it is no longer this runner's (taken
    /// over, or finished). A read that fails keeps `op` as it was: the
    /// next batch's compare-and-set on the cursor decides.
    async fn reread(&self, store: &Store, op: &mut BulkOp) -> bool {
        match store.bulk_get(op.id).await {
            Ok(Some(row))
                if row.owner_token == op.owner_token && row.status == BulkStatus::Running =>
            {
                *op = row;
                true
            }
            Ok(_) => false,
            Err(_) => true,
        }
    }

    /// Brings Redis along with a batch's changes; what fails here is
    /// repaired by the loader's scan of edited rows and the reconciler.
    /// A retargeted job keeps its entry (Redis holds ids; the claim reads
    /// the topic back), or gets one if it left a paused topic. A released
    /// job due within the window is indexed, so it goes out at its time (at
    /// once when that has passed). A job still held (shifted or moved with
    /// the filter `held: true`) is kept out: the claim would refuse it.
    async fn index_follow(&self, action: &BulkAction, changed: &[JobId]) {
        if changed.is_empty() {
            return;
        }
        if matches!(action, BulkAction::Cancel {}) {
            self.jobs
                .unindex(changed, "unindex bulk-cancelled jobs")
                .await;
            return;
        }
        let (jobs, now) = match futures::try_join!(
            self.store.job_get_many(changed),
            self.store.db_now()
        ) {
            Ok(read) => read,
            Err(err) => {
                tracing::warn!(error = %err, "reading bulk-changed jobs back; the loader indexes them");
                return;
            }
        };
        let (held, free): (Vec<&Job>, Vec<&Job>) =
            jobs.iter().partition(|job| job.held_at.is_some());
        let held: Vec<JobId> = held.iter().map(|job| job.id).collect();
        self.jobs
            .unindex(&held, "unindex bulk-changed held jobs")
            .await;
        self.jobs.follow(&free, now).await;
    }
}

//! The jobs service: the one way a job is written, from every edge — the
//! API, the Kafka ingress, `tickler import`, the bulk runner, the
//! materializer. Each call writes through the store (MySQL decides), then
//! makes Redis follow and counts, once; it returns the store's outcome,
//! and the edge words it in its own format (JSON, a reply record, a line
//! of a report).
//!
//! What a call does when the process dies right after the store's commit:
//! the row is in MySQL with its new state, and Redis is behind. Nothing is
//! lost: the loader's scan of edited rows indexes a job moved or created
//! inside the window (and the reconciler's overdue probe one already due);
//! the dispatcher's compare-and-set refuses a cancelled job still in Redis,
//! and the reconciler drops it.
//!
//! Creating a job is checked before it gets here, by
//! [`JobRequest::build`](crate::domain::request::JobRequest::build): the
//! service writes what passed.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::Notify;

use crate::domain::clock::Clock;
use crate::domain::job::{Job, JobId, NewJob, Schedule};
use crate::index::{self, Index};
use crate::metrics;
use crate::store::{
    BatchRow, Cancelled, Debounced, HoldReleased, JobChanges, Modified, Redriven, Store,
    StoreError, WindowEntry,
};

/// Writes jobs and makes Redis follow; cheap to clone.
#[derive(Clone)]
pub struct Jobs {
    store: Store,
    index: Index,
    /// A job due within this of the database's now goes into Redis at once.
    window: Duration,
    /// Wakes the local dispatcher when a job enters Redis.
    wake: Arc<Notify>,
}

impl Jobs {
    pub fn new(store: Store, index: Index, window: Duration, wake: Arc<Notify>) -> Jobs {
        Jobs {
            store,
            index,
            window,
            wake,
        }
    }

    /// This service, writing through `store`: the same database as another
    /// actor (an API token, an ingress request topic), or with a quota.
    pub fn writing_as(&self, store: Store) -> Jobs {
        Jobs {
            store,
            ..self.clone()
        }
    }

    /// The store it writes through.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// tickler's now (the stores' clocks; moved only by `tickler dev`).
    pub fn clock(&self) -> &Clock {
        self.index.clock()
    }

    /// Creates one job. None when a job holds its (topic, key) already:
    /// the caller decides whether that one is what it asked for.
    pub async fn create(&self, job: &NewJob) -> Result<Option<Job>, StoreError> {
        match self.store.job_insert(job).await {
            Ok((created, db_now)) => {
                self.created(&[&created], db_now).await;
                Ok(Some(created))
            }
            Err(StoreError::DuplicateKey) => Ok(None),
            Err(err) => Err(err),
        }
    }

    /// Creates `jobs` in one transaction; one row per job, in order:
    /// created, or a duplicate of a (topic, key) a job holds. With
    /// `positions` (the ingress's), each row notes the request record it
    /// came from.
    pub async fn create_many(
        &self,
        jobs: &[&NewJob],
        positions: Option<&[String]>,
    ) -> Result<Vec<BatchRow>, StoreError> {
        let (rows, db_now) = self.store.job_insert_all(jobs, positions).await?;
        let created: Vec<&Job> = rows.iter().filter_map(BatchRow::created).collect();
        self.created(&created, db_now).await;
        Ok(rows)
    }

    /// Creates `job` (keyed), or debounces onto the job holding its
    /// (topic, key): moves it if pending (never past its ceiling), or
    /// starts the next generation once it went out. `max_delay_ms`: the
    /// ceiling after a generation's first request (None: none). With
    /// `position` (the ingress's), the row notes the request record.
    pub async fn debounce(
        &self,
        job: &NewJob,
        max_delay_ms: Option<u64>,
        position: Option<&str>,
    ) -> Result<Debounced, StoreError> {
        let debounced = self.store.job_debounce(job, max_delay_ms, position).await?;
        match &debounced {
            Debounced::Created(created, db_now) | Debounced::Renewed(created, db_now) => {
                self.created(&[created], *db_now).await;
            }
            Debounced::Moved { job, db_now, .. } => self.follow(&[job], *db_now).await,
            Debounced::InFlight(_) => {}
        }
        Ok(debounced)
    }

    /// The job holding (topic, key), if any.
    pub async fn find(&self, topic: &str, key: &str) -> Result<Option<Job>, StoreError> {
        self.store.job_find_by_key(topic, key).await
    }

    /// Changes a pending job still at `version`. With `position` (the
    /// ingress's), the row notes the request record that moved it.
    pub async fn modify(
        &self,
        id: JobId,
        version: u32,
        changes: &JobChanges,
        position: Option<&str>,
    ) -> Result<Modified, StoreError> {
        let modified = match position {
            Some(position) => {
                self.store
                    .job_modify_with_position(id, version, changes, position)
                    .await?
            }
            None => self.store.job_modify(id, version, changes).await?,
        };
        if let Modified::Applied(job, db_now) = &modified {
            self.follow(&[job], *db_now).await;
        }
        Ok(modified)
    }

    /// Cancels a job: `Applied` means it will never be produced.
    pub async fn cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
        let cancelled = self.store.job_cancel(id).await?;
        if let Cancelled::Applied(job) = &cancelled {
            self.unindex(&[job.id], "drop a cancelled job").await;
        }
        Ok(cancelled)
    }

    /// A dead job back to `pending` with `attempts` more attempts, at
    /// `schedule` (now when None).
    pub async fn redrive(
        &self,
        id: JobId,
        attempts: u32,
        schedule: Option<Schedule>,
    ) -> Result<Redriven, StoreError> {
        let redriven = self.store.job_redrive(id, attempts, schedule).await?;
        if let Redriven::Applied(job, db_now) = &redriven {
            tracing::info!(job_id = job.id, attempt = job.attempt, "job redriven");
            self.follow(&[job], *db_now).await;
        }
        Ok(redriven)
    }

    /// Releases a held job still at `version` (`waive`: its current attempt
    /// is sent without the payload schema check); Redis follows.
    pub async fn release_held(
        &self,
        id: JobId,
        version: u32,
        waive: bool,
    ) -> Result<HoldReleased, StoreError> {
        let released = self.store.job_hold_release(id, version, waive).await?;
        if let HoldReleased::Applied(job, db_now) = &released {
            tracing::info!(job_id = job.id, forced = waive, "held job released");
            self.follow(&[job], *db_now).await;
        }
        Ok(released)
    }

    /// Counts jobs this service created, and indexes them.
    async fn created(&self, jobs: &[&Job], db_now: DateTime<Utc>) {
        metrics::jobs_created(jobs.len());
        self.index_created(jobs, db_now).await;
    }

    /// Indexes the jobs another write created (a schedule's occurrences,
    /// in the materializer's transaction) that are due within the window.
    pub async fn index_created(&self, jobs: &[&Job], db_now: DateTime<Utc>) {
        index::follow_created(&self.index, self.window, &self.wake, jobs, db_now).await;
    }

    /// Makes Redis follow jobs MySQL has just changed: indexed at their
    /// time if pending and due within the window, otherwise not in Redis.
    /// A failure is logged, never returned: MySQL has the truth, and the
    /// loader and reconciler repair the index.
    pub async fn follow(&self, jobs: &[&Job], db_now: DateTime<Utc>) {
        index::follow(&self.index, self.window, &self.wake, jobs, db_now).await;
    }

    /// Makes Redis follow attempts that failed and are to be tried again
    /// (the resolver's decisions): a retry inside the window goes to the
    /// due set at its time, out of the in-flight set (a report can come
    /// before the dispatcher's mark, which then leaves the entry alone);
    /// one beyond it leaves Redis.
    pub async fn retried(&self, retried: &[WindowEntry], db_now: DateTime<Utc>) {
        let horizon = db_now + self.window;
        let (inside, beyond): (Vec<&WindowEntry>, Vec<&WindowEntry>) = retried
            .iter()
            .partition(|entry| entry.schedule_time < horizon);
        let far: Vec<JobId> = beyond.iter().map(|entry| entry.id).collect();
        // Harmless if it fails: the lease expires and the claim finds the
        // row not due, beyond the window.
        self.unindex(&far, "drop far retries").await;
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

    /// Takes jobs that will never be produced out of Redis. Harmless when
    /// it fails: the dispatcher's compare-and-set refuses them, and the
    /// reconciler drops them.
    pub async fn unindex(&self, ids: &[JobId], what: &'static str) {
        if ids.is_empty() {
            return;
        }
        if let Err(err) = self.index.job_remove_many(ids).await {
            metrics::index_failed(what, ids.len(), &err);
        }
    }
}

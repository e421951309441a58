//! Occurrences of a schedule a person asks for, beside those the
//! materializer creates on its own: one more, now (a trigger), and the
//! nominal occurrences of a past interval that do not exist (a backfill).
//! Both write through the jobs service, as every create does.
//!
//! A trigger's job has a key of its own (`<schedule key>@trigger-<16 hex>`,
//! or the caller's), never an occurrence's: it takes no nominal
//! occurrence's place. A backfill's jobs have exactly the keys the
//! materializer gives those occurrences ([`occurrence_job`]), so that an
//! occurrence is created once whoever comes first, and a backfill run again
//! creates nothing.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};

use crate::domain::fires::{self, TooMany, FIRES_MAX};
use crate::domain::job::{Job, NewJob, Schedule};
use crate::domain::schedule::{InvalidTiming, Occurrence};
use crate::metrics;
use crate::roles::jobs::Jobs;
use crate::store::{occurrence_job, schedule_job, BatchRow, ScheduleRow, Store, StoreError};

/// Most payload bytes one transaction of a backfill writes (MariaDB's
/// default `max_allowed_packet` is 16 MiB).
const BATCH_BYTES_MAX: usize = 4 << 20;
/// Most jobs one transaction of a backfill writes.
const BATCH_ROWS_MAX: usize = 500;

/// The marker of a trigger's key, after the schedule's key and `@`.
pub const TRIGGER_MARK: &str = "trigger-";

/// A fresh key for a trigger of the schedule keyed `schedule_key`:
/// `<schedule key>@trigger-<16 hex digits>`, 25 characters after the
/// schedule's key as an occurrence's instant is (so it fits wherever an
/// occurrence's key does), and never of the occurrence form.
pub fn trigger_key(schedule_key: &str) -> String {
    format!(
        "{schedule_key}@{TRIGGER_MARK}{:016x}",
        rand::random::<u64>()
    )
}

/// What became of a trigger.
#[derive(Debug)]
pub enum Triggered {
    Created(Job),
    /// The key was the schedule's trigger already: that job, as it is.
    Existing(Job),
    /// The key is held by a job that is not this schedule's.
    Taken(Job),
}

/// Creates one extra occurrence of `schedule`, due at `at`, keyed `key`
/// (a fresh [`trigger_key`] when None). A paused schedule is triggered
/// too: a person asked.
///
/// Crash after the create commits: the job is in MySQL; a trigger sent
/// again with the same key answers it.
pub async fn trigger(
    jobs: &Jobs,
    schedule: &ScheduleRow,
    key: Option<String>,
    at: Schedule,
) -> Result<Triggered, StoreError> {
    let key = key.unwrap_or_else(|| trigger_key(&schedule.key));
    let job = schedule_job(schedule, key, at);
    if let Some(created) = jobs.create(&job).await? {
        metrics::schedule_occurrences(1);
        tracing::info!(
            schedule_id = schedule.id,
            job_id = created.id,
            "schedule triggered"
        );
        return Ok(Triggered::Created(created));
    }
    let key = job.key.as_deref().unwrap_or_default();
    // Purged between the two statements: a moment's bad luck, said as a
    // duplicate (409) rather than hidden.
    let existing = jobs
        .find(&schedule.topic, key)
        .await?
        .ok_or(StoreError::DuplicateKey)?;
    if existing.schedule_id == Some(schedule.id) {
        Ok(Triggered::Existing(existing))
    } else {
        Ok(Triggered::Taken(existing))
    }
}

/// Why a backfill cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum BackfillRefused {
    /// The schedule's timing does not read (a row edited by hand).
    #[error("{0}")]
    Timing(#[from] InvalidTiming),
    #[error(transparent)]
    TooMany(#[from] TooMany),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The nominal occurrences of a schedule in an interval, and which exist.
#[derive(Debug, Clone, Default)]
pub struct BackfillPlan {
    /// The instants the timing gives in [from, to), in order.
    pub expected: Vec<DateTime<Utc>>,
    /// Those whose job exists (any status, until purged).
    pub existing: BTreeSet<DateTime<Utc>>,
}

impl BackfillPlan {
    /// The instants without a job, in order: what a backfill creates.
    pub fn missing(&self) -> Vec<DateTime<Utc>> {
        self.expected
            .iter()
            .filter(|at| !self.existing.contains(at))
            .copied()
            .collect()
    }
}

/// Reads which nominal occurrences of `schedule` in [`from`, `to`) exist:
/// those its timing gives from its `start_at` (not its creation: a
/// backfill may fill the time before it) to its `end_at` (and, once ended,
/// the last one it decided), at most [`FIRES_MAX`]. Writes nothing.
pub async fn backfill_plan(
    store: &Store,
    schedule: &ScheduleRow,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<BackfillPlan, BackfillRefused> {
    let timing = schedule.def.timing()?;
    let mut span = schedule.fires_span(from, to);
    span.after = schedule.def.start_at - Duration::milliseconds(1);
    let expected = fires::expected(&timing, &span, FIRES_MAX)?;
    let existing = store
        .schedule_occurrences_existing(schedule, &expected)
        .await?;
    Ok(BackfillPlan { expected, existing })
}

/// What a backfill created.
#[derive(Debug, Clone, Default)]
pub struct Backfilled {
    /// The instants created, in order.
    pub created: Vec<DateTime<Utc>>,
    /// Instants found existing by the create itself (another writer, the
    /// materializer say, came first since the plan was read).
    pub existing: usize,
}

/// Creates `schedule`'s occurrences at `missing` (from
/// [`BackfillPlan::missing`]), each as the materializer would have — its
/// key, jitter and window — and due at its own instant, in the past: at
/// once, as the misfire policy `fire_all` creates missed ones, with
/// `tickler-scheduled-at` saying when it was due. Written a few hundred
/// at a time, each batch one transaction.
///
/// Crash after a batch commits: those occurrences are jobs; the same
/// backfill sent again finds them and creates the rest.
pub async fn backfill_apply(
    jobs: &Jobs,
    schedule: &ScheduleRow,
    missing: &[DateTime<Utc>],
) -> Result<Backfilled, StoreError> {
    let mut done = Backfilled::default();
    let per_batch = (BATCH_BYTES_MAX / schedule.def.payload.len().max(1)).clamp(1, BATCH_ROWS_MAX);
    for batch in missing.chunks(per_batch) {
        let new: Vec<NewJob> = batch
            .iter()
            .map(|at| {
                occurrence_job(
                    schedule,
                    &Occurrence {
                        at: *at,
                        run_at: *at,
                        expires_at: None,
                    },
                    // Past occurrences, due now: no wall clock to follow.
                    None,
                )
            })
            .collect();
        let refs: Vec<&NewJob> = new.iter().collect();
        let rows = jobs.create_many(&refs, None).await?;
        for (at, row) in batch.iter().zip(&rows) {
            match row {
                BatchRow::Created(_) => done.created.push(*at),
                BatchRow::Duplicate => done.existing += 1,
            }
        }
    }
    metrics::schedule_occurrences(done.created.len());
    tracing::info!(
        schedule_id = schedule.id,
        num_jobs = done.created.len(),
        "schedule backfilled"
    );
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::job::key_is_occurrence_form;
    use crate::domain::schedule::{occurrence_key, SCHEDULE_KEY_MAX_CHARS};

    #[test]
    fn a_trigger_key_is_never_an_occurrence_key_and_fits_where_one_does() {
        let schedule_key = "k".repeat(SCHEDULE_KEY_MAX_CHARS);
        let key = trigger_key(&schedule_key);
        let at = DateTime::parse_from_rfc3339("2027-03-01T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            key.chars().count(),
            occurrence_key(&schedule_key, at).chars().count()
        );
        assert!(key.chars().count() <= 255);
        assert!(!key_is_occurrence_form(&key), "{key}");
        assert!(crate::domain::schedule::occurrence_instant(&key).is_none());
        assert_ne!(trigger_key("a"), trigger_key("a"), "each trigger its own");
    }
}
